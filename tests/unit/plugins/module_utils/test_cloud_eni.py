"""Tests of the cloud_eni core: the pure plan, AWS against moto (server mode) and botocore's
Stubber, Tencent Cloud through the real SDK fed with recorded responses at its HTTP transport.

The Tencent Cloud transport seam: ``tencentcloud.common.http.request.ProxyConnection`` owns a
``requests.Session``; the fixture mounts a ``requests`` adapter on that session which answers
from ``tests/fixtures_recorded/tencentcloud/*.json`` (see the README there). Signing, request
building, error detection (``Response.Error`` -> ``TencentCloudSDKException``) and parsing into
the SDK's response models all run unchanged; the adapter also checks every request's
TC3-HMAC-SHA256 signature against the test key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from datetime import UTC, datetime

import boto3
import pytest
import requests
from ansible_collections.gpucluster.cluster.plugins.module_utils import cloud_eni as ce
from botocore.stub import ANY, Stubber
from tencentcloud.common.http import request as tc_request

from tests.unit.plugins.conftest import AWS_KEY_ID, AWS_SECRET, REGION, recorded_response

TC_REGION = "ap-guangzhou"
TC_SECRET_ID = "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE"
TC_SECRET_KEY = "Gu5t9xGARNpq86cd98joQYCN3EXAMPLE"
TC_INSTANCE = "ins-r8hr2upy"
TC_SUBNET = "subnet-76r802pg"
TC_SG = "sg-05bb4upy"
MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")

# The docs' DescribeNetworkInterfaces example carries SubNetworkInterfaces, which SDK 3.1.195's
# model lacks; the SDK warns and (outside pytest) silences its own UserWarnings.
pytestmark = pytest.mark.filterwarnings("ignore:SubNetworkInterfaces fileds are useless:UserWarning")


class FakeTime:
    """Clock and sleep for the waits and back-offs: records sleeps, advances the clock."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time():
    return FakeTime()


def retry(fake_time):
    """Default policy, but sleeping on the fake clock and with the jitter pinned to its maximum."""
    return ce.RetryPolicy(sleep=fake_time.sleep, rand=lambda: 1.0)


# --------------------------------------------------------------------------------------------
# plan_enis (pure)


def eni(eid, subnet="subnet-gpu", instance="i-1", index=None, primary=False, owner=None, status=None):
    if status is None:
        status = ce.ATTACHED if instance else ce.AVAILABLE
    return ce.Eni(id=eid, mac="02:00:00:00:00:01", private_ip="10.0.1.5", subnet_id=subnet, vpc_id="vpc-1",
                  security_groups=("sg-1",), status=status, instance_id=instance, device_index=index,
                  primary=primary, owner=owner)


PRIMARY = eni("eni-p", subnet="subnet-mgmt", index=0, primary=True)


@pytest.mark.parametrize(
    ("name", "enis", "count", "start", "keep", "adopt", "create", "indexes", "surplus"),
    [
        ("fresh node", [PRIMARY], 8, 1, [], [], 8, [1, 2, 3, 4, 5, 6, 7, 8], []),
        ("partly done", [PRIMARY, eni("eni-a", index=1), eni("eni-b", index=2)], 4, 1,
         ["eni-a", "eni-b"], [], 2, [3, 4], []),
        ("converged", [PRIMARY, eni("eni-b", index=2), eni("eni-a", index=1)], 2, 1,
         ["eni-a", "eni-b"], [], 0, [], []),
        ("more than wanted: lowest indexes kept, nothing removed",
         [PRIMARY, eni("eni-c", index=3), eni("eni-a", index=1), eni("eni-b", index=2)], 2, 1,
         ["eni-a", "eni-b"], [], 0, [], ["eni-c"]),
        ("count 0 keeps nothing and removes nothing", [PRIMARY, eni("eni-a", index=1)], 0, 1, [], [], 0, [],
         ["eni-a"]),
        ("ENI of another subnet does not count but holds its index",
         [PRIMARY, eni("eni-m", subnet="subnet-mgmt", index=1)], 2, 1, [], [], 2, [2, 3], []),
        ("detached ENI of an interrupted run is adopted",
         [PRIMARY, eni("eni-o", instance=None, owner="i-1")], 3, 1, [], ["eni-o"], 2, [1, 2, 3], []),
        ("pending ENI of an interrupted run is adopted too",
         [PRIMARY, eni("eni-o", instance=None, owner="i-1", status=ce.PENDING)], 1, 1, [], ["eni-o"], 0, [1],
         []),
        ("foreign or misplaced detached ENIs are not adopted",
         [PRIMARY, eni("eni-x", instance=None, owner="i-2"), eni("eni-y", instance=None, owner=None),
          eni("eni-z", subnet="subnet-other", instance=None, owner="i-1")], 1, 1, [], [], 1, [1], []),
        ("ENI attached to another instance is ignored",
         [PRIMARY, eni("eni-q", instance="i-2", index=1)], 1, 1, [], [], 1, [1], []),
        ("device_index_start", [PRIMARY], 2, 4, [], [], 2, [4, 5], []),
    ],
)
def test_plan(name, enis, count, start, keep, adopt, create, indexes, surplus):
    plan = ce.plan_enis(enis, "i-1", "subnet-gpu", count, start)
    assert plan.as_result() == {"keep": keep, "adopt": adopt, "create": create, "device_indexes": indexes,
                                "network_cards": [0] * len(indexes), "surplus": surplus}, name
    assert plan.changes == bool(adopt or create)


