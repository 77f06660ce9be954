"""Tests of the cloud_eni module shell: AnsibleModule argument handling, check mode, the JSON it
prints, and that credentials never reach that output.

AWS runs against moto in server mode (the ``aws`` account of ``tests/unit/plugins/conftest.py``,
shared with the core's tests); Tencent Cloud runs the real SDK with recorded responses served at
its HTTP transport (the same seam as in ``tests/unit/plugins/module_utils``, without its signature
check).
"""

from __future__ import annotations

import json
from unittest import mock

import pytest
import requests
import yaml
from ansible.module_utils import _internal
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import cloud_eni
from tencentcloud.common.http import request as tc_request

from tests.unit.plugins.conftest import AWS_KEY_ID, AWS_SECRET, REGION, recorded_response

TC_SECRET_ID = "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE"
TC_SECRET_KEY = "Gu5t9xGARNpq86cd98joQYCN3EXAMPLE"
TC_ARGS = {"provider": "tencentcloud", "region": "ap-guangzhou", "instance_id": "ins-r8hr2upy",
           "subnet_id": "subnet-76r802pg", "security_groups": ["sg-05bb4upy"], "count": 2}

# The docs' DescribeNetworkInterfaces example carries SubNetworkInterfaces, which SDK 3.1.195's
# model lacks; the SDK warns and (outside pytest) silences its own UserWarnings.
pytestmark = pytest.mark.filterwarnings("ignore:SubNetworkInterfaces fileds are useless:UserWarning")


def run_module(capsys, args, check_mode=False):
    """Run the module's main() as Ansible would; return the JSON it printed.

    A module runs in a process of its own without controller code; other test files may have
    imported controller modules (which flips ``module_utils._internal.is_controller`` and sends
    ``module.warn`` to the controller's display instead of the result), so that flag is pinned.
    """
    if check_mode:
        args = {**args, "_ansible_check_mode": True}
    with patch_module_args(args), mock.patch.object(_internal, "is_controller", False), \
            pytest.raises(SystemExit):
        cloud_eni.main()
    out = capsys.readouterr().out
    return json.loads(out), out


# --------------------------------------------------------------------------------------------
# documentation


def test_documentation_matches_argument_spec():
    doc = yaml.safe_load(cloud_eni.DOCUMENTATION)
    options = doc["options"]
    assert set(options) == set(cloud_eni.ARGUMENT_SPEC)
    for name, spec in cloud_eni.ARGUMENT_SPEC.items():
        opt = options[name]
        assert opt["type"] == spec["type"], name
        assert opt.get("required", False) == spec.get("required", False), name
        assert opt.get("default") == spec.get("default"), name
        assert opt.get("choices") == spec.get("choices"), name
        assert opt.get("elements") == spec.get("elements"), name
        assert opt.get("aliases") == spec.get("aliases"), name
    for secret in ("access_key", "secret_key", "session_token"):
        assert cloud_eni.ARGUMENT_SPEC[secret]["no_log"] is True
    ret = yaml.safe_load(cloud_eni.RETURN)
    assert set(ret["interfaces"]["contains"]) == {"id", "mac", "private_ip", "device_index", "network_card_index",
                                                  "interface_type", "status"}
    assert {"created", "attached", "surplus", "plan", "changed"} <= set(ret)
    examples = yaml.safe_load(cloud_eni.EXAMPLES)
    assert all("gpucluster.cluster.cloud_eni" in task for task in examples)


# --------------------------------------------------------------------------------------------
# AWS through moto


@pytest.fixture
def aws_module(aws):
    """The moto account (``aws``, tests/unit/plugins/conftest.py) and module arguments for 3 ENIs."""
    args = {"provider": "aws", "region": REGION, "instance_id": aws.instance, "subnet_id": aws.gpu,
            "security_groups": [aws.sg], "count": 3, "endpoint_url": aws.url,
            "aws_access_key_id": AWS_KEY_ID, "aws_secret_access_key": AWS_SECRET}
    return aws.ec2, args


def secondary_enis(ec2, args):
    enis = ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [args["instance_id"]]}])["NetworkInterfaces"]
    return [e for e in enis if e["Attachment"]["DeviceIndex"] != 0]


def test_module_aws_converges_then_is_idempotent(aws_module, capsys):
    ec2, args = aws_module
    first, out = run_module(capsys, args)
    assert first["changed"] is True, first
    assert len(first["created"]) == 3 and first["attached"] == first["created"]
    assert [i["device_index"] for i in first["interfaces"]] == [1, 2, 3]
    cloud = {e["NetworkInterfaceId"]: e for e in secondary_enis(ec2, args)}
    for iface in first["interfaces"]:
        assert cloud[iface["id"]]["MacAddress"] == iface["mac"]
        assert cloud[iface["id"]]["PrivateIpAddress"] == iface["private_ip"]
    assert AWS_SECRET not in out and AWS_KEY_ID not in out

    second, _ = run_module(capsys, args)
    assert second["changed"] is False
    assert second["created"] == second["attached"] == []
    assert second["interfaces"] == first["interfaces"]
    assert len(secondary_enis(ec2, args)) == 3


