"""Core of the ``cloud_eni`` module: one secondary elastic network interface (ENI) per GPU.

In the vendor's design each GPU of a node sends its NCCL traffic through its own ENI. This
file holds the provider-neutral part (the plan, the create/attach/wait sequence, retries,
error messages) and two small providers over the official SDKs. The Ansible module
(``plugins/modules/cloud_eni.py``) is a thin shell around :func:`ensure_enis`.

Shapes
------
``Eni``    one ENI as either cloud describes it, normalised (see the class docstring).
``Plan``   the difference between the wanted ``count`` and the secondary ENIs the instance
           already has in ``subnet_id`` (pure function :func:`plan_enis`, no API calls).
Result     the dict :func:`ensure_enis` returns and the module passes to ``exit_json``:
           ``changed`` (bool), ``interfaces`` (list of ``{id, mac, private_ip, device_index,
           status}``), ``created`` / ``attached`` (lists of ENI ids touched in this run),
           ``surplus`` (ids beyond ``count``, never deleted), ``plan`` (``Plan.as_result()``),
           ``warnings`` (list of str).

Units: times are seconds (``wait_timeout``, poll interval, back-off delays); ``count`` and
``device_index`` are plain integers; MAC addresses are lower-case ``aa:bb:cc:dd:ee:ff`` as the
kernel shows them in ``/sys/class/net/<if>/address`` (AWS already answers lower-case, Tencent
Cloud upper-case).

Idempotence
-----------
Every ENI this module creates carries the tag ``gpucluster-owner=<instance id>``. A run that
died between create and attach leaves such an ENI detached; the next run attaches ("adopts")
it instead of creating another one. Secondary ENIs already attached in ``subnet_id`` count
towards ``count`` whoever created them. Nothing is ever detached or deleted: ENIs beyond
``count`` are reported in ``surplus`` (pulling an ENI from under a running NCCL job breaks the
job, so that stays a deliberate manual step).

API actions used
----------------
AWS EC2 (boto3 ``ec2`` client, API 2016-11-15):
  DescribeNetworkInterfaces  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeNetworkInterfaces.html
  CreateNetworkInterface     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateNetworkInterface.html
  AttachNetworkInterface     https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AttachNetworkInterface.html
  error codes                https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
Tencent Cloud VPC (tencentcloud-sdk-python ``VpcClient``, API 2017-03-12):
  DescribeNetworkInterfaces  https://cloud.tencent.com/document/api/215/15817
  CreateNetworkInterface     https://cloud.tencent.com/document/api/215/15818 (asynchronous)
  AttachNetworkInterface     https://cloud.tencent.com/document/api/215/15819 (asynchronous)
  error codes                the "错误码" section of each page above; the same codes are in
                             ``tencentcloud/vpc/v20170312/errorcodes.py`` of the SDK.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from urllib.parse import urlparse

OWNER_TAG = "gpucluster-owner"
"""Tag key put on every ENI this module creates; the value is the instance id."""

# Normalised ENI status (``Eni.status``).
PENDING = "pending"  # being created (Tencent PENDING; AWS may answer "pending" right after create)
AVAILABLE = "available"  # exists, not attached
ATTACHING = "attaching"
ATTACHED = "attached"
DETACHING = "detaching"

# Throttling codes, retried with back-off (``RetryPolicy``).
#   AWS: "RequestLimitExceeded" (EC2 API request throttling,
#   https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html) plus the generic
#   "Throttling"/"ThrottlingException" botocore also treats as throttling.
#   Tencent Cloud: "RequestLimitExceeded" and its sub-codes (the SDK's own StandardRetryer list,
#   tencentcloud/common/retry.py), and "LimitExceeded.ActionLimited" which errorcodes.py
#   describes as "接口请求次数超过限频" (a rate limit, not a quota).
THROTTLE_CODES = {
    "aws": frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"}),
    "tencentcloud": frozenset({
        "RequestLimitExceeded",
        "RequestLimitExceeded.UinLimitExceeded",
        "RequestLimitExceeded.GlobalRegionUinLimitExceeded",
        "LimitExceeded.ActionLimited",
    }),
}
# "Busy" codes: another task holds the resource; also retried with back-off. Tencent Cloud's
# attach is asynchronous and mutually exclusive per instance (errorcodes.py: "互斥的任务正在执行").
BUSY_CODES = {
    "aws": frozenset(),
    "tencentcloud": frozenset({
        "OperationDenied.MutexTaskRunning",
        "UnsupportedOperation.MutexOperationTaskRunning",
    }),
}
# Quota: AWS NetworkInterfaceLimitExceeded = ENIs per Region of the account (CreateNetworkInterface);
# AttachmentLimitExceeded = ENIs the instance type can take (AttachNetworkInterface).
# Tencent Cloud: "LimitExceeded" / "LimitExceeded.*" (except the rate limit above), e.g.
# LimitExceeded.NetworkInterfaceLimitExceeded "VPC内创建的弹性网卡数量超过上限" on create and
# LimitExceeded on attach (ENIs per instance, https://cloud.tencent.com/document/product/576/18527).
AWS_QUOTA_CODES = frozenset({"NetworkInterfaceLimitExceeded", "AttachmentLimitExceeded"})
# Subnet out of addresses: AWS InsufficientFreeAddressesInSubnet; Tencent Cloud
# ResourceInsufficient.Subnet ("子网IP资源不足, 无法分配IP", listed for CreateNetworkInterface).
SUBNET_FULL_CODES = {
    "aws": frozenset({"InsufficientFreeAddressesInSubnet"}),
    "tencentcloud": frozenset({"ResourceInsufficient.Subnet"}),
}
# Right after CreateNetworkInterface, EC2 is eventually consistent and may not know the id yet.
NOT_FOUND_CODES = frozenset({"InvalidNetworkInterfaceID.NotFound", "ResourceNotFound"})

REDACTED = "********"


class CloudEniError(Exception):
    """A failure explained for a human: the instance, the option to change and the fix.

    ``result`` holds what was already done (``created``/``attached`` ENI ids) so the module can
    return it with ``fail_json``.
    """

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result or {}


class MissingSdkError(CloudEniError):
    """The provider's SDK is not importable on the controller; ``library`` names the package."""

    def __init__(self, library, exc):
        super().__init__(f"cloud_eni needs the Python package {library!r} on the controller: {exc}")
        self.library = library


