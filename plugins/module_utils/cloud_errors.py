"""Cloud API errors about elastic NICs (AWS EC2/EKS, Tencent Cloud VPC), read from pasted output.

Stdlib only, Python 3.8+. The error codes and what they mean are owned by ``cloud_eni.py``
(``AWS_QUOTA_CODES``, ``THROTTLE_CODES``, ``SUBNET_FULL_CODES``, ``NOT_FOUND_CODES``); this
module only reads them out of the text people paste, in the forms the SDKs print:

- aws-sdk-go v1 ``awserr`` (amazon-vpc-cni-k8s ipamd): ``<Code>: <Message>`` followed by a
  line ``\\tstatus code: <n>, request id: <id>`` (fixture N13);
- botocore / AWS CLI v1, v2: ``An error occurred (<Code>) when calling the <Action> operation:
  <Message>``;
- CloudFormation / EKS resource handlers: ``Resource handler returned message: "<Message>
  (Service: <S>, Status Code: <n>, Request ID: <id>)" (RequestToken: <t>, HandlerErrorCode:
  <Code>)`` (fixture N15);
- tencentcloud-sdk-python ``TencentCloudSDKException.__str__``: ``[TencentCloudSDKException]
  code:<Code> message:<Message> requestId:<id>``; the API JSON ``{"Response": {"Error":
  {"Code", "Message"}, "RequestId"}}`` (API 3.0 common error format);
- EC2 messages with numbers: ``Interface count <n> exceeds the limit for <type>``; the EFA /
  multi-card message ``The specified number '<d>' for the device index exceeds the maximum
  number of network interfaces supported by the network card at network card index <c>. The
  maximum devices for this network card is <m>.``; ipamd's ``Exceeded instance eni attachment
  limit: <n>``, ``Created a new eni: <id>``, ``Discovered device number is used: <n>``, ``IP
  pool stats: total=<n>, used=<n>, ... maxAddrsPerENI = <n>``.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.cloud_eni import (
    AWS_QUOTA_CODES,
    NOT_FOUND_CODES,
    SUBNET_FULL_CODES,
    THROTTLE_CODES,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, split_lines

_AWSERR = re.compile(r"(?:^|: )([A-Z][A-Za-z]+(?:\.[A-Za-z]+)*): (.+?)\s*$")
_STATUS = re.compile(r"^status code: (\d+), request id: (\S+)$")
_BOTO = re.compile(r"An error occurred \(([\w.]+)\) when calling the (\w+) operation(?: \(reached max retries: \d+\))?: (.+)$")  # noqa: E501
_CFN = re.compile(r'Resource handler returned message: "(.+?) \(Service: (\w+), Status Code: (\d+), Request ID: ([^)]+)\)"'  # noqa: E501
                  r"(?: \(RequestToken: ([^,]+), HandlerErrorCode: (\w+)\))?")
_TENCENT = re.compile(r"\[TencentCloudSDKException\] code:([\w.]+) message:(.*?)(?: requestId:(\S+))?$")
_IFACE_COUNT = re.compile(r"Interface count (\d+) exceeds the limit for ([\w.\-]+)")
_DEVICE_INDEX = re.compile(r"The specified number '(\d+)' for the device index exceeds the maximum number of network "
                           r"interfaces supported by the network card at network card index (\d+)\. The maximum devices "  # noqa: E501
                           r"for this network card is (\d+)\.")
_KNOWN_CODE = re.compile(r"^(?:[A-Z][a-z]+)+(?:\.[A-Z][A-Za-z]+)*$")


def _norm(line):
    return re.sub(r"[ \t]+", " ", line.strip())


def _lines_joined(text):
    """Lines with continuation lines joined: an awserr ``status code:`` line (TAB-indented, or
    not, when a paste lost it) belongs to the error line before it."""
    out = []
    for lineno, raw in enumerate(split_lines(text, "cloud error output"), 1):
        s = _norm(raw)
        if not s:
            continue
        if out and _STATUS.match(s):
            out[-1] = (out[-1][0], out[-1][1] + "\n" + s)
            continue
        out.append((lineno, s))
    return out


def _provider(code, text):
    if "TencentCloudSDKException" in text or '"Response"' in text or code.startswith(
            ("LimitExceeded", "UnsupportedOperation", "ResourceInsufficient", "InvalidParameterValue.",
             "ResourceNotFound", "OperationDenied", "FailedOperation")) and "." in code:
        return "tencentcloud"
    return "aws"


def read_cloud_error(text) -> dict:
    """The cloud error in ``text``: provider, code, numbers, class, severity, cause, fix.

    Classes: ``ENI_ATTACH_LIMIT_EXCEEDED`` (instance type's ENI limit; not transient),
    ``EFA_DEVICE_INDEX_OUT_OF_RANGE``, ``ENI_QUOTA_EXCEEDED`` (account/VPC quota),
    ``SUBNET_FULL``, ``THROTTLED`` (retry with back-off), ``ENI_NOT_FOUND`` (eventual
    consistency right after create, or a wrong id), ``UNSUPPORTED_OPERATION`` (Tencent
    ``UnsupportedOperation.*``: the instance/ENI state or type does not allow it),
    ``CLOUD_API_ERROR`` (any other code). ``leftover_enis``: ENIs the log shows created but
    never attached. Raises ParseError when no error form above is in the text.
    """
    lines = _lines_joined(text)
    flat = "\n".join(s for _, s in lines)
    err = {"provider": None, "code": None, "message": None, "action": None, "http_status": None,
           "request_id": None, "service": None, "handler_error_code": None}
    found_at = None
    for lineno, s in lines:
        first = s.split("\n")[0]
        status = _STATUS.match(s.split("\n")[1]) if "\n" in s else None
        m = _BOTO.search(first)
        if m:
            err.update(code=m.group(1), action=m.group(2), message=m.group(3))
        elif _CFN.search(first):
            m = _CFN.search(first)
            err.update(message=m.group(1), service=m.group(2), http_status=int(m.group(3)), request_id=m.group(4),
                       handler_error_code=m.group(6), code=m.group(6))
        elif _TENCENT.search(first):
            m = _TENCENT.search(first)
            err.update(code=m.group(1), message=m.group(2).strip(), request_id=m.group(3), provider="tencentcloud")
        elif status or re.search(r"\[ERROR\]", first):
            m = _AWSERR.search(first)
            if not m or not _KNOWN_CODE.match(m.group(1)):
                continue
            err.update(code=m.group(1), message=m.group(2))
            act = re.search(r"Failed to (attach|create|delete|detach) eni", first)
            if act:
                err["action"] = act.group(1).capitalize() + "NetworkInterface"
            eni = re.search(r"eni (eni-[0-9a-f]+)", first)
            if eni:
                err["eni_id"] = eni.group(1)
        else:
            continue
        if status:
            err.update(http_status=int(status.group(1)), request_id=status.group(2))
        found_at = lineno
        break
    if found_at is None:
        try:
            body = json.loads("\n".join(split_lines(text, "cloud error output")))
            e = body["Response"]["Error"]
            err.update(code=e["Code"], message=e.get("Message"), request_id=body["Response"].get("RequestId"),
                       provider="tencentcloud")
        except (ValueError, KeyError, TypeError):
            raise ParseError("cloud error output: no AWS (awserr, botocore, CloudFormation) or Tencent Cloud "
                             "(TencentCloudSDKException, API JSON) error in it") from None
    if err["code"] is None:
        raise ParseError(f"cloud error output line {found_at}: an error without a code")
    err["provider"] = err["provider"] or _provider(err["code"], flat)
    facts = _numbers(flat)
    err.update(facts)
    cls, severity, cause, fix, retry = _classify(err)
    err.update({"class": cls, "severity": severity, "cause": cause, "fix": fix, "retryable": retry})
    return err


def _numbers(flat):
    out = {}
    m = _IFACE_COUNT.search(flat)
    if m:
        out["requested_interfaces"] = int(m.group(1))
        out["instance_type"] = m.group(2)
    m = re.search(r"Exceeded instance eni attachment limit: (\d+)", flat)
    if m:
        out["eni_limit"] = int(m.group(1))
    m = _DEVICE_INDEX.search(re.sub(r"\s+", " ", flat))
    if m:
        d, c, mx = (int(x) for x in m.groups())
        out.update(device_index=d, network_card_index=c, max_devices_per_card=mx, valid_device_indexes=[0, mx - 1])
    used = [int(x) for x in re.findall(r"Discovered device number is used: (\d+)", flat)]
    if used:
        out["device_numbers_used"] = sorted(set(used))
    m = re.search(r"Found a free device number: (\d+)", flat)
    if m:
        out["free_device_number"] = int(m.group(1))
    m = re.search(r"IP pool stats: total=(\d+), used=(\d+),.*?\bc\.maxAddrsPerENI = (\d+)", flat)
    if m:
        out["pool"] = {"total": int(m.group(1)), "used": int(m.group(2)), "max_addrs_per_eni": int(m.group(3))}
    created = re.findall(r"Created a new eni: (eni-[0-9a-f]+)", flat)
    attached = set(re.findall(r"Successfully attached eni (eni-[0-9a-f]+)|attached eni (eni-[0-9a-f]+) ", flat))
    if created:
        out["leftover_enis"] = [e for e in created if e not in {a for pair in attached for a in pair}]
    return out


def _classify(err):
    code, prov = err["code"], err["provider"]
    msg = err.get("message") or ""
    if "device_index" in err:
        d, c, mx = err["device_index"], err["network_card_index"], err["max_devices_per_card"]
        return ("EFA_DEVICE_INDEX_OUT_OF_RANGE", "fail",
                f"device index {d} on network card {c} is out of range: that card takes device indexes 0..{mx - 1} "
                "(the launch template sets DeviceIndex = NetworkCardIndex for each EFA interface)",
                "DeviceIndex 0 on network card 0 and DeviceIndex 1 on cards 1..N-1, one EFA per card; check "
                "DeviceIndex < per-card maximum and NetworkCardIndex < MaximumNetworkCards (DescribeInstanceTypes)",
                False)
    if code == "AttachmentLimitExceeded" or (prov == "tencentcloud" and code.startswith("LimitExceeded")
                                             and err.get("action") == "AttachNetworkInterface"):
        limit = err.get("eni_limit")
        itype = err.get("instance_type")
        cause = (f"the instance{' type ' + itype if itype else ''} cannot take another ENI"
                 + (f": {err.get('requested_interfaces')} requested, limit {limit}" if limit else "")
                 + f" ({code}{', HTTP ' + str(err['http_status']) if err.get('http_status') else ''})")
        left = err.get("leftover_enis")
        if left:
            cause += f"; {', '.join(left)} was created before the attach failed and is left unattached"
        return ("ENI_ATTACH_LIMIT_EXCEEDED", "fail", cause,
                "check the ENI count (1 primary + 1 per GPU) against the instance type's maximum network interfaces "
                "(DescribeInstanceTypes NetworkInfo.MaximumNetworkInterfaces, per card) before creating ENIs; use a "
                "type that allows that many or lower the NIC count; delete the leftover ENI; do not retry",
                False)
    if code in THROTTLE_CODES.get(prov, ()):
        return ("THROTTLED", "warn", f"{prov} throttled the API calls ({code})",
                "retry with back-off, run on fewer hosts at a time", True)
    if code in SUBNET_FULL_CODES.get(prov, ()):
        return ("SUBNET_FULL", "fail", f"the subnet has no free private address ({code})",
                "free addresses in the subnet or use a larger one in the same availability zone", False)
    if code in NOT_FOUND_CODES:
        return ("ENI_NOT_FOUND", "warn", f"the ENI id is unknown to the API ({code}): eventual consistency right after "
                "create, or a wrong/deleted id", "retry DescribeNetworkInterfaces for a few seconds; if it persists, "
                "check the id and region", True)
    if (prov == "aws" and code in AWS_QUOTA_CODES) or (prov == "tencentcloud" and code.startswith("LimitExceeded")):
        return ("ENI_QUOTA_EXCEEDED", "fail", f"the account's ENI quota is used up ({code}: {msg})",
                "delete unused ENIs or raise the quota (AWS Service Quotas 'Network interfaces per Region'; "
                "Tencent Cloud VPC quota)", False)
    if code.startswith("UnsupportedOperation"):
        return ("UNSUPPORTED_OPERATION", "fail", f"the operation is not allowed in this state ({code}: {msg})",
                "check the instance state/type and the ENI's state (attached elsewhere, primary ENI) before retrying",
                False)
    return ("CLOUD_API_ERROR", "fail", f"{prov} API error {code}: {msg}", "read the provider's error-code page "
            "for this code", False)