@pytest.mark.parametrize(("count", "start"), [(-1, 1), (2, 0)])
def test_plan_rejects_bad_input(count, start):
    with pytest.raises(ValueError, match="must be"):
        ce.plan_enis([PRIMARY], "i-1", "subnet-gpu", count, start)


def test_backoff_doubles_up_to_the_cap():
    low = ce.RetryPolicy(rand=lambda: 0.0)
    high = ce.RetryPolicy(rand=lambda: 1.0)
    assert [low.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert [high.delay(n) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 20.0]


def test_redact():
    assert ce.redact(f"key {AWS_SECRET} id {AWS_KEY_ID}", (AWS_SECRET, AWS_KEY_ID, None, "")) == \
        "key ******** id ********"


# --------------------------------------------------------------------------------------------
# AWS against moto in server mode (fixtures ``moto_url`` and ``aws``: tests/unit/plugins/conftest.py)


def aws_provider(aws, fake_time):
    return ce.AwsProvider.from_params(REGION, access_key=AWS_KEY_ID, secret_key=AWS_SECRET,
                                      endpoint_url=aws.url, retry=retry(fake_time))


def attached_enis(aws):
    return aws.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [aws.instance]}])["NetworkInterfaces"]


def run_aws(aws, fake_time, count, **kwargs):
    return ce.ensure_enis(aws_provider(aws, fake_time), aws.instance, aws.gpu, [aws.sg], count,
                          clock=fake_time.clock, sleep=fake_time.sleep, **kwargs)


def test_aws_creates_and_attaches_missing_enis(aws, fake_time):
    result = run_aws(aws, fake_time, 4)
    assert result["changed"] is True
    assert len(result["created"]) == 4
    assert result["attached"] == result["created"]
    assert [i["device_index"] for i in result["interfaces"]] == [1, 2, 3, 4]
    for iface in result["interfaces"]:
        assert set(iface) == {"id", "mac", "private_ip", "device_index", "network_card_index", "interface_type",
                              "status"}
        assert MAC.match(iface["mac"]), iface
        assert iface["private_ip"].startswith("10.0.")
        assert 64 <= int(iface["private_ip"].split(".")[2]) <= 79  # inside 10.0.64.0/20
        assert iface["status"] == "attached"
    cloud = {e["NetworkInterfaceId"]: e for e in attached_enis(aws)}
    assert len(cloud) == 5  # primary + 4
    for iface in result["interfaces"]:
        raw = cloud[iface["id"]]
        assert raw["MacAddress"].lower() == iface["mac"]
        assert raw["PrivateIpAddress"] == iface["private_ip"]
        assert raw["SubnetId"] == aws.gpu
        assert {"Key": ce.OWNER_TAG, "Value": aws.instance} in raw["TagSet"]
        assert aws.sg in [g["GroupId"] for g in raw["Groups"]]
    assert fake_time.sleeps == []  # moto attaches at once: the first poll already sees "attached"


def test_aws_second_run_changes_nothing(aws, fake_time):
    first = run_aws(aws, fake_time, 3)
    second = run_aws(aws, fake_time, 3)
    assert second["changed"] is False
    assert second["created"] == second["attached"] == []
    assert second["interfaces"] == first["interfaces"]
    assert second["plan"]["keep"] == [i["id"] for i in first["interfaces"]]
    assert len(attached_enis(aws)) == 4


def test_aws_check_mode_creates_nothing(aws, fake_time):
    result = run_aws(aws, fake_time, 4, check_mode=True)
    assert result["changed"] is True
    assert result["plan"]["create"] == 4
    assert result["plan"]["device_indexes"] == [1, 2, 3, 4]
    assert result["created"] == result["attached"] == result["interfaces"] == []
    assert len(attached_enis(aws)) == 1
    assert aws.ec2.describe_network_interfaces(
        Filters=[{"Name": "subnet-id", "Values": [aws.gpu]}])["NetworkInterfaces"] == []


def test_aws_lower_count_deletes_nothing(aws, fake_time):
    first = run_aws(aws, fake_time, 4)
    result = run_aws(aws, fake_time, 2)
    ids = [i["id"] for i in first["interfaces"]]
    assert result["changed"] is False
    assert [i["id"] for i in result["interfaces"]] == ids[:2]
    assert result["surplus"] == ids[2:]
    assert any("never deleted" in w and "'count'" in w for w in result["warnings"])
    assert len(attached_enis(aws)) == 5


