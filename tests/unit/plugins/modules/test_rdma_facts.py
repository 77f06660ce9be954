"""rdma_facts module: fake commands and a sysfs tree in tmp_path; facts follow the fixtures."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpucluster.cluster.plugins.modules import rdma_facts

from tests.conftest import fixture_text

C05 = "rdma/C05_ibdev2netdev_h100_ib_plus_eth_netdev_down.txt"
C07 = "rdma/C07_ibv_devinfo_vf_in_pod_port_init.txt"
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"

# GID table of C32: index -> (gid as the kernel prints it, sysfs type)
C32_GIDS = {}
for _line in fixture_text(C32).splitlines():
    _m = re.search(r"GID\[\s*(\d+)\]:\s*(\S+), RoCE v(\d)", _line)
    if _m:
        C32_GIDS[int(_m.group(1))] = (_m.group(2), "IB/RoCE v1" if _m.group(3) == "1" else "RoCE v2")


class FailJson(Exception):
    pass


class FakeModule:
    def __init__(self, bins, answers, params=None):
        self.params = {"ipv4_addresses": []}
        self.params.update(params or {})
        self.bins = bins
        self.answers = answers
        self.calls = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return self.bins.get(name)

    def run_command(self, args, **kwargs):
        line = " ".join(args)
        self.calls.append(line)
        for prefix, answer in self.answers.items():
            if line.startswith(prefix):
                return answer
        raise AssertionError(f"unexpected command {line!r}")

    def fail_json(self, **kwargs):
        raise FailJson(kwargs["msg"])


def _without_prompt(text):
    return "\n".join(ln for ln in text.splitlines() if not re.match(r"^(\$ |root@)", ln))


def _write(root, rel, content):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content + "\n")


def _sysfs_roce(root):
    """/sys/class/infiniband of a RoCE node: mlx5_0 and mlx5_1, C32's GID table each."""
    for hca, netdev in (("mlx5_0", "ens1f0"), ("mlx5_1", "ens1f1")):
        port = f"{hca}/ports/1"
        for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                            ("link_layer", "Ethernet"), ("rate", "100 Gb/sec (4X EDR)")):
            _write(root, f"{port}/{name}", value)
        for index, (gid, gid_type) in C32_GIDS.items():
            _write(root, f"{port}/gids/{index}", gid)
            _write(root, f"{port}/gid_attrs/types/{index}", gid_type)
            _write(root, f"{port}/gid_attrs/ndevs/{index}", netdev)
        # An unused slot: zero GID, no type file (the kernel answers EINVAL there).
        _write(root, f"{port}/gids/4", "0000:0000:0000:0000:0000:0000:0000:0000")
        _write(root, f"{hca}/device/net/{netdev}/dev_port", "0")
        _write(root, f"{hca}/device/net/{netdev}/operstate", "up")
    return root


def test_node_without_rdma(tmp_path):
    module = FakeModule({}, {})
    facts = rdma_facts.collect(module, sysfs_root=str(tmp_path / "absent"))
    assert facts == {"hcas": [], "netdevs": [], "infiniband_hcas": [], "roce_hcas": [],
                     "active_hcas": [], "nccl_ib_gid_index": None, "problems": [],
                     "sources": {"netdevs": None, "devices": None, "sysfs": False}}
    assert module.calls == []


def test_roce_node_from_sysfs(tmp_path):
    root = _sysfs_roce(tmp_path / "infiniband")
    module = FakeModule({}, {}, params={"ipv4_addresses": ["192.0.2.6"]})
    facts = rdma_facts.collect(module, sysfs_root=str(root))
    assert [h["name"] for h in facts["hcas"]] == ["mlx5_0", "mlx5_1"]
    port = facts["hcas"][0]["ports"][0]
    assert (port["state"], port["link_layer"], port["fabric"], port["rate_gbps"]) == (
        "ACTIVE", "Ethernet", "RoCE", 100)
    assert port["netdev"] == "ens1f0" and port["netdev_state"] == "Up"
    assert [g["index"] for g in port["gids"]] == [0, 1, 2, 3]
    assert port["roce_gid_index"] == 3
    assert facts["nccl_ib_gid_index"] == 3
    assert facts["roce_hcas"] == ["mlx5_0", "mlx5_1"]
    assert facts["problems"] == []
    assert facts["sources"] == {"netdevs": "sysfs", "devices": None, "sysfs": True}
    json.dumps(facts)