def test_module_aws_check_mode_creates_nothing(aws_module, capsys):
    ec2, args = aws_module
    result, _ = run_module(capsys, args, check_mode=True)
    assert result["changed"] is True
    assert result["plan"]["create"] == 3
    assert result["created"] == result["interfaces"] == []
    assert secondary_enis(ec2, args) == []


def test_module_aws_lower_count_only_warns(aws_module, capsys):
    ec2, args = aws_module
    run_module(capsys, args)
    result, _ = run_module(capsys, {**args, "count": 1})
    assert result["changed"] is False
    assert len(result["surplus"]) == 2
    assert "never deleted" in json.dumps(result["warnings"])  # 2.19 sends structured warnings
    assert len(secondary_enis(ec2, args)) == 3


# --------------------------------------------------------------------------------------------
# Tencent Cloud through the SDK with recorded responses


class Recorded(requests.adapters.BaseAdapter):
    """Answers the SDK's HTTP calls, in order, from ``tests/fixtures_recorded/tencentcloud``."""

    def __init__(self, script):
        super().__init__()
        self.script = list(script)
        self.headers = []

    def send(self, request, **kwargs):
        self.headers.append(dict(request.headers))
        action, name = self.script.pop(0)
        assert request.headers["X-TC-Action"] == action
        return recorded_response(request, name)

    def close(self):
        self.script = self.script  # nothing to release


@pytest.fixture
def tencent_api(monkeypatch):
    installed = []
    original = tc_request.ProxyConnection.__init__

    def install(script):
        adapter = Recorded(script)
        installed.append(adapter)

        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self._session.mount("https://", adapter)

        monkeypatch.setattr(tc_request.ProxyConnection, "__init__", init)
        return adapter

    yield install
    assert all(a.script == [] for a in installed)


D = "DescribeNetworkInterfaces"


def test_module_tencent_env_credentials_idempotent(tencent_api, monkeypatch, capsys):
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", TC_SECRET_ID)
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", TC_SECRET_KEY)
    api = tencent_api([(D, "DescribeNetworkInterfaces.instance-two-attached.json"),
                       (D, "DescribeNetworkInterfaces.tag-two-attached.json")])
    result, out = run_module(capsys, TC_ARGS)
    assert result["changed"] is False
    assert [(i["id"], i["mac"], i["private_ip"], i["device_index"]) for i in result["interfaces"]] == [
        ("eni-irk5qhhl", "20:90:6f:62:33:e2", "10.0.64.13", 1),
        ("eni-afo43z61", "20:90:6f:62:33:f7", "10.0.64.17", 2)]
    assert all(f"Credential={TC_SECRET_ID}/" in h["Authorization"] for h in api.headers)
    assert TC_SECRET_KEY not in out


def test_module_tencent_check_mode(tencent_api, monkeypatch, capsys):
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", TC_SECRET_ID)
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", TC_SECRET_KEY)
    tencent_api([(D, "DescribeNetworkInterfaces.instance-primary-only.json"),
                 (D, "DescribeNetworkInterfaces.empty.json")])
    result, _ = run_module(capsys, TC_ARGS, check_mode=True)
    assert result["changed"] is True and result["plan"]["create"] == 2 and result["created"] == []


@pytest.mark.parametrize("script", [
    [(D, "Error.AuthFailure.SignatureFailure.json")],
    [(D, "DescribeNetworkInterfaces.instance-primary-only.json"), (D, "DescribeNetworkInterfaces.empty.json"),
     ("CreateNetworkInterface", "Error.ResourceInsufficient.Subnet.json")],
    [(D, "DescribeNetworkInterfaces.instance-two-attached.json"),
     (D, "DescribeNetworkInterfaces.tag-two-attached.json")],
], ids=["auth-failure", "subnet-full", "success"])
def test_module_credentials_never_in_output(tencent_api, monkeypatch, capsys, script):
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_KEY", raising=False)
    tencent_api(script)
    session_token = "tc-session-token-EXAMPLE-0123456789"
    args = {**TC_ARGS, "secret_id": TC_SECRET_ID, "secret_key": TC_SECRET_KEY, "session_token": session_token}
    result, out = run_module(capsys, args)
    assert result.get("failed", False) is (script[-1][1].startswith("Error."))
    for secret in (TC_SECRET_ID, TC_SECRET_KEY, session_token):
        assert secret not in out
    assert result["invocation"]["module_args"]["secret_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_module_without_tencent_credentials_says_where_to_put_them(monkeypatch, capsys):
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_KEY", raising=False)
    result, _ = run_module(capsys, TC_ARGS)
    assert result["failed"] is True
    assert "TENCENTCLOUD_SECRET_ID" in result["msg"] and "'access_key'" in result["msg"]