def test_aws_adopts_detached_eni_of_interrupted_run(aws, fake_time):
    orphan = aws.ec2.create_network_interface(
        SubnetId=aws.gpu, Groups=[aws.sg],
        TagSpecifications=[{"ResourceType": "network-interface",
                            "Tags": [{"Key": ce.OWNER_TAG, "Value": aws.instance}]}],
    )["NetworkInterface"]["NetworkInterfaceId"]
    result = run_aws(aws, fake_time, 2)
    assert result["plan"]["adopt"] == [orphan]
    assert len(result["created"]) == 1
    assert result["attached"][0] == orphan
    assert {i["id"] for i in result["interfaces"]} == {orphan, result["created"][0]}


def test_aws_skips_device_indexes_in_use(aws, fake_time):
    other = aws.ec2.create_network_interface(SubnetId=aws.mgmt, Groups=[aws.sg])["NetworkInterface"]
    aws.ec2.attach_network_interface(NetworkInterfaceId=other["NetworkInterfaceId"], InstanceId=aws.instance,
                                     DeviceIndex=1)
    result = run_aws(aws, fake_time, 2)
    assert [i["device_index"] for i in result["interfaces"]] == [2, 3]
    assert other["NetworkInterfaceId"] not in [i["id"] for i in result["interfaces"]]


def test_aws_warns_about_security_group_drift(aws, fake_time):
    other_sg = aws.ec2.create_security_group(GroupName="old", Description="old", VpcId=aws.vpc)["GroupId"]
    old = aws.ec2.create_network_interface(SubnetId=aws.gpu, Groups=[other_sg])["NetworkInterface"]
    aws.ec2.attach_network_interface(NetworkInterfaceId=old["NetworkInterfaceId"], InstanceId=aws.instance,
                                     DeviceIndex=1)
    result = run_aws(aws, fake_time, 1)
    assert result["changed"] is False
    assert any(old["NetworkInterfaceId"] in w and aws.sg in w for w in result["warnings"])


def test_aws_unknown_instance_names_the_options(aws, fake_time):
    provider = aws_provider(aws, fake_time)
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, "i-0123456789abcdef0", aws.gpu, [aws.sg], 2)
    assert "i-0123456789abcdef0" in str(exc.value)
    assert "'instance_id'" in str(exc.value) and "'region'" in str(exc.value)


# --------------------------------------------------------------------------------------------
# AWS error paths with botocore's Stubber (the real client, the real error codes)

INSTANCE = "i-0abc1234def567890"
SUBNET = "subnet-0a1b2c3d4e5f67890"
SG = "sg-0123456789abcdef0"


def raw_eni(eid, subnet, index=None, status="in-use", tags=()):
    raw = {"NetworkInterfaceId": eid, "MacAddress": "0e:5d:1f:2a:3b:4c", "PrivateIpAddress": "10.0.64.10",
           "SubnetId": subnet, "VpcId": "vpc-0f1e2d3c4b5a69788",
           "Groups": [{"GroupId": SG, "GroupName": "gpu"}],
           "Status": status, "TagSet": [{"Key": k, "Value": v} for k, v in tags]}
    if index is not None:
        raw["Attachment"] = {"AttachmentId": f"eni-attach-{eid[4:]}", "DeviceIndex": index,
                             "NetworkCardIndex": 0, "InstanceId": INSTANCE, "Status": "attached"}
    return raw


PRIMARY_RAW = raw_eni("eni-0primary000000000", "subnet-0mgmt0000000000", index=0)


@pytest.fixture
def stubbed(fake_time):
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id=AWS_KEY_ID,
                          aws_secret_access_key=AWS_SECRET)
    with Stubber(client) as stub:
        provider = ce.AwsProvider(client, REGION, retry=retry(fake_time), secrets=(AWS_KEY_ID, AWS_SECRET))
        yield stub, provider
        stub.assert_no_pending_responses()


def stub_listing(stub, attached=(PRIMARY_RAW,), tagged=()):
    stub.add_response("describe_network_interfaces", {"NetworkInterfaces": list(attached)},
                      {"Filters": [{"Name": "attachment.instance-id", "Values": [INSTANCE]}]})
    stub.add_response("describe_network_interfaces", {"NetworkInterfaces": list(tagged)},
                      {"Filters": [{"Name": f"tag:{ce.OWNER_TAG}", "Values": [INSTANCE]}]})
    stub_instance_type(stub)


def stub_instance_type(stub, itype="g5.12xlarge", state="running", cards=((0, 15),), efa=1):
    """DescribeInstances + DescribeInstanceTypes as EC2 answers them (a one-card type by default)."""
    stub.add_response("describe_instances", {"Reservations": [{"Instances": [
        {"InstanceId": INSTANCE, "InstanceType": itype, "State": {"Name": state}}]}]},
        {"InstanceIds": [INSTANCE]})
    stub.add_response("describe_instance_types", {"InstanceTypes": [{"InstanceType": itype, "NetworkInfo": {
        "MaximumNetworkCards": len(cards), "EfaSupported": bool(efa), "EfaInfo": {"MaximumEfaInterfaces": efa},
        "NetworkCards": [{"NetworkCardIndex": i, "MaximumNetworkInterfaces": m,
                          "InterfaceTypes": ["interface", "efa", "efa-only"]} for i, m in cards]}}]},
        {"InstanceTypes": [itype]})


