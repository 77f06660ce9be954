#!/usr/bin/python
"""Ansible module ``cloud_eni``: a thin shell around ``module_utils/cloud_eni.py``."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cloud_eni
short_description: Ensure a GPU node has one secondary elastic network interface (ENI) per GPU
description:
  - "Runs on the controller (C(delegate_to: localhost)) and talks to the cloud API through the
    official SDK (boto3 for AWS EC2, the Tencent Cloud SDK's common and VPC packages for Tencent Cloud VPC)."
  - Makes instance O(instance_id) have O(count) secondary ENIs in subnet O(subnet_id) with
    security groups O(security_groups), creating and attaching the missing ones, and returns
    MAC and private IPv4 address per interface for the node-side C(multi_nic) role.
  - Secondary ENIs already attached in O(subnet_id) count towards O(count), whoever created
    them. ENIs it creates are tagged C(gpucluster-owner=<instance id>); a detached ENI with that
    tag (left by an interrupted run) is attached instead of creating a new one.
  - Never detaches or deletes. When more secondary ENIs than O(count) are attached in the
    subnet, the extra ones are returned in RV(surplus) with a warning and left alone; removing
    an ENI under a running NCCL job breaks the job, so that stays a manual step. There is
    deliberately no C(state=absent)/C(prune) option.
  - Throttled calls (AWS C(RequestLimitExceeded), Tencent Cloud C(RequestLimitExceeded),
    C(LimitExceeded.ActionLimited)) are retried up to 6 times with exponential back-off
    (1 s doubling, 20 s cap, jitter). Quota and subnet-full errors fail with a message naming the
    instance, the option to change and the fix.
  - "API actions: DescribeNetworkInterfaces, CreateNetworkInterface, AttachNetworkInterface
    (AWS EC2 API 2016-11-15; Tencent Cloud VPC API 2017-03-12, where create and attach are
    asynchronous and are polled)."
version_added: "0.1.0"
author: gpucluster
options:
  provider:
    description: Cloud whose API is called.
    type: str
    required: true
    choices: [aws, tencentcloud]
  region:
    description: Region of the instance, e.g. C(us-east-1) or C(ap-guangzhou).
    type: str
    required: true
  instance_id:
    description: Instance (AWS C(i-...), Tencent Cloud CVM C(ins-...)) that gets the ENIs.
    type: str
    required: true
  subnet_id:
    description:
      - Subnet of the GPU ENIs; must be in the instance's VPC and availability zone.
      - Only secondary ENIs in this subnet count towards O(count).
    type: str
    required: true
  security_groups:
    description:
      - Security group ids for new ENIs. Existing ENIs missing one of them give a warning; their
        groups are not changed.
    type: list
    elements: str
    required: true
  count:
    description:
      - Number of secondary ENIs wanted in O(subnet_id). The vendor's design is one per GPU; the
        calling role passes the node's GPU count. Taken as given (0 is allowed).
    type: int
    required: true
  device_index_start:
    description:
      - Lowest device index for new attachments (AWS; 0 is the primary ENI). Indexes already in
        use on the instance are skipped.
      - Ignored by Tencent Cloud, which numbers attachments itself.
      - On AWS instance types with several network cards (p4d, p5) the ENIs are spread evenly
        over the cards with an explicit NetworkCardIndex, from the instance type's
        DescribeInstanceTypes data (card 0 keeps device 0 for the primary ENI).
    type: int
    default: 1
  interface_type:
    description:
      - AWS InterfaceType of new ENIs. V(interface) is an ENA ENI; V(efa) an Elastic Fabric
        Adapter with ENA; V(efa-only) an EFA without IP address. EFAs are placed at device 0 of
        network cards other than 0 and device 1 of card 0, as AWS recommends.
      - EC2 attaches EFAs only to a stopped instance; on a running one the module fails before
        any change and names the launch-template slots instead. Tencent Cloud has no EFA.
    type: str
    choices: [interface, efa, efa-only]
    default: interface
  wait:
    description:
      - Wait after each attach until the ENI is attached before attaching the next and
        returning. New ENIs are always waited for until they are available, since neither
        cloud attaches a pending ENI.
    type: bool
    default: true
  wait_timeout:
    description: Seconds each wait may take before the task fails.
    type: int
    default: 300
  access_key:
    description:
      - AWS access key id or Tencent Cloud SecretId; keep it in ansible-vault.
      - When unset, the SDK's environment is used (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/
        AWS_SESSION_TOKEN and the rest of boto3's chain; TENCENTCLOUD_SECRET_ID/TENCENTCLOUD_SECRET_KEY).
    type: str
    aliases: [aws_access_key_id, secret_id]
  secret_key:
    description: AWS secret access key or Tencent Cloud SecretKey; keep it in ansible-vault.
    type: str
    aliases: [aws_secret_access_key]
  session_token:
    description: Temporary session token (AWS STS, Tencent Cloud CAM role).
    type: str
    aliases: [aws_session_token, security_token]
  endpoint_url:
    description:
      - API endpoint instead of the public one, e.g. a VPC endpoint, a Tencent Cloud finance
        region host (C(https://vpc.ap-shanghai-fsi.tencentcloudapi.com)) or a test server.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Lists the instance's ENIs (read-only API calls) and returns the plan; creates and attaches nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: "Runs where the cloud API is reachable, normally the controller (C(delegate_to: localhost))."
notes:
  - Supports check mode; it lists the instance's ENIs (read-only calls) and returns the plan.
  - AWS instances with several network cards (p4d, p5) limit ENIs per card; this module attaches
    on network card 0 only.
requirements:
  - boto3 (provider aws)
  - tencentcloud-sdk-python-common and tencentcloud-sdk-python-vpc (provider tencentcloud)
"""

