"""cloud_eni scenario helper, run on the controller: a moto EC2 account, or what it holds.

``moto_ec2.py URL setup``    -> JSON {instance, subnet, subnet_cidr, security_group}: a VPC with a
                                management and a GPU subnet, a security group and a running instance.
``moto_ec2.py URL describe INSTANCE SUBNET`` -> JSON list of the instance's secondary ENIs in SUBNET
                                (id, mac, ip, device_index, status, owner tag), as the EC2 API reports them.

moto (server mode, ``moto_server``) answers the real EC2 API; nothing leaves this machine.
"""

import json
import sys

import boto3

# moto accepts any key; these are not credentials of any account.
KEY_ID = "AKIAMOLECULEMOTO0000"
SECRET = "molecule-moto-not-a-secret"  # noqa: S105 - moto's throwaway account


def client(url):
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=url, aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET)


def setup(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    mgmt = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    gpu = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.64.0/20")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="gpu", Description="GPU ENIs", VpcId=vpc)["GroupId"]
    instance = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="g5.48xlarge",
                                 SubnetId=mgmt)["Instances"][0]["InstanceId"]
    return {"instance": instance, "subnet": gpu, "subnet_cidr": "10.0.64.0/20", "security_group": sg,
            "key_id": KEY_ID, "secret": SECRET}


def describe(ec2, instance, subnet):
    enis = ec2.describe_network_interfaces(Filters=[
        {"Name": "attachment.instance-id", "Values": [instance]}, {"Name": "subnet-id", "Values": [subnet]}])
    return [{"id": e["NetworkInterfaceId"], "mac": e["MacAddress"], "ip": e["PrivateIpAddress"],
             "device_index": e["Attachment"]["DeviceIndex"], "status": e["Attachment"]["Status"],
             "owner": {t["Key"]: t["Value"] for t in e.get("TagSet", [])}.get("gpucluster-owner")}
            for e in enis["NetworkInterfaces"]]


def main(argv):
    ec2 = client(argv[1])
    out = setup(ec2) if argv[2] == "setup" else describe(ec2, argv[3], argv[4])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