def stub_throttled(stub):
    stub.add_client_error("describe_network_interfaces", "RequestLimitExceeded", "Request limit exceeded.",
                          503)


CREATE_PARAMS = {"SubnetId": SUBNET, "Groups": [SG], "Description": ANY, "ClientToken": ANY,
                 "TagSpecifications": ANY}


def test_aws_account_eni_quota(stubbed, fake_time):
    stub, provider = stubbed
    stub_listing(stub)
    stub.add_client_error("create_network_interface", "NetworkInterfaceLimitExceeded",
                          "You have reached the limit for network interfaces in this Region.", 400,
                          expected_params=CREATE_PARAMS)
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 8, sleep=fake_time.sleep)
    msg = str(exc.value)
    assert INSTANCE in msg and "NetworkInterfaceLimitExceeded" in msg
    assert "'count'" in msg and "Fix:" in msg and "Network interfaces per Region" in msg
    assert exc.value.result == {"created": [], "attached": []}


def test_aws_instance_type_eni_limit(stubbed, fake_time):
    stub, provider = stubbed
    stub_listing(stub)
    new = raw_eni("eni-0new0000000000001", SUBNET, status="available", tags=[(ce.OWNER_TAG, INSTANCE)])
    stub.add_response("create_network_interface", {"NetworkInterface": new}, CREATE_PARAMS)
    stub.add_client_error("attach_network_interface", "AttachmentLimitExceeded",
                          "Interface count 16 exceeds the limit for p4d.24xlarge", 400,
                          expected_params={"NetworkInterfaceId": new["NetworkInterfaceId"],
                                           "InstanceId": INSTANCE, "DeviceIndex": 1})
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 1, sleep=fake_time.sleep)
    msg = str(exc.value)
    assert INSTANCE in msg and "AttachmentLimitExceeded" in msg and "cannot take another ENI" in msg
    assert "'count'" in msg and "Fix:" in msg
    assert exc.value.result == {"created": [new["NetworkInterfaceId"]], "attached": []}
    assert "re-run attaches the created ENIs" in msg


def test_aws_subnet_full(stubbed, fake_time):
    stub, provider = stubbed
    stub_listing(stub)
    stub.add_client_error("create_network_interface", "InsufficientFreeAddressesInSubnet",
                          "The specified subnet does not have enough free addresses to satisfy the request.",
                          400, expected_params=CREATE_PARAMS)
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 8, sleep=fake_time.sleep)
    msg = str(exc.value)
    assert INSTANCE in msg and SUBNET in msg and "'subnet_id'" in msg and "Fix:" in msg
    assert "InsufficientFreeAddressesInSubnet" in msg


def test_aws_throttling_then_success(stubbed, fake_time):
    stub, provider = stubbed
    for _ in range(2):
        stub_throttled(stub)
    kept = raw_eni("eni-0kept000000000001", SUBNET, index=1)
    stub_listing(stub, attached=(PRIMARY_RAW, kept))
    result = ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 1, sleep=fake_time.sleep)
    assert result["changed"] is False
    assert result["interfaces"][0]["id"] == kept["NetworkInterfaceId"]
    assert fake_time.sleeps == [1.0, 2.0]


def test_aws_throttling_gives_up_with_a_clear_error(stubbed, fake_time):
    stub, provider = stubbed
    for _ in range(6):
        stub_throttled(stub)
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 1, sleep=fake_time.sleep)
    msg = str(exc.value)
    assert "still throttled after 6 attempts over 31 s" in msg and INSTANCE in msg and "Fix:" in msg
    assert fake_time.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_aws_credentials_never_in_errors(stubbed, fake_time):
    stub, provider = stubbed
    stub.add_client_error("describe_network_interfaces", "AuthFailure",
                          f"AWS was not able to validate the provided access credentials {AWS_KEY_ID} "
                          f"(signed with {AWS_SECRET})", 401)
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 1, sleep=fake_time.sleep)
    msg = str(exc.value)
    assert "AuthFailure" in msg and INSTANCE in msg
    assert AWS_KEY_ID not in msg and AWS_SECRET not in msg and ce.REDACTED in msg


# --------------------------------------------------------------------------------------------
# Tencent Cloud: the real SDK, recorded responses at the HTTP transport


