"""What the cloud_eni tests of the core (``module_utils``) and of the module shell (``modules``)
share: an AWS account in moto, run in server mode, and the recorded Tencent Cloud responses.
"""

from __future__ import annotations

import io
import logging
import urllib.request
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT

RECORDED = ROOT / "tests" / "fixtures_recorded" / "tencentcloud"
REGION = "us-east-1"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def moto_url():
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url, monkeypatch):
    """A fresh moto account: VPC, GPU subnet, management subnet, security group, running instance
    of a single-network-card GPU type (g5.48xlarge; multi-card types: ``aws_multicard``)."""
    import boto3

    for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    urllib.request.urlopen(urllib.request.Request(moto_url + "/moto-api/reset", method="POST")).read()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id=AWS_KEY_ID,
                       aws_secret_access_key=AWS_SECRET)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    mgmt = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    gpu = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.64.0/20")["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName="gpu", Description="GPU ENIs", VpcId=vpc)["GroupId"]
    instance = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="g5.48xlarge",
                                 SubnetId=mgmt)["Instances"][0]["InstanceId"]
    return SimpleNamespace(url=moto_url, ec2=ec2, vpc=vpc, mgmt=mgmt, gpu=gpu, sg=sg, instance=instance)


@pytest.fixture
def aws_multicard(aws):
    """``aws`` plus a stopped p4d.24xlarge (4 network cards, EFA) and a running p5.48xlarge (32 cards),
    with the instance-type data moto serves from AWS's own DescribeInstanceTypes answers."""
    p4d = aws.ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge",
                                SubnetId=aws.mgmt)["Instances"][0]["InstanceId"]
    aws.ec2.stop_instances(InstanceIds=[p4d])
    p5 = aws.ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1, InstanceType="p5.48xlarge",
                               SubnetId=aws.mgmt)["Instances"][0]["InstanceId"]
    aws.p4d, aws.p5 = p4d, p5
    return aws


def recorded_response(request, name):
    """The ``requests`` response to ``request`` whose body is the recorded file ``name``."""
    import requests
    import urllib3

    body = (RECORDED / name).read_bytes()
    raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers={"Content-Type": "application/json"},
                               status=200, reason="OK", version=11, preload_content=False)
    return requests.adapters.HTTPAdapter().build_response(request, raw)