class ApiError(Exception):
    """Provider-neutral view of one failed API call.

    ``code`` is the API error code as the cloud sends it (AWS ``Error.Code``, Tencent Cloud
    ``Response.Error.Code``), ``attempts`` how many calls were made (more than 1 after throttling
    retries), ``waited`` the seconds slept between them.
    """

    def __init__(self, provider, action, code, message, request_id=None, attempts=1, waited=0.0):
        super().__init__(f"{provider} {action}: {code}: {message}")
        self.provider = provider
        self.action = action
        self.code = code
        self.message = message
        self.request_id = request_id
        self.attempts = attempts
        self.waited = waited


def redact(text, secrets):
    """``text`` with every non-empty string of ``secrets`` replaced by ``********``."""
    text = str(text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


@dataclass(frozen=True)
class Eni:
    """One ENI, normalised across clouds.

    id            AWS ``eni-0123...``, Tencent Cloud ``eni-abcd1234``
    mac           lower-case, colon-separated
    private_ip    the primary private IPv4 address
    subnet_id, vpc_id, security_groups (tuple of group ids)
    status        one of pending / available / attaching / attached / detaching (or the cloud's
                  own word, lower-cased, for anything else)
    instance_id   the instance it is attached to, None when detached
    device_index  the attachment's device index (0 = primary), None when detached
    primary       True for the instance's primary ENI (never touched by this module)
    owner         value of the ``gpucluster-owner`` tag, None when absent
    """

    id: str
    mac: str
    private_ip: str
    subnet_id: str
    vpc_id: str = ""
    security_groups: tuple = ()
    status: str = AVAILABLE
    instance_id: str | None = None
    device_index: int | None = None
    primary: bool = False
    owner: str | None = None
    network_card_index: int = 0
    interface_type: str = "interface"

    def as_result(self):
        return {
            "id": self.id,
            "mac": self.mac,
            "private_ip": self.private_ip,
            "device_index": self.device_index,
            "network_card_index": self.network_card_index,
            "interface_type": self.interface_type,
            "status": self.status,
        }


INTERFACE_TYPES = ("interface", "efa", "efa-only")
"""AWS ``InterfaceType`` values this module creates: ``interface`` (an ENA ENI), ``efa`` (EFA with
ENA: OS-bypass and an IP address) and ``efa-only`` (OS-bypass only, no IP address)."""


@dataclass(frozen=True)
class NetworkCard:
    """One network card of an instance type (EC2 DescribeInstanceTypes
    ``NetworkInfo.NetworkCards[]``): ``index`` (NetworkCardIndex), ``max_interfaces``
    (MaximumNetworkInterfaces) and the ``interface_types`` it takes (InterfaceTypes)."""

    index: int
    max_interfaces: int
    interface_types: tuple = ("interface",)


@dataclass(frozen=True)
class InstanceNetwork:
    """What the instance type allows and the instance's state (AWS; None on Tencent Cloud,
    whose instances have one card and number ENIs themselves)."""

    instance_type: str
    state: str
    cards: tuple = ()
    efa_supported: bool = False
    max_efa_interfaces: int = 0

    @property
    def multi_card(self):
        return len(self.cards) > 1


def _preferred_device_index(card, interface_type, device_index_start):
    """AWS's recommended slot on a multi-card instance (EC2 User Guide, "Maximize network
    bandwidth on Amazon EC2 instances with multiple network cards"): card 0 keeps device 0 for the
    primary ENA interface, so anything else goes to device 1 there; on every other card an EFA
    (or EFA-only) interface takes device 0 and an ENA interface device 1."""
    if card == 0:
        return max(1, device_index_start)
    return 0 if interface_type != "interface" else 1


def plan_slots(attached, count, cards, interface_type="interface", device_index_start=1, kept=None):
    """(network card index, device index) for each of the ``count`` wanted secondary interfaces
    beyond those already ``attached`` (pure).

    ``attached``: the instance's attached ENIs (primary included) as :class:`Eni`, whose slots are
    taken; ``kept``: the secondary ones that count towards the wanted interfaces (default: every
    attached secondary ENI); ``cards``: the instance type's :class:`NetworkCard` list. The wanted
    interfaces are spread evenly over the
    cards (interface ``j`` of ``n`` on card ``floor(j * cards / n)``: on a p5.48xlarge, 8 wanted
    interfaces land on cards 0, 4, 8, ... 28, one per GPU's PCIe switch; on a p4d.24xlarge 8 go
    two per card), the secondary ENIs already attached fill the slots of their own cards first,
    and each new one takes the lowest free device index of its card from the preferred one.
    Raises ValueError naming the card and the limit when a card is full or does not take the type.
    """
    cards = sorted(cards, key=lambda c: c.index)
    if not cards:
        cards = [NetworkCard(0, 1 << 30, INTERFACE_TYPES)]
    used = {(e.network_card_index, e.device_index) for e in attached if e.device_index is not None}
    secondary = [e for e in (attached if kept is None else kept) if not e.primary]
    total = len(secondary) + count
    targets = [cards[j * len(cards) // total].index for j in range(total)] if total else []
    for e in secondary:  # an attached ENI satisfies one wanted slot of its card
        if e.network_card_index in targets:
            targets.remove(e.network_card_index)
    targets = targets[:count]
    by_index = {c.index: c for c in cards}
    slots = []
    for card in targets:
        nc = by_index[card]
        if interface_type not in nc.interface_types:
            raise ValueError(f"network card {card} takes interface types {list(nc.interface_types)}, not "
                             f"{interface_type!r}")
        # Device indexes of a card run 0 .. MaximumNetworkInterfaces - 1 (EC2 refuses more: "The
        # specified number '2' for the device index exceeds ... The maximum devices for this network
        # card is 2", fixture cloud-eni/N15); the preferred one first, then the others.
        preferred = _preferred_device_index(card, interface_type, device_index_start)
        order = list(range(preferred, nc.max_interfaces)) + list(range(0, min(preferred, nc.max_interfaces)))
        free = [d for d in order if (card, d) not in used and (card, d) != (0, 0)]
        if not free:
            on_card = sum(1 for c, _ in used if c == card)
            raise ValueError(f"network card {card} takes at most {nc.max_interfaces} network interfaces "
                             f"(device indexes 0..{nc.max_interfaces - 1}, DescribeInstanceTypes "
                             f"MaximumNetworkInterfaces) and has {on_card}")
        device = free[0]
        used.add((card, device))
        slots.append((card, device))
    return slots


@dataclass(frozen=True)
class Plan:
    """What :func:`ensure_enis` will do.

    keep            secondary ENIs attached to the instance in the subnet, up to ``count``
    adopt           detached ENIs tagged for this instance (left by an interrupted run), to attach
    create          how many new ENIs to create
    device_indexes  device index for each ENI of ``adopt`` then of the new ones, in that order
                    (AWS only; Tencent Cloud assigns the index itself)
    surplus         attached secondary ENIs in the subnet beyond ``count``; never removed
    """

    keep: tuple = ()
    adopt: tuple = ()
    create: int = 0
    device_indexes: tuple = ()
    surplus: tuple = ()
    network_cards: tuple = ()

    @property
    def changes(self):
        return bool(self.adopt) or self.create > 0

    def as_result(self):
        return {
            "keep": [e.id for e in self.keep],
            "adopt": [e.id for e in self.adopt],
            "create": self.create,
            "device_indexes": list(self.device_indexes),
            "network_cards": list(self.network_cards) or [0] * len(self.device_indexes),
            "surplus": [e.id for e in self.surplus],
        }


def _index_key(eni):
    return (eni.device_index is None, eni.device_index if eni.device_index is not None else 0, eni.id)


def plan_enis(enis, instance_id, subnet_id, count, device_index_start=1, network=None,
              interface_type="interface"):
    """Diff between ``count`` wanted secondary ENIs and what ``enis`` says exists (pure).

    ``enis``: every ENI attached to the instance plus every ENI tagged for it (what
    ``Provider.list_enis`` returns). Attached secondary ENIs in ``subnet_id`` are kept in
    device-index order; the missing ones come first from detached ENIs tagged for this instance
    (available or still pending), then from new ones. Device indexes are the lowest ones from
    ``device_index_start`` not used by any attachment of the instance (AWS numbers them; index 0
    is the primary ENI). On an instance type with several network cards (``network``, an
    :class:`InstanceNetwork`) the new ones are placed by :func:`plan_slots`.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if device_index_start < 1:
        raise ValueError(f"device_index_start must be >= 1 (0 is the primary ENI), got {device_index_start}")
    attached = [e for e in enis if e.instance_id == instance_id]
    secondary = sorted(
        (e for e in attached if not e.primary and e.subnet_id == subnet_id), key=_index_key
    )
    keep, surplus = tuple(secondary[:count]), tuple(secondary[count:])
    need = count - len(keep)
    adoptable = sorted(
        (
            e for e in enis
            if e.instance_id is None and e.owner == instance_id and e.subnet_id == subnet_id
            and e.status in (AVAILABLE, PENDING)
        ),
        key=lambda e: e.id,
    )
    adopt = tuple(adoptable[:max(need, 0)])
    create = max(need - len(adopt), 0)
    if network is not None and network.multi_card:
        slots = plan_slots(attached, len(adopt) + create, network.cards, interface_type, device_index_start,
                           kept=list(keep))
        return Plan(keep=keep, adopt=adopt, create=create, device_indexes=tuple(d for _, d in slots),
                    surplus=surplus, network_cards=tuple(c for c, _ in slots))
    if network is not None and network.cards and len(attached) + len(adopt) + create > network.cards[0].max_interfaces:
        # Checked before anything is created: EC2 would only refuse at attach time
        # (AttachmentLimitExceeded), with the new ENIs already made.
        raise ValueError(
            f"{network.instance_type} takes at most {network.cards[0].max_interfaces} network interfaces "
            f"(DescribeInstanceTypes MaximumNetworkInterfaces); the instance has {len(attached)} attached and "
            f"{len(adopt) + create} more are wanted")
    used = {e.device_index for e in attached if e.device_index is not None and not e.network_card_index}
    indexes = []
    candidate = device_index_start
    while len(indexes) < len(adopt) + create:
        if candidate not in used:
            indexes.append(candidate)
        candidate += 1
    return Plan(keep=keep, adopt=adopt, create=create, device_indexes=tuple(indexes), surplus=surplus,
                network_cards=(0,) * len(indexes))


@dataclass
class RetryPolicy:
    """Back-off for throttled ("RequestLimitExceeded") and busy API calls.

    Attempt ``n`` (0-based) that fails with a throttling code sleeps ``d/2 + d/2 * rand()``
    seconds with ``d = min(max_delay, base_delay * 2**n)`` (exponential back-off with "equal
    jitter", the scheme AWS describes for EC2 throttling and the one its SDKs use with a 20 s
    cap; Tencent's StandardRetryer uses 2**n s). With the defaults a call is tried 6 times over
    at most 31 s. The SDKs' own retries are switched off so that this is the only policy.
    ``sleep`` and ``rand`` are injectable for tests; ``None`` means ``time.sleep`` /
    ``random.random``.
    """

    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 20.0
    sleep: object = None
    rand: object = None

    def delay(self, attempt):
        cap = min(self.max_delay, self.base_delay * (2 ** attempt))
        rand = self.rand or random.random
        return cap / 2 + cap / 2 * rand()

    def pause(self, seconds):
        (self.sleep or time.sleep)(seconds)


class Provider(ABC):
    """Common part of the providers: retrying calls and turning SDK errors into ``ApiError``.

    ``secrets`` are the credential strings; every error message is scrubbed of them.
    """

    name = ""
    label = ""

    def __init__(self, region, retry=None, secrets=()):
        self.region = region
        self.retry = retry or RetryPolicy()
        self.secrets = tuple(s for s in secrets if s)

    @abstractmethod
    def _api_error(self, action, exc):
        """``ApiError`` for an SDK exception raised by ``action``; None if ``exc`` is no API error."""

    @abstractmethod
    def list_enis(self, instance_id):
        """Every ENI attached to ``instance_id`` plus every ENI tagged ``gpucluster-owner=<id>``."""

    @abstractmethod
    def describe(self, ids):
        """The ENIs with these ids (ids the API does not know are left out)."""

    @abstractmethod
    def create(self, instance_id, subnet_id, vpc_id, security_groups, token, interface_type="interface"):
        """Create one ENI tagged for ``instance_id``; ``token`` is the idempotency ClientToken."""

    @abstractmethod
    def attach(self, eni_id, instance_id, device_index, token, network_card_index=0):
        """Attach ``eni_id`` to ``instance_id`` (``device_index`` is used where the API takes one)."""

    def instance_network(self, instance_id):
        """:class:`InstanceNetwork` of the instance, or None where the cloud numbers ENIs itself."""
        return None

    def _call(self, action, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, retried on throttling/busy codes per ``self.retry``."""
        retryable = THROTTLE_CODES[self.name] | BUSY_CODES[self.name]
        waited, attempt = 0.0, 0
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # any SDK exception; _api_error decides what is an API error
                err = self._api_error(action, exc)
                if err is None:
                    raise
                attempt += 1
                if err.code not in retryable or attempt >= self.retry.max_attempts:
                    err.attempts, err.waited = attempt, waited
                    raise err from None
                delay = self.retry.delay(attempt - 1)
                waited += delay
                self.retry.pause(delay)


# --------------------------------------------------------------------------------------------
# AWS


class AwsProvider(Provider):
    """EC2 through a boto3 ``ec2`` client (pass one in for tests, e.g. with a botocore Stubber).

    ENIs are created with ``Groups``, a ``Description`` and the owner tag, and an idempotency
    ``ClientToken`` that stays the same across throttling retries of one create; they are attached
    with an explicit ``DeviceIndex``, and on instance types with several network cards (p4d, p5)
    an explicit ``NetworkCardIndex`` (placement: :func:`plan_slots`, from DescribeInstanceTypes).
    ``InterfaceType`` ``efa`` / ``efa-only`` creates Elastic Fabric Adapters.
    """

    name = "aws"
    label = "AWS EC2"

    def __init__(self, client, region, retry=None, secrets=()):
        super().__init__(region, retry=retry, secrets=secrets)
        self.client = client

    @classmethod
    def from_params(cls, region, access_key=None, secret_key=None, session_token=None,
                    endpoint_url=None, retry=None):
        """Client from explicit credentials, or boto3's default chain (``AWS_ACCESS_KEY_ID`` /
        ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, shared config, instance role)."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise MissingSdkError("boto3", exc) from exc
        session = boto3.session.Session(
            aws_access_key_id=access_key or None,
            aws_secret_access_key=secret_key or None,
            aws_session_token=session_token or None,
            region_name=region,
        )
        client = session.client(
            "ec2", endpoint_url=endpoint_url or None,
            config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
        )
        return cls(client, region, retry=retry, secrets=(access_key, secret_key, session_token))

    def _api_error(self, action, exc):
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            meta = exc.response.get("ResponseMetadata", {})
            return ApiError(self.label, action, error.get("Code", "Unknown"), error.get("Message", ""),
                            meta.get("RequestId"))
        if isinstance(exc, BotoCoreError):
            return ApiError(self.label, action, type(exc).__name__, str(exc))
        return None

    @staticmethod
    def _eni(raw):
        attachment = raw.get("Attachment") or {}
        instance_id = attachment.get("InstanceId") if attachment.get("Status") != "detached" else None
        device_index = attachment.get("DeviceIndex") if instance_id else None
        status = raw.get("Status", "")
        if instance_id:
            status = {"attached": ATTACHED, "attaching": ATTACHING, "detaching": DETACHING}.get(
                attachment.get("Status", ""), attachment.get("Status", "").lower())
        else:
            status = {"available": AVAILABLE, "pending": PENDING}.get(status, status.lower())
        tags = {t.get("Key"): t.get("Value") for t in raw.get("TagSet") or []}
        return Eni(
            id=raw["NetworkInterfaceId"],
            mac=(raw.get("MacAddress") or "").lower(),
            private_ip=raw.get("PrivateIpAddress") or "",
            subnet_id=raw.get("SubnetId") or "",
            vpc_id=raw.get("VpcId") or "",
            security_groups=tuple(g["GroupId"] for g in raw.get("Groups") or []),
            status=status,
            instance_id=instance_id,
            device_index=int(device_index) if device_index is not None else None,
            primary=bool(instance_id) and device_index == 0 and not attachment.get("NetworkCardIndex"),
            owner=tags.get(OWNER_TAG),
            network_card_index=int(attachment.get("NetworkCardIndex") or 0) if instance_id else 0,
            interface_type=raw.get("InterfaceType") or "interface",
        )

    def instance_network(self, instance_id):
        raw = self._call("DescribeInstances", self.client.describe_instances, InstanceIds=[instance_id])
        instances = [i for r in raw.get("Reservations", []) for i in r.get("Instances", [])]
        if not instances:
            return None
        inst = instances[0]
        itype = inst.get("InstanceType", "")
        types = self._call("DescribeInstanceTypes", self.client.describe_instance_types, InstanceTypes=[itype])
        info = (types.get("InstanceTypes") or [{}])[0].get("NetworkInfo") or {}
        cards = tuple(
            NetworkCard(int(c.get("NetworkCardIndex", 0)), int(c.get("MaximumNetworkInterfaces", 0)),
                        tuple(c.get("InterfaceTypes") or ("interface",)))
            for c in info.get("NetworkCards") or []
        )
        return InstanceNetwork(
            instance_type=itype, state=(inst.get("State") or {}).get("Name", ""), cards=cards,
            efa_supported=bool(info.get("EfaSupported")),
            max_efa_interfaces=int((info.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)),
        )

    def _describe_filtered(self, filters):
        def run():
            pages = self.client.get_paginator("describe_network_interfaces").paginate(Filters=filters)
            return [raw for page in pages for raw in page["NetworkInterfaces"]]
        return [self._eni(raw) for raw in self._call("DescribeNetworkInterfaces", run)]

    def list_enis(self, instance_id):
        found = {}
        for flt in ({"Name": "attachment.instance-id", "Values": [instance_id]},
                    {"Name": f"tag:{OWNER_TAG}", "Values": [instance_id]}):
            for eni in self._describe_filtered([flt]):
                found[eni.id] = eni
        return list(found.values())

    def describe(self, ids):
        raw = self._call("DescribeNetworkInterfaces", self.client.describe_network_interfaces,
                         NetworkInterfaceIds=list(ids))
        return [self._eni(r) for r in raw["NetworkInterfaces"]]

    def create(self, instance_id, subnet_id, vpc_id, security_groups, token, interface_type="interface"):
        extra = {"InterfaceType": interface_type} if interface_type != "interface" else {}
        raw = self._call(
            "CreateNetworkInterface", self.client.create_network_interface,
            **extra,
            SubnetId=subnet_id,
            Groups=list(security_groups),
            Description=f"gpucluster secondary ENI of {instance_id}",
            ClientToken=token,
            TagSpecifications=[{
                "ResourceType": "network-interface",
                "Tags": [{"Key": OWNER_TAG, "Value": instance_id},
                         {"Key": "Name", "Value": f"gpucluster-{instance_id}"}],
            }],
        )
        return self._eni(raw["NetworkInterface"])

    def attach(self, eni_id, instance_id, device_index, token, network_card_index=0):
        extra = {"NetworkCardIndex": network_card_index} if network_card_index else {}
        self._call("AttachNetworkInterface", self.client.attach_network_interface,
                   NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=device_index, **extra)


# --------------------------------------------------------------------------------------------
# Tencent Cloud


class TencentCloudProvider(Provider):
    """Tencent Cloud VPC through ``tencentcloud.vpc.v20170312.vpc_client.VpcClient``.

    CreateNetworkInterface needs the VPC id; it is taken from the instance's primary ENI (an ENI
    can only be attached to an instance of its own VPC). Both create and attach are asynchronous:
    the ENI is ``PENDING`` after create and has no ``Attachment`` until the attach task is done,
    so :func:`ensure_enis` polls DescribeNetworkInterfaces. The attach call takes no device index;
    Tencent Cloud numbers the ENIs itself (``Attachment.DeviceIndex``).
    """

    name = "tencentcloud"
    label = "Tencent Cloud VPC"
    page_size = 100  # DescribeNetworkInterfaces: Limit "默认为20，最大值为100"

    def __init__(self, client, region, retry=None, secrets=()):
        super().__init__(region, retry=retry, secrets=secrets)
        self.client = client
        from tencentcloud.vpc.v20170312 import models

        self.models = models

    @classmethod
    def from_params(cls, region, access_key=None, secret_key=None, session_token=None,
                    endpoint_url=None, retry=None):
        """Client from explicit credentials or the SDK's environment variables
        ``TENCENTCLOUD_SECRET_ID`` / ``TENCENTCLOUD_SECRET_KEY``. ``endpoint_url`` such as
        ``https://vpc.ap-shanghai-fsi.tencentcloudapi.com`` (finance regions, private endpoints)."""
        try:
            from tencentcloud.common import credential
            from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
            from tencentcloud.common.profile.client_profile import ClientProfile
            from tencentcloud.common.profile.http_profile import HttpProfile
            from tencentcloud.vpc.v20170312 import vpc_client
        except ImportError as exc:
            raise MissingSdkError("tencentcloud-sdk-python-vpc", exc) from exc
        if access_key or secret_key:
            try:
                cred = credential.Credential(access_key or "", secret_key or "", session_token or None)
            except TencentCloudSDKException as exc:
                raise CloudEniError(
                    f"cloud_eni: Tencent Cloud credentials rejected before any call: {exc.get_message()}. "
                    "Fix: set 'access_key' (SecretId) and 'secret_key' (SecretKey) from ansible-vault."
                ) from None
        else:
            cred = credential.EnvironmentVariableCredential().get_credential()
            if cred is None:
                raise CloudEniError(
                    "cloud_eni: no Tencent Cloud credentials. Fix: set 'access_key' and 'secret_key' "
                    "(SecretId/SecretKey, from ansible-vault) or export TENCENTCLOUD_SECRET_ID and "
                    "TENCENTCLOUD_SECRET_KEY on the controller."
                )
        http = HttpProfile()
        if endpoint_url:
            url = urlparse(endpoint_url if "://" in endpoint_url else "https://" + endpoint_url)
            http = HttpProfile(protocol=url.scheme or "https", endpoint=url.netloc)
        profile = ClientProfile(httpProfile=http, language="en-US")
        client = vpc_client.VpcClient(cred, region, profile)
        secrets = (access_key, secret_key, session_token, getattr(cred, "secret_key", None))
        return cls(client, region, retry=retry, secrets=secrets)

    def _api_error(self, action, exc):
        from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException

        if isinstance(exc, TencentCloudSDKException):
            message = exc.get_message()
            if isinstance(message, bytes):
                message = message.decode("utf-8", "replace")
            return ApiError(self.label, action, exc.get_code(), message, exc.get_request_id())
        return None

    @staticmethod
    def _eni(raw):
        attachment = raw.get("Attachment") or {}
        instance_id = attachment.get("InstanceId") or None
        state = (raw.get("State") or "").upper()
        if instance_id:
            words = {"AVAILABLE": ATTACHED, "ATTACHING": ATTACHING, "DETACHING": DETACHING}
        else:
            words = {"AVAILABLE": AVAILABLE, "PENDING": PENDING, "ATTACHING": ATTACHING}
        status = words.get(state, state.lower())
        primary_ip = next(
            (p.get("PrivateIpAddress") for p in raw.get("PrivateIpAddressSet") or [] if p.get("Primary")), ""
        )
        tags = {t.get("Key"): t.get("Value") for t in raw.get("TagSet") or []}
        device_index = attachment.get("DeviceIndex") if instance_id else None
        return Eni(
            id=raw["NetworkInterfaceId"],
            mac=(raw.get("MacAddress") or "").lower(),
            private_ip=primary_ip or "",
            subnet_id=raw.get("SubnetId") or "",
            vpc_id=raw.get("VpcId") or "",
            security_groups=tuple(raw.get("GroupSet") or ()),
            status=status,
            instance_id=instance_id,
            device_index=int(device_index) if device_index is not None else None,
            primary=bool(raw.get("Primary")),
            owner=tags.get(OWNER_TAG),
        )

    def _send(self, action, request):
        """Call ``VpcClient.<action>`` and return the response model as a plain dict."""
        response = self._call(action, getattr(self.client, action), request)
        return json.loads(response.to_json_string())

    def _describe(self, **params):
        out, offset = [], 0
        while True:
            request = self.models.DescribeNetworkInterfacesRequest()
            request.from_json_string(_json({**params, "Offset": offset, "Limit": self.page_size}))
            response = self._send("DescribeNetworkInterfaces", request)
            page = response.get("NetworkInterfaceSet") or []
            out.extend(self._eni(raw) for raw in page)
            offset += len(page)
            if not page or offset >= int(response.get("TotalCount") or 0):
                return out

    def list_enis(self, instance_id):
        found = {}
        for name in ("attachment.instance-id", f"tag:{OWNER_TAG}"):
            for eni in self._describe(Filters=[{"Name": name, "Values": [instance_id]}]):
                found[eni.id] = eni
        return list(found.values())

    def describe(self, ids):
        return self._describe(NetworkInterfaceIds=list(ids))

    def create(self, instance_id, subnet_id, vpc_id, security_groups, token, interface_type="interface"):
        request = self.models.CreateNetworkInterfaceRequest()
        request.from_json_string(_json({
            "VpcId": vpc_id,
            "SubnetId": subnet_id,
            # NetworkInterfaceName: at most 60 bytes; Tencent instance ids are 12 characters.
            "NetworkInterfaceName": f"gpucluster-{instance_id}"[:60],
            "NetworkInterfaceDescription": f"gpucluster secondary ENI of {instance_id}"[:60],
            "SecurityGroupIds": list(security_groups),
            "Tags": [{"Key": OWNER_TAG, "Value": instance_id}],
            "ClientToken": token,
        }))
        return self._eni(self._send("CreateNetworkInterface", request)["NetworkInterface"])

    def attach(self, eni_id, instance_id, device_index, token, network_card_index=0):
        request = self.models.AttachNetworkInterfaceRequest()
        request.from_json_string(_json({"NetworkInterfaceId": eni_id, "InstanceId": instance_id,
                                        "ClientToken": token}))
        self._send("AttachNetworkInterface", request)


def _json(obj):
    return json.dumps(obj)


PROVIDERS = {"aws": AwsProvider, "tencentcloud": TencentCloudProvider}


def make_provider(provider, region, access_key=None, secret_key=None, session_token=None,
                  endpoint_url=None, retry=None):
    """The provider object for ``provider`` ('aws' or 'tencentcloud') built from module params."""
    try:
        cls = PROVIDERS[provider]
    except KeyError:
        raise CloudEniError(
            f"cloud_eni: unknown provider {provider!r}; choose one of {sorted(PROVIDERS)}") from None
    return cls.from_params(region, access_key=access_key, secret_key=secret_key,
                           session_token=session_token, endpoint_url=endpoint_url, retry=retry)


# --------------------------------------------------------------------------------------------
# The sequence


@dataclass
class _Context:
    provider: Provider
    instance_id: str
    subnet_id: str
    count: int
    created: list = field(default_factory=list)
    attached: list = field(default_factory=list)

    def progress(self):
        return {"created": list(self.created), "attached": list(self.attached)}

    def fail(self, message):
        done = ""
        if self.created or self.attached:
            done = (f" Done before the failure: created {self.created or 'none'}, attached "
                    f"{self.attached or 'none'}; a re-run attaches the created ENIs instead of creating "
                    "new ones.")
        return CloudEniError(redact(message + done, self.provider.secrets), result=self.progress())

    def explain(self, err, attached_now=0):
        """``CloudEniError`` for an ``ApiError``: what happened, which option, the fix."""
        p, iid, sid = self.provider, self.instance_id, self.subnet_id
        what = f"{err.provider} {err.action} answered {err.code}: {err.message}"
        if err.request_id:
            what += f" (request id {err.request_id})"
        throttle = THROTTLE_CODES[p.name] | BUSY_CODES[p.name]
        if err.code in throttle:
            return self.fail(
                f"cloud_eni: instance {iid}: still throttled after {err.attempts} attempts over "
                f"{err.waited:.0f} s ({what}). Fix: run this task on fewer hosts at a time "
                "(serial/throttle on the play) or re-run later.")
        if err.code in SUBNET_FULL_CODES[p.name]:
            return self.fail(
                f"cloud_eni: instance {iid}: subnet {sid} (option 'subnet_id') has no free private IPv4 "
                f"address left ({what}). Fix: free addresses in {sid} or set 'subnet_id' to a larger "
                "subnet in the instance's availability zone.")
        is_quota = err.code in AWS_QUOTA_CODES if p.name == "aws" else (
            err.code == "LimitExceeded" or err.code.startswith("LimitExceeded."))
        if is_quota and err.action == "AttachNetworkInterface":
            return self.fail(
                f"cloud_eni: instance {iid}: the instance cannot take another ENI ({what}); it has "
                f"{attached_now} secondary ENI(s) in {sid} and option 'count' asks for {self.count}. Fix: "
                "lower 'count' to the ENI limit of the instance type (the role passes the node's GPU "
                "count; override it), or use an instance type that allows more ENIs.")
        if is_quota:
            quota = ("Service Quotas > Amazon VPC > 'Network interfaces per Region'" if p.name == "aws"
                     else "the VPC quota for ENIs (console: VPC > quotas, or a ticket)")
            return self.fail(
                f"cloud_eni: instance {iid}: the account's ENI quota in region {p.region} is used up "
                f"({what}); option 'count' asks for {self.count} secondary ENI(s). Fix: delete unused "
                f"ENIs or raise {quota}, then re-run.")
        return self.fail(f"cloud_eni: instance {iid}: {what}.")


def _wait(ctx, ids, done, what, timeout, poll_interval, clock, sleep):
    """Poll DescribeNetworkInterfaces until ``done(eni)`` holds for every id; returns ``{id: Eni}``.

    Ids the API does not know yet (eventual consistency right after create) count as not done.
    """
    deadline = clock() + timeout
    last = {}
    while True:
        try:
            current = {e.id: e for e in ctx.provider.describe(ids)}
        except ApiError as err:
            if err.code not in NOT_FOUND_CODES:
                raise ctx.explain(err) from None
            current = {}
        last.update(current)
        if all(i in current and done(current[i]) for i in ids):
            return current
        if clock() >= deadline:
            states = {i: (last[i].status if i in last else "not visible yet") for i in ids}
            raise ctx.fail(
                f"cloud_eni: instance {ctx.instance_id}: ENI(s) did not {what} within "
                f"wait_timeout={timeout} s (last status: {states}). Fix: raise option 'wait_timeout', "
                "or look at these ENIs in the console.")
        (sleep or time.sleep)(poll_interval)


def ensure_enis(provider, instance_id, subnet_id, security_groups, count, device_index_start=1,
                wait=True, wait_timeout=300, check_mode=False, poll_interval=2.0, clock=None, sleep=None,
                interface_type="interface"):
    """Make ``instance_id`` have ``count`` secondary ENIs in ``subnet_id``; return the result dict.

    Sequence: list the instance's ENIs and the ones tagged for it (2 x DescribeNetworkInterfaces),
    plan (:func:`plan_enis`); in check mode or with nothing to do, stop there. Otherwise create the
    missing ENIs (CreateNetworkInterface, tagged ``gpucluster-owner``), wait until they and any
    adopted ones are ``available`` (always: neither cloud attaches a pending ENI), then attach one
    at a time (AttachNetworkInterface), waiting after each until it is ``attached`` when ``wait`` is
    true (Tencent Cloud refuses a second attach while one runs on the instance). ``wait_timeout``
    bounds each wait in seconds. Raises ``CloudEniError`` with a message naming the instance, the
    option and the fix, and with ``result`` = what was already done.

    On AWS the instance type is read first (DescribeInstances, DescribeInstanceTypes): with several
    network cards the ENIs are placed by :func:`plan_slots`; ``interface_type`` ``efa`` /
    ``efa-only`` is refused before any change where the type has no EFA, takes fewer EFAs than
    wanted, or the instance is running (EC2 attaches EFAs only to stopped instances: "EFAs can't
    be attached to or detached from an instance in a running state", EC2 User Guide, create-efa).
    """
    clock = clock or time.monotonic
    ctx = _Context(provider, instance_id, subnet_id, count)
    if not security_groups:
        raise ctx.fail(
            f"cloud_eni: instance {instance_id}: option 'security_groups' is empty. Fix: give the id(s) of "
            "the security group(s) the GPU ENIs belong to (Tencent Cloud attaches no ENI without one).")
    if count < 0 or device_index_start < 1:
        raise ctx.fail(
            f"cloud_eni: instance {instance_id}: option 'count' must be >= 0 (got {count}) and "
            f"'device_index_start' >= 1 (got {device_index_start}; 0 is the primary ENI). Fix: correct it.")
    try:
        enis = provider.list_enis(instance_id)
    except ApiError as err:
        raise ctx.explain(err) from None
    mine = [e for e in enis if e.instance_id == instance_id]
    if not mine:
        raise ctx.fail(
            f"cloud_eni: instance {instance_id} has no network interface in {provider.label} region "
            f"{provider.region}. Fix: check options 'instance_id' and 'region'.")
    if interface_type not in INTERFACE_TYPES:
        raise ctx.fail(f"cloud_eni: instance {instance_id}: option 'interface_type' is {interface_type!r}. "
                       f"Fix: one of {', '.join(INTERFACE_TYPES)}.")
    try:
        network = provider.instance_network(instance_id)
    except ApiError as err:
        raise ctx.explain(err) from None
    if interface_type != "interface" and network is None:
        raise ctx.fail(f"cloud_eni: instance {instance_id}: option 'interface_type' {interface_type!r} is an AWS "
                       f"Elastic Fabric Adapter; {provider.label} has none. Fix: interface_type: interface.")
    try:
        plan = plan_enis(enis, instance_id, subnet_id, count, device_index_start, network, interface_type)
    except ValueError as exc:
        raise ctx.fail(
            f"cloud_eni: instance {instance_id} ({network.instance_type if network else provider.label}): "
            f"option 'count' {count} with interface_type {interface_type!r} does not fit: {exc}. Fix: lower "
            "cloud_eni_count or choose an instance type with more network interfaces.") from None
    if interface_type != "interface" and plan.changes:
        efa_now = sum(1 for e in mine if e.interface_type != "interface")
        wanted_efa = efa_now + len(plan.adopt) + plan.create
        if not network.efa_supported or wanted_efa > network.max_efa_interfaces:
            raise ctx.fail(
                f"cloud_eni: instance {instance_id} ({network.instance_type}) takes "
                f"{network.max_efa_interfaces if network.efa_supported else 'no'} EFA interfaces "
                f"(DescribeInstanceTypes EfaInfo), {wanted_efa} wanted. Fix: lower cloud_eni_count, or "
                "interface_type: interface.")
        if network.state == "running":
            slots = ", ".join(f"NetworkCardIndex={c},DeviceIndex={d},InterfaceType={interface_type}"
                              for c, d in zip(plan.network_cards, plan.device_indexes, strict=True))
            raise ctx.fail(
                f"cloud_eni: instance {instance_id} ({network.instance_type}) is running, and EC2 attaches "
                "EFA interfaces only to a stopped instance. Fix: stop it and rerun, or launch it with these "
                f"interfaces (launch template NetworkInterfaces): {slots}.")
    primary = next((e for e in mine if e.primary), mine[0])

    warnings = []
    for eni in plan.keep + plan.adopt:
        missing = sorted(set(security_groups) - set(eni.security_groups))
        if missing:
            warnings.append(
                f"ENI {eni.id} of instance {instance_id} is not in security group(s) {missing} of option "
                "'security_groups'; this module does not change the groups of existing ENIs.")
    if plan.surplus:
        warnings.append(
            f"instance {instance_id} has {len(plan.keep) + len(plan.surplus)} secondary ENIs in {subnet_id}, "
            f"option 'count' wants {count}; {[e.id for e in plan.surplus]} are left in place (never "
            "deleted by this module). Detach them by hand if they are really unwanted.")

    result = {
        "changed": plan.changes,
        "interfaces": [e.as_result() for e in plan.keep],
        "created": [],
        "attached": [],
        "surplus": [e.id for e in plan.surplus],
        "plan": plan.as_result(),
        "warnings": warnings,
    }
    if check_mode or not plan.changes:
        return result

    def is_available(e):
        return e.status == AVAILABLE and e.instance_id is None

    def is_attached(e):
        return e.instance_id == instance_id and e.status == ATTACHED

    new = []
    for _ in range(plan.create):
        try:
            eni = provider.create(instance_id, subnet_id, primary.vpc_id, security_groups, uuid.uuid4().hex,
                                  interface_type=interface_type)
        except ApiError as err:
            raise ctx.explain(err) from None
        ctx.created.append(eni.id)
        new.append(eni)
    to_attach = list(plan.adopt) + new
    pending = [e.id for e in to_attach if not is_available(e)]
    if pending:
        _wait(ctx, pending, is_available, "become available", wait_timeout, poll_interval, clock, sleep)

    final = {}
    for eni, index, card in zip(to_attach, plan.device_indexes, plan.network_cards, strict=True):
        try:
            provider.attach(eni.id, instance_id, index, uuid.uuid4().hex, network_card_index=card)
        except ApiError as err:
            raise ctx.explain(err, attached_now=len(plan.keep) + len(ctx.attached)) from None
        ctx.attached.append(eni.id)
        if wait:
            final.update(_wait(ctx, [eni.id], is_attached, "become attached", wait_timeout, poll_interval,
                               clock, sleep))
    if not wait:
        try:
            final = {e.id: e for e in provider.describe(ctx.attached)}
        except ApiError as err:
            raise ctx.explain(err) from None

    interfaces = list(plan.keep) + [final.get(e.id, e) for e in to_attach]
    result.update(
        interfaces=[e.as_result() for e in sorted(interfaces, key=_index_key)],
        created=list(ctx.created),
        attached=list(ctx.attached),
    )
    return result