def tc3_signature(secret_key, prepared):
    """TC3-HMAC-SHA256 of a POST JSON request, written from the API 3.0 "Signature v3" page
    (https://www.tencentcloud.com/document/api/1021/34193, the same text for every product):
    canonical request, string to sign, key derivation TC3<SecretKey> -> date -> service ->
    tc3_request. The test SecretId/SecretKey are that page's example pair."""
    headers = prepared.headers
    body = prepared.body if isinstance(prepared.body, bytes) else prepared.body.encode()
    canonical = "\n".join([
        "POST", "/", "",
        f"content-type:{headers['Content-Type']}\nhost:{headers['Host']}\n",
        "content-type;host",
        hashlib.sha256(body).hexdigest(),
    ])
    timestamp = int(headers["X-TC-Timestamp"])
    date = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
    to_sign = "\n".join(["TC3-HMAC-SHA256", str(timestamp), f"{date}/vpc/tc3_request",
                         hashlib.sha256(canonical.encode()).hexdigest()])

    def mac(key, msg):
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    key = mac(mac(mac(("TC3" + secret_key).encode(), date), "vpc"), "tc3_request")
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), date


class RecordedTencentAdapter(requests.adapters.BaseAdapter):
    """``requests`` transport answering the SDK's calls, in order, from recorded files.

    ``script``: list of (Action, file name). Every request is checked: the action is the
    scripted one, the API version and region are set, and the signature verifies with the key
    the test configured. ``sent`` keeps (action, parsed JSON body, headers).
    """

    def __init__(self, script, secret_id, secret_key):
        super().__init__()
        self.script = list(script)
        self.secret_id, self.secret_key = secret_id, secret_key
        self.sent = []

    def send(self, request, **kwargs):
        action = request.headers["X-TC-Action"]
        self.sent.append((action, json.loads(request.body), dict(request.headers)))
        assert self.script, f"unscripted call {action}"
        want, name = self.script.pop(0)
        assert action == want, f"expected {want}, the SDK sent {action}"
        assert request.headers["X-TC-Version"] == "2017-03-12"
        assert request.headers["X-TC-Region"] == TC_REGION
        signature, date = tc3_signature(self.secret_key, request)
        assert request.headers["Authorization"] == (
            f"TC3-HMAC-SHA256 Credential={self.secret_id}/{date}/vpc/tc3_request, "
            f"SignedHeaders=content-type;host, Signature={signature}")
        return recorded_response(request, name)

    def close(self):
        self.script = self.script  # nothing to release

    def actions(self):
        return [a for a, _, _ in self.sent]

    def bodies(self, action):
        return [b for a, b, _ in self.sent if a == action]


@pytest.fixture
def tencent_api(monkeypatch):
    """``install(script, secret_id, secret_key)`` mounts a RecordedTencentAdapter on every SDK
    connection created afterwards and returns it; at teardown the script must be used up."""
    adapters = []
    original = tc_request.ProxyConnection.__init__

    def install(script, secret_id=TC_SECRET_ID, secret_key=TC_SECRET_KEY):
        adapter = RecordedTencentAdapter(script, secret_id, secret_key)
        adapters.append(adapter)

        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self._session.mount("https://", adapter)
            self._session.mount("http://", adapter)

        monkeypatch.setattr(tc_request.ProxyConnection, "__init__", init)
        return adapter

    yield install
    for adapter in adapters:
        assert adapter.script == [], f"recorded responses not asked for: {adapter.script}"


def tencent_provider(fake_time, secret_id=TC_SECRET_ID, secret_key=TC_SECRET_KEY):
    return ce.TencentCloudProvider.from_params(TC_REGION, access_key=secret_id, secret_key=secret_key,
                                               retry=retry(fake_time))


def run_tencent(fake_time, count, **kwargs):
    return ce.ensure_enis(tencent_provider(fake_time), TC_INSTANCE, TC_SUBNET, [TC_SG], count,
                          clock=fake_time.clock, sleep=fake_time.sleep, **kwargs)


D, C, A = "DescribeNetworkInterfaces", "CreateNetworkInterface", "AttachNetworkInterface"
LISTING_EMPTY = [(D, "DescribeNetworkInterfaces.instance-primary-only.json"),
                 (D, "DescribeNetworkInterfaces.empty.json")]