EXAMPLES = r"""
- name: One ENI per GPU for this node
  gpucluster.cluster.cloud_eni:
    provider: tencentcloud
    region: ap-guangzhou
    instance_id: "{{ cloud_instance_id }}"
    subnet_id: "{{ cloud_gpu_subnet_id }}"
    security_groups: ["{{ cloud_gpu_security_group }}"]
    count: "{{ __gpu_count }}"  # the calling role passes the node's GPU count
    access_key: "{{ vault_tencentcloud_secret_id }}"
    secret_key: "{{ vault_tencentcloud_secret_key }}"
  delegate_to: localhost
  register: __cloud_eni

- name: Same on AWS, credentials from the controller's environment
  gpucluster.cluster.cloud_eni:
    provider: aws
    region: us-east-1
    instance_id: "{{ cloud_instance_id }}"
    subnet_id: subnet-0a1b2c3d4e5f67890
    security_groups: [sg-0123456789abcdef0]
    count: 8
  delegate_to: localhost
"""

RETURN = r"""
interfaces:
  description:
    - The secondary ENIs of the instance in O(subnet_id) that make up O(count), in device-index
      order. In check mode only the ones that already exist.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: ENI id.
      type: str
      sample: eni-irk5qhhl
    mac:
      description: MAC address, lower-case and colon-separated, as in /sys/class/net/*/address.
      type: str
      sample: "20:90:6f:62:33:e2"
    private_ip:
      description: Primary private IPv4 address.
      type: str
      sample: 10.0.64.13
    device_index:
      description: Device index of the attachment; null while not attached yet (O(wait=false)).
      type: int
      sample: 1
    network_card_index:
      description: Network card of the attachment (0 on single-card instance types).
      type: int
      sample: 0
    interface_type:
      description: C(interface), C(efa) or C(efa-only), as the cloud reports it.
      type: str
      sample: interface
    status:
      description: One of C(attached), C(attaching), C(available), C(pending), C(detaching).
      type: str
      sample: attached
created:
  description: Ids of the ENIs created in this run (empty in check mode).
  returned: always
  type: list
  elements: str
attached:
  description: Ids of the ENIs attached in this run, created or adopted (empty in check mode).
  returned: always
  type: list
  elements: str
surplus:
  description: Ids of attached secondary ENIs in the subnet beyond O(count); left in place.
  returned: always
  type: list
  elements: str
plan:
  description:
    - What the run does or, in check mode, would do. RV(plan.device_indexes) applies to AWS only.
  returned: always
  type: dict
  contains:
    keep:
      description: Ids of attached ENIs kept.
      type: list
      elements: str
    adopt:
      description: Ids of detached ENIs tagged for this instance that get attached.
      type: list
      elements: str
    create:
      description: Number of ENIs to create.
      type: int
    device_indexes:
      description: Device index for each adopted then each new ENI.
      type: list
      elements: int
    surplus:
      description: Same as RV(surplus).
      type: list
      elements: str
changed:
  description: True when ENIs were (or in check mode would be) created or attached.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpucluster.cluster.plugins.module_utils.cloud_eni import (
    CloudEniError,
    MissingSdkError,
    ensure_enis,
    make_provider,
    redact,
)

ARGUMENT_SPEC = dict(
    provider=dict(type="str", required=True, choices=["aws", "tencentcloud"]),
    region=dict(type="str", required=True),
    instance_id=dict(type="str", required=True),
    subnet_id=dict(type="str", required=True),
    security_groups=dict(type="list", elements="str", required=True),
    count=dict(type="int", required=True),
    device_index_start=dict(type="int", default=1),
    interface_type=dict(type="str", default="interface", choices=["interface", "efa", "efa-only"]),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=300),
    access_key=dict(type="str", no_log=True, aliases=["aws_access_key_id", "secret_id"]),
    secret_key=dict(type="str", no_log=True, aliases=["aws_secret_access_key"]),
    session_token=dict(type="str", no_log=True, aliases=["aws_session_token", "security_token"]),
    endpoint_url=dict(type="str"),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_together=[("access_key", "secret_key")],
    )
    p = module.params
    secrets = (p["access_key"], p["secret_key"], p["session_token"])
    try:
        provider = make_provider(
            p["provider"], p["region"], access_key=p["access_key"], secret_key=p["secret_key"],
            session_token=p["session_token"], endpoint_url=p["endpoint_url"],
        )
        result = ensure_enis(
            provider, p["instance_id"], p["subnet_id"], p["security_groups"], p["count"],
            device_index_start=p["device_index_start"], wait=p["wait"], wait_timeout=p["wait_timeout"],
            check_mode=module.check_mode, interface_type=p["interface_type"],
        )
    except MissingSdkError as exc:
        module.fail_json(msg=f"{missing_required_lib(exc.library)} ({redact(exc, secrets)})")
    except CloudEniError as exc:
        done = exc.result
        module.fail_json(msg=redact(exc, secrets), changed=bool(done.get("created") or done.get("attached")),
                         **done)
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
