"""Cloud error reader on tests/fixtures/cloud-eni (N13, N15) and the SDKs' other error forms."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.cloud_errors import read_cloud_error
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

N13 = "cloud-eni/N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt"
N15 = "cloud-eni/N15_efa_p5_device_index_exceeds_network_card_limit.1-nodegroup-creation-error.txt"


def test_n13_attachment_limit_with_the_tab_continued_status_line():
    r = read_cloud_error(fixture_text(N13))
    assert r["class"] == "ENI_ATTACH_LIMIT_EXCEEDED"
    assert (r["code"], r["http_status"], r["provider"]) == ("AttachmentLimitExceeded", 400, "aws")
    assert r["request_id"] == "00000000-0000-0000-0000-000000000001"
    assert (r["instance_type"], r["requested_interfaces"], r["eni_limit"]) == ("t2.medium", 4, 3)
    assert r["eni_id"] == "eni-00000001"
    assert r["pool"] == {"total": 15, "used": 10, "max_addrs_per_eni": 6}
    assert r["device_numbers_used"] == [0, 1, 2] and r["free_device_number"] == 3
    assert r["leftover_enis"] == ["eni-00000001"]  # created, never attached: it leaks on every retry
    assert r["retryable"] is False
    assert "MaximumNetworkInterfaces" in r["fix"] and "do not retry" in r["fix"]


def test_n15_efa_device_index_out_of_range():
    r = read_cloud_error(fixture_text(N15))
    assert r["class"] == "EFA_DEVICE_INDEX_OUT_OF_RANGE"
    assert (r["device_index"], r["network_card_index"], r["max_devices_per_card"]) == (2, 2, 2)
    assert r["valid_device_indexes"] == [0, 1]
    assert (r["service"], r["http_status"], r["handler_error_code"]) == ("Eks", 400, "InvalidRequest")
    assert "DeviceIndex 1 on cards 1" in r["fix"]


@pytest.mark.parametrize(
    ("text", "cls", "provider"),
    [
        ("An error occurred (InvalidNetworkInterfaceID.NotFound) when calling the AttachNetworkInterface operation: "
         "The networkInterface ID 'eni-0abc' does not exist", "ENI_NOT_FOUND", "aws"),
        ("An error occurred (NetworkInterfaceLimitExceeded) when calling the CreateNetworkInterface operation: quota",
         "ENI_QUOTA_EXCEEDED", "aws"),
        ("An error occurred (InsufficientFreeAddressesInSubnet) when calling the CreateNetworkInterface operation: x",
         "SUBNET_FULL", "aws"),
        ("An error occurred (RequestLimitExceeded) when calling the DescribeNetworkInterfaces operation (reached max "
         "retries: 4): Request limit exceeded.", "THROTTLED", "aws"),
        ("[TencentCloudSDKException] code:LimitExceeded.NetworkInterfaceLimitExceeded message:limit requestId:r-1",
         "ENI_QUOTA_EXCEEDED", "tencentcloud"),
        ("[TencentCloudSDKException] code:UnsupportedOperation.InvalidState message:bad state requestId:r-2",
         "UNSUPPORTED_OPERATION", "tencentcloud"),
        ('{"Response": {"Error": {"Code": "ResourceInsufficient.Subnet", "Message": "no ip"}, "RequestId": "r-3"}}',
         "SUBNET_FULL", "tencentcloud"),
    ],
)
def test_sdk_error_forms(text, cls, provider):
    r = read_cloud_error(text)
    assert (r["class"], r["provider"]) == (cls, provider)


def test_no_cloud_error_is_a_parse_error():
    with pytest.raises(ParseError):
        read_cloud_error("  - name: p5-odcr-vpc\n    instanceType: p5.48xlarge\n")