def test_tencent_creates_and_attaches_missing_enis(tencent_api, fake_time):
    api = tencent_api(LISTING_EMPTY + [
        (C, "CreateNetworkInterface.eni-irk5qhhl.json"),
        (C, "CreateNetworkInterface.eni-afo43z61.json"),
        (D, "DescribeNetworkInterfaces.new-pair-available.json"),
        (A, "AttachNetworkInterface.json"),
        (D, "DescribeNetworkInterfaces.eni-irk5qhhl-attaching.json"),
        (D, "DescribeNetworkInterfaces.eni-irk5qhhl-attached.json"),
        (A, "AttachNetworkInterface.json"),
        (D, "DescribeNetworkInterfaces.eni-afo43z61-attached.json"),
    ])
    result = run_tencent(fake_time, 2)
    assert result["changed"] is True
    assert result["created"] == result["attached"] == ["eni-irk5qhhl", "eni-afo43z61"]
    assert result["interfaces"] == [
        {"id": "eni-irk5qhhl", "mac": "20:90:6f:62:33:e2", "private_ip": "10.0.64.13", "device_index": 1,
         "network_card_index": 0, "interface_type": "interface", "status": "attached"},
        {"id": "eni-afo43z61", "mac": "20:90:6f:62:33:f7", "private_ip": "10.0.64.17", "device_index": 2,
         "network_card_index": 0, "interface_type": "interface", "status": "attached"},
    ]
    assert fake_time.sleeps == [2.0]  # one poll interval while eni-irk5qhhl was ATTACHING
    listing = api.bodies(D)[:2]
    assert [b["Filters"] for b in listing] == [
        [{"Name": "attachment.instance-id", "Values": [TC_INSTANCE]}],
        [{"Name": f"tag:{ce.OWNER_TAG}", "Values": [TC_INSTANCE]}],
    ]
    assert api.bodies(D)[2]["NetworkInterfaceIds"] == ["eni-irk5qhhl", "eni-afo43z61"]
    for body in api.bodies(C):
        assert body["VpcId"] == "vpc-0akbol5v"  # taken from the primary ENI
        assert body["SubnetId"] == TC_SUBNET and body["SecurityGroupIds"] == [TC_SG]
        assert body["Tags"] == [{"Key": ce.OWNER_TAG, "Value": TC_INSTANCE}]
        assert body["NetworkInterfaceName"] == f"gpucluster-{TC_INSTANCE}"
        assert re.fullmatch(r"[0-9a-f]{32}", body["ClientToken"])
    assert [(b["NetworkInterfaceId"], b["InstanceId"]) for b in api.bodies(A)] == [
        ("eni-irk5qhhl", TC_INSTANCE), ("eni-afo43z61", TC_INSTANCE)]


def test_tencent_second_run_changes_nothing(tencent_api, fake_time):
    api = tencent_api([(D, "DescribeNetworkInterfaces.instance-two-attached.json"),
                       (D, "DescribeNetworkInterfaces.tag-two-attached.json")])
    result = run_tencent(fake_time, 2)
    assert result["changed"] is False
    assert result["created"] == result["attached"] == result["surplus"] == []
    assert [(i["id"], i["device_index"], i["status"]) for i in result["interfaces"]] == [
        ("eni-irk5qhhl", 1, "attached"), ("eni-afo43z61", 2, "attached")]
    assert api.actions() == [D, D]


def test_tencent_check_mode_changes_nothing(tencent_api, fake_time):
    api = tencent_api(LISTING_EMPTY)
    result = run_tencent(fake_time, 2, check_mode=True)
    assert result["changed"] is True
    assert result["plan"]["create"] == 2
    assert result["created"] == result["attached"] == result["interfaces"] == []
    assert api.actions() == [D, D]


def test_tencent_adopts_detached_eni_of_interrupted_run(tencent_api, fake_time):
    api = tencent_api([
        (D, "DescribeNetworkInterfaces.instance-primary-only.json"),
        (D, "DescribeNetworkInterfaces.tag-orphan-available.json"),
        (A, "AttachNetworkInterface.json"),
        (D, "DescribeNetworkInterfaces.eni-p17uqigx-attached.json"),
    ])
    result = run_tencent(fake_time, 1)
    assert result["created"] == []
    assert result["attached"] == ["eni-p17uqigx"]
    assert result["interfaces"][0]["mac"] == "20:90:6f:fc:9f:69"
    assert C not in api.actions()


def test_tencent_instance_eni_limit(tencent_api, fake_time):
    tencent_api(LISTING_EMPTY + [
        (C, "CreateNetworkInterface.eni-irk5qhhl.json"),
        (D, "DescribeNetworkInterfaces.eni-irk5qhhl-available.json"),
        (A, "Error.LimitExceeded.json"),
    ])
    with pytest.raises(ce.CloudEniError) as exc:
        run_tencent(fake_time, 1)
    msg = str(exc.value)
    assert TC_INSTANCE in msg and "LimitExceeded" in msg and "cannot take another ENI" in msg
    assert "'count'" in msg and "Fix:" in msg and "a0e4d18e-06c9-41d3-b5bd-803d5f9fcea0" in msg
    assert exc.value.result == {"created": ["eni-irk5qhhl"], "attached": []}


def test_tencent_vpc_eni_quota(tencent_api, fake_time):
    tencent_api(LISTING_EMPTY + [(C, "Error.LimitExceeded.NetworkInterfaceLimitExceeded.json")])
    with pytest.raises(ce.CloudEniError) as exc:
        run_tencent(fake_time, 2)
    msg = str(exc.value)
    assert TC_INSTANCE in msg and "LimitExceeded.NetworkInterfaceLimitExceeded" in msg
    assert "ENI quota" in msg and TC_REGION in msg and "'count'" in msg and "Fix:" in msg


def test_tencent_subnet_full(tencent_api, fake_time):
    tencent_api(LISTING_EMPTY + [(C, "Error.ResourceInsufficient.Subnet.json")])
    with pytest.raises(ce.CloudEniError) as exc:
        run_tencent(fake_time, 2)
    msg = str(exc.value)
    assert TC_INSTANCE in msg and TC_SUBNET in msg and "'subnet_id'" in msg and "Fix:" in msg