def test_read_sysfs_keys(tmp_path):
    root = _sysfs_roce(tmp_path / "infiniband")
    files = rdma_facts.read_sysfs(str(root))
    assert files["mlx5_0/ports/1/state"] == "4: ACTIVE"
    assert files["mlx5_1/ports/1/gid_attrs/types/3"] == "RoCE v2"
    assert "mlx5_0/ports/1/gid_attrs/types/4" not in files  # zero GID: attributes not read
    assert files["mlx5_0/device/net/ens1f0/dev_port"] == "0"


def test_ib_node_with_tools_c05_c07(tmp_path):
    module = FakeModule(
        {"ibv_devinfo": "/usr/bin/ibv_devinfo", "ibdev2netdev": "/usr/bin/ibdev2netdev"},
        {"/usr/bin/ibv_devinfo -v": (0, _without_prompt(fixture_text(C07)), ""),
         "/usr/bin/ibdev2netdev": (0, _without_prompt(fixture_text(C05)), "")})
    facts = rdma_facts.collect(module, sysfs_root=str(tmp_path / "absent"))
    (hca,) = facts["hcas"]
    assert hca["name"] == "mlx5_7" and hca["fw_ver"] == "28.39.3004"
    assert hca["ports"][0]["state"] == "INIT" and hca["ports"][0]["active"] is False
    assert facts["infiniband_hcas"] == ["mlx5_7"] and facts["active_hcas"] == []
    assert "mlx5_7 port 1: state INIT (2), not ACTIVE" in facts["problems"]
    assert len(facts["netdevs"]) == 12
    assert facts["sources"] == {"netdevs": "ibdev2netdev", "devices": "ibv_devinfo",
                                "sysfs": False}


@pytest.mark.parametrize(("answer", "problems"), [
    pytest.param((255, "", "No IB devices found\n"), [], id="no-devices"),
    pytest.param((1, "", "Failed to get IB devices list: Function not implemented\n"),
                 ["ibv_devinfo -v exited 1: Failed to get IB devices list: Function not implemented"],
                 id="no-rdma-stack"),
])
def test_ibv_devinfo_without_devices(tmp_path, answer, problems):
    module = FakeModule({"ibv_devinfo": "/usr/bin/ibv_devinfo"}, {"/usr/bin/ibv_devinfo": answer})
    facts = rdma_facts.collect(module, sysfs_root=str(tmp_path / "absent"))
    assert facts["hcas"] == []
    assert facts["problems"] == problems


def test_unreadable_ibdev2netdev_fails(tmp_path):
    module = FakeModule({"ibdev2netdev": "/usr/bin/ibdev2netdev"},
                        {"/usr/bin/ibdev2netdev": (0, "mlx5_0 port 1 ==> ib0\n", "")})
    with pytest.raises(FailJson, match=r"rdma_facts: cannot read ibdev2netdev: ibdev2netdev "
                                       r"line 1: expected"):
        rdma_facts.collect(module, sysfs_root=str(tmp_path / "absent"))


@pytest.mark.parametrize("check_mode", [False, True])
def test_main_roce_node(monkeypatch, capsys, tmp_path, check_mode):
    root = _sysfs_roce(tmp_path / "infiniband")
    monkeypatch.setattr(rdma_facts, "SYSFS_ROOT", str(root))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: None)
    args = {"ipv4_addresses": ["192.0.2.6"], "_ansible_check_mode": check_mode}
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        rdma_facts.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0
    assert result["changed"] is False
    assert result["ansible_facts"]["gpucluster_rdma"]["nccl_ib_gid_index"] == 3


def test_documentation_matches_argument_spec():
    doc = yaml.safe_load(rdma_facts.DOCUMENTATION)
    assert doc["module"] == "rdma_facts"
    assert set(doc["options"]) == set(rdma_facts.ARGUMENT_SPEC)
    for name, spec in rdma_facts.ARGUMENT_SPEC.items():
        assert doc["options"][name]["type"] == spec["type"]
        assert doc["options"][name]["default"] == spec["default"]
        assert doc["options"][name].get("elements") == spec.get("elements")
    yaml.safe_load(rdma_facts.EXAMPLES)
    returned = yaml.safe_load(rdma_facts.RETURN)["ansible_facts"]["contains"]["gpucluster_rdma"]
    assert set(returned["contains"]) == {"hcas", "netdevs", "infiniband_hcas", "roce_hcas",
                                         "active_hcas", "nccl_ib_gid_index", "problems",
                                         "sources"}