@pytest.mark.parametrize("throttle", ["Error.RequestLimitExceeded.json",
                                      "Error.LimitExceeded.ActionLimited.json"])
def test_tencent_throttling_then_success(tencent_api, fake_time, throttle):
    api = tencent_api([(D, throttle), (D, throttle)] + [
        (D, "DescribeNetworkInterfaces.instance-two-attached.json"),
        (D, "DescribeNetworkInterfaces.tag-two-attached.json"),
    ])
    result = run_tencent(fake_time, 2)
    assert result["changed"] is False
    assert fake_time.sleeps == [1.0, 2.0]
    assert api.actions() == [D, D, D, D]


def test_tencent_credentials_never_in_errors(tencent_api, fake_time):
    tencent_api([(D, "Error.AuthFailure.SignatureFailure.json")])
    with pytest.raises(ce.CloudEniError) as exc:
        run_tencent(fake_time, 2)
    msg = str(exc.value)
    assert "AuthFailure.SignatureFailure" in msg and TC_INSTANCE in msg
    assert TC_SECRET_ID not in msg and TC_SECRET_KEY not in msg


def test_tencent_missing_credentials(monkeypatch):
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_KEY", raising=False)
    with pytest.raises(ce.CloudEniError, match="TENCENTCLOUD_SECRET_ID"):
        ce.make_provider("tencentcloud", TC_REGION)


# --------------------------------------------------------------------------------------------
# Multi-card instance types (p4d, p5) and EFA: placement by network card and device index
# --------------------------------------------------------------------------------------------

P5_CARDS = [ce.NetworkCard(i, 2, ce.INTERFACE_TYPES) for i in range(32)]
P4D_CARDS = [ce.NetworkCard(i, 15, ce.INTERFACE_TYPES) for i in range(4)]


def attached_at(eid, card, device, primary=False):
    return ce.Eni(eid, "0e:00:00:00:00:01", "10.0.64.5", "subnet-gpu", instance_id="i-1", device_index=device,
                  network_card_index=card, primary=primary, status=ce.ATTACHED)


PRIMARY_ENI = attached_at("eni-primary", 0, 0, primary=True)


def test_p5_spreads_one_interface_per_gpu_over_the_32_cards():
    slots = ce.plan_slots([PRIMARY_ENI], 8, P5_CARDS, "interface")
    assert slots == [(0, 1), (4, 1), (8, 1), (12, 1), (16, 1), (20, 1), (24, 1), (28, 1)]
    efa = ce.plan_slots([PRIMARY_ENI], 8, P5_CARDS, "efa-only")
    assert efa == [(0, 1), (4, 0), (8, 0), (12, 0), (16, 0), (20, 0), (24, 0), (28, 0)]


def test_p4d_puts_two_per_card_and_keeps_what_is_attached():
    assert ce.plan_slots([PRIMARY_ENI], 8, P4D_CARDS, "interface") == [
        (0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
    # an earlier run attached two on card 1: the six missing go elsewhere first, no slot reused
    done = [PRIMARY_ENI, attached_at("eni-a", 1, 1), attached_at("eni-b", 1, 2)]
    slots = ce.plan_slots(done, 6, P4D_CARDS, "interface")
    assert sorted(slots) == [(0, 1), (0, 2), (2, 1), (2, 2), (3, 1), (3, 2)]


def test_full_card_and_unsupported_type_are_refused():
    with pytest.raises(ValueError, match="network card 0 takes at most 2"):
        ce.plan_slots([PRIMARY_ENI, attached_at("eni-a", 0, 1)], 1, P5_CARDS[:1] + [], "interface")
    with pytest.raises(ValueError, match="not 'efa'"):
        ce.plan_slots([PRIMARY_ENI], 1, [ce.NetworkCard(0, 4), ce.NetworkCard(1, 4)], "efa")


def test_device_index_stays_below_the_card_maximum():
    """cloud-eni/N15: a p5 card takes device indexes 0..1 only; the planner never asks for 2."""
    # an ENA interface already at device 1 of card 4: the next ENA on that card takes device 0
    done = [PRIMARY_ENI, attached_at("eni-a", 4, 1)]
    for card, device in ce.plan_slots(done, 8, P5_CARDS, "interface"):
        assert 0 <= device < 2 and 0 <= card < 32
    assert ce.plan_slots(done, 1, [ce.NetworkCard(0, 2, ce.INTERFACE_TYPES)] + P5_CARDS[4:5],
                         "interface") == [(0, 1)]
    with pytest.raises(ValueError, match=r"network card 4 takes at most 2 .*device indexes 0\.\.1"):
        ce.plan_slots([attached_at("eni-a", 4, 0), attached_at("eni-b", 4, 1)], 1, P5_CARDS[4:5], "interface")


def test_plan_enis_multi_card_result_names_the_cards():
    network = ce.InstanceNetwork("p4d.24xlarge", "running", tuple(P4D_CARDS), True, 4)
    plan = ce.plan_enis([PRIMARY_ENI], "i-1", "subnet-gpu", 4, 1, network)
    assert plan.as_result()["network_cards"] == [0, 1, 2, 3]
    assert plan.as_result()["device_indexes"] == [1, 1, 1, 1]


def _record(provider, operation):
    calls = []
    provider.client.meta.events.register(
        f"provide-client-params.ec2.{operation}", lambda params, **kw: calls.append(dict(params)))
    return calls


def test_aws_p5_attaches_by_network_card_from_the_instance_type_data(aws_multicard, fake_time):
    provider = aws_provider(aws_multicard, fake_time)
    attaches = _record(provider, "AttachNetworkInterface")
    result = ce.ensure_enis(provider, aws_multicard.p5, aws_multicard.gpu, [aws_multicard.sg], 8,
                            clock=fake_time.clock, sleep=fake_time.sleep)
    assert result["changed"] is True and len(result["attached"]) == 8
    assert [(c.get("NetworkCardIndex", 0), c["DeviceIndex"]) for c in attaches] == [
        (0, 1), (4, 1), (8, 1), (12, 1), (16, 1), (20, 1), (24, 1), (28, 1)]
    assert result["plan"]["network_cards"] == [0, 4, 8, 12, 16, 20, 24, 28]


def test_aws_efa_on_a_running_instance_is_refused_before_any_change(aws_multicard, fake_time):
    provider = aws_provider(aws_multicard, fake_time)
    creates = _record(provider, "CreateNetworkInterface")
    with pytest.raises(ce.CloudEniError) as exc:
        ce.ensure_enis(provider, aws_multicard.p5, aws_multicard.gpu, [aws_multicard.sg], 4,
                       clock=fake_time.clock, sleep=fake_time.sleep, interface_type="efa")
    msg = str(exc.value)
    assert "is running" in msg and "stopped instance" in msg and "Fix:" in msg
    assert "NetworkCardIndex=8,DeviceIndex=0,InterfaceType=efa" in msg  # the launch-template slots
    assert creates == [] and exc.value.result == {"created": [], "attached": []}


def test_aws_efa_on_a_stopped_p4d_creates_efas_on_each_card(aws_multicard, fake_time):
    provider = aws_provider(aws_multicard, fake_time)
    creates = _record(provider, "CreateNetworkInterface")
    attaches = _record(provider, "AttachNetworkInterface")
    result = ce.ensure_enis(provider, aws_multicard.p4d, aws_multicard.gpu, [aws_multicard.sg], 4,
                            clock=fake_time.clock, sleep=fake_time.sleep, interface_type="efa")
    assert [c["InterfaceType"] for c in creates] == ["efa"] * 4
    assert [(c.get("NetworkCardIndex", 0), c["DeviceIndex"]) for c in attaches] == [(0, 1), (1, 0), (2, 0), (3, 0)]
    assert len(result["attached"]) == 4


def test_aws_more_efas_than_the_type_takes_are_refused(stubbed, fake_time):
    stub, provider = stubbed
    stub.add_response("describe_network_interfaces", {"NetworkInterfaces": [PRIMARY_RAW]},
                      {"Filters": [{"Name": "attachment.instance-id", "Values": [INSTANCE]}]})
    stub.add_response("describe_network_interfaces", {"NetworkInterfaces": []},
                      {"Filters": [{"Name": f"tag:{ce.OWNER_TAG}", "Values": [INSTANCE]}]})
    stub_instance_type(stub, state="stopped", efa=1)  # g5.12xlarge: one EFA
    with pytest.raises(ce.CloudEniError, match=r"takes 1 EFA interfaces .* 2 wanted") as exc:
        ce.ensure_enis(provider, INSTANCE, SUBNET, [SG], 2, sleep=fake_time.sleep, interface_type="efa")
    assert exc.value.result == {"created": [], "attached": []}


def test_single_card_limit_is_checked_before_anything_is_created():
    network = ce.InstanceNetwork("g5.12xlarge", "running", (ce.NetworkCard(0, 15, ce.INTERFACE_TYPES),), True, 1)
    assert ce.plan_enis([PRIMARY_ENI], "i-1", "subnet-gpu", 14, 1, network).create == 14
    with pytest.raises(ValueError, match=r"g5.12xlarge takes at most 15 .* 1 attached and 15 more"):
        ce.plan_enis([PRIMARY_ENI], "i-1", "subnet-gpu", 15, 1, network)


def test_aws_count_over_the_instance_type_limit_is_refused_before_any_create(aws, fake_time):
    provider = aws_provider(aws, fake_time)
    creates = _record(provider, "CreateNetworkInterface")
    with pytest.raises(ce.CloudEniError, match=r"g5.48xlarge takes at most 7 network interfaces") as exc:
        ce.ensure_enis(provider, aws.instance, aws.gpu, [aws.sg], 8, clock=fake_time.clock, sleep=fake_time.sleep)
    assert "Fix:" in str(exc.value) and creates == [] and exc.value.result == {"created": [], "attached": []}
