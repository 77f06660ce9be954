"""NCCL settings (nccl.py) on the fixtures in tests/fixtures/nccl-network."""

from __future__ import annotations

import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import launch
from ansible_collections.gpucluster.cluster.plugins.module_utils.multi_nic import (
    parse_ifconfig,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import (
    NcclEnvError,
    check_socket_ifname,
    ifname_matches,
    launch_settings,
    lint_nccl_conf,
    mca_env,
    parse_nccl_conf,
    render_nccl_conf,
    render_nccl_env,
    select_hcas,
    simulate_socket_ifname,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.rdma import (
    parse_gid_table,
    pick_roce_gid_index,
)

from tests.conftest import fixture_text

C29 = "nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo"
C30 = "nccl-network/C30_openmpi_btl_tcp_uses_docker0_with_host_network"
C31 = "nccl-network/C31_multi_nic_same_subnet_arp_flux_policy_routing"
C32 = "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works"

LO = {"name": "lo", "state": "unknown", "ipv4": ["127.0.0.1/8"], "type": "loopback"}
DOCKER_GW = {"name": "docker_gwbridge", "state": "up", "ipv4": ["172.18.0.1/16"], "type": "bridge"}


def c30_interfaces():
    return parse_ifconfig(fixture_text(C30 + ".3-ifconfig-partial.txt"))



# ---- NCCL_SOCKET_IFNAME syntax (NCCL env docs) -------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "used"),
    [
        ("=eth0", "eth0", True),
        ("=eth0", "eth01", False),
        ("=eth0,eth1", "eth1", True),
        ("eth", "eth1", True),
        ("eth", "ens1", False),
        ("^docker", "docker_gwbridge", False),
        ("^docker", "eth0", True),
        ("^=docker0", "docker0", False),
        ("^=docker0", "docker_gwbridge", True),
        ("^docker0", "lo", True),
        ("^docker,lo", "lo", False),
        ("=mlx5_0:1,mlx5_1:1", "mlx5_1", True),
    ],
)
def test_ifname_matches_nccl_semantics(spec, name, used):
    assert ifname_matches(spec, name) is used


# ---- C29: ^docker0 lets NCCL pick lo -----------------------------------------------------------


def c29_value():
    line = fixture_text(C29 + ".1-nccl-conf-line-written-by-the-image.txt")
    return re.search(r"NCCL_SOCKET_IFNAME=(\S+)", line).group(1)


def test_c29_exclude_docker0_alone_is_flagged():
    value = c29_value()
    assert value == "^docker0"
    findings = check_socket_ifname(value)
    assert any("may pick lo" in f for f in findings)
    assert any("docker_gwbridge" in f for f in findings)


def test_c29_simulated_selection_picks_lo_and_other_docker_bridges():
    ifaces = [LO, DOCKER_GW] + c30_interfaces()
    assert simulate_socket_ifname(c29_value(), ifaces) == ["lo", "docker_gwbridge", "enp159s0"]
    # NCCL's own default (unset) does not pick lo or docker here.
    assert simulate_socket_ifname(None, ifaces) == ["enp159s0"]
    findings = check_socket_ifname(c29_value(), ifaces)
    assert "NCCL would use lo: loopback: peers cannot reach 127.0.0.1" in findings


def test_c29_renderer_emits_explicit_include_never_a_bare_exclude():
    ifaces = [LO, DOCKER_GW] + c30_interfaces()
    out = render_nccl_env(ifaces)
    assert out["env"]["NCCL_SOCKET_IFNAME"] == "=enp159s0"
    assert not out["env"]["NCCL_SOCKET_IFNAME"].startswith("^")
    assert set(out["excluded_interfaces"]) == {"lo", "docker_gwbridge", "docker0"}
    # The rendered file lints clean; the image's line does not.
    assert lint_nccl_conf(render_nccl_conf(out), ifaces) == []
    assert lint_nccl_conf(f"NCCL_SOCKET_IFNAME={c29_value()}\n", ifaces)


def test_lint_nccl_conf_flags_quotes_and_include_of_never_interfaces():
    findings = lint_nccl_conf('# site\nNCCL_DEBUG="WARN"\nNCCL_SOCKET_IFNAME==docker0\n')
    assert any("does not strip quotes" in f for f in findings)
    assert any("includes docker0" in f for f in findings)
    assert parse_nccl_conf("NCCL_SOCKET_IFNAME==ens1f0\nnot a setting\n") == {"NCCL_SOCKET_IFNAME": "=ens1f0"}


def test_c30_mpi_and_nccl_pinned_to_the_data_nic():
    out = render_nccl_env(c30_interfaces())
    assert out["data_interfaces"] == ["enp159s0"]
    assert out["env"] == {"NCCL_SOCKET_IFNAME": "=enp159s0"}
    assert out["mca"] == {"btl_tcp_if_include": "enp159s0", "oob_tcp_if_include": "enp159s0"}
    assert "172.17.0.1" in out["excluded_interfaces"]["docker0"]
    settings = launch_settings(out)
    assert settings == {"nccl_env": {"NCCL_SOCKET_IFNAME": "=enp159s0"}, "network_interface": "enp159s0"}
    # The one mpirun renderer carries them: -x for NCCL, both TCP MCA lists on the data NIC.
    argv = launch.render_mpirun({"name": "c30", "image": "img", "command": ["python", "t.py"],
                                 "nodes": ["n1", "n2"], "gpus_per_node": 8, **settings})
    assert "NCCL_SOCKET_IFNAME==enp159s0" in argv
    i = argv.index("btl_tcp_if_include")
    assert argv[i - 1:i + 2] == ["--mca", "btl_tcp_if_include", "enp159s0"]
    i = argv.index("oob_tcp_if_include")
    assert argv[i - 1:i + 2] == ["--mca", "oob_tcp_if_include", "enp159s0"]
    assert "docker0" not in " ".join(argv)
    assert mca_env(out) == {
        "OMPI_MCA_btl_tcp_if_include": "enp159s0",
        "OMPI_MCA_oob_tcp_if_include": "enp159s0",
    }


def test_c30_mca_as_cidr_for_nodes_with_different_nic_names():
    out = render_nccl_env(c30_interfaces(), mca_use_cidr=True)
    assert out["mca"]["btl_tcp_if_include"] == "198.18.160.0/20"
    assert out["mca"]["oob_tcp_if_include"] == "198.18.160.0/20"


# ---- C32: the RoCE v2 GID to choose -------------------------------------------------------------


def c32_gids():
    return parse_gid_table(fixture_text(C32 + ".1-ibv-devinfo-v-gid-table.txt"))


def test_c32_selects_ipv4_roce_v2_never_link_local():
    gids = c32_gids()
    assert pick_roce_gid_index(gids) == 3
    assert pick_roce_gid_index(gids, "192.0.2.6/24") == 3
    assert pick_roce_gid_index(gids, ["198.18.0.9"]) is None
    assert pick_roce_gid_index([g for g in gids if g["index"] != 3]) is None  # index 1 is never chosen


def test_c32_renders_bond_hca_and_gid_index_3():
    ifaces = [{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"}]
    port = {
        "device": "mlx5_bond_0",
        "port": 1,
        "state": "PORT_ACTIVE (4)",
        "link_layer": "Ethernet",
        "netdev": "bond0",
        "gids": c32_gids(),
    }
    out = render_nccl_env(ifaces, [port])
    assert out["env"]["NCCL_IB_HCA"] == "=mlx5_bond_0:1"
    assert out["env"]["NCCL_IB_GID_INDEX"] == "3"
    assert out["hcas"] == ["mlx5_bond_0:1"]


def test_c32_without_ipv4_gid_is_a_clear_error():
    ifaces = [{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"]}]
    port = {
        "device": "mlx5_bond_0",
        "port": 1,
        "state": "ACTIVE",
        "link_layer": "Ethernet",
        "netdev": "bond0",
        "gids": [g for g in c32_gids() if g["index"] < 2],
    }
    with pytest.raises(NcclEnvError, match="no RoCE v2 GID with an IPv4 address on mlx5_bond_0:1"):
        render_nccl_env(ifaces, [port])


# ---- HCA choice and the other NCCL settings ------------------------------------------------------

ETH0 = {"name": "eth0", "state": "up", "ipv4": ["192.0.2.10/24"], "type": "ether"}


def _port(dev, ll, state="ACTIVE", **kw):
    return dict(device=dev, port=1, state=state, link_layer=ll, **kw)


def test_infiniband_fabric_leaves_ethernet_ports_out_and_sorts_naturally():
    ports = [
        _port("mlx5_10", "InfiniBand"),
        _port("mlx5_1", "Ethernet", roce_v2_gid_index=3),
        _port("mlx5_2", "InfiniBand"),
        _port("mlx5_0", "InfiniBand", state="PORT_INIT (2)"),
    ]
    out = render_nccl_env([ETH0], ports)
    assert out["env"]["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_10:1"
    assert "NCCL_IB_GID_INDEX" not in out["env"]  # InfiniBand link layer: no GID index
    assert out["excluded_hcas"]["mlx5_0:1"].startswith("port state PORT_INIT")
    assert "InfiniBand fabric" in out["excluded_hcas"]["mlx5_1:1"]


def test_roce_ports_gid_index_must_agree():
    ports = [
        _port("mlx5_0", "Ethernet", roce_v2_gid_index=3),
        _port("mlx5_1", "Ethernet", roce_v2_gid_index=5),
    ]
    with pytest.raises(NcclEnvError, match="differs between HCAs"):
        render_nccl_env([ETH0], ports)
    ports[1]["roce_v2_gid_index"] = 3
    assert render_nccl_env([ETH0], ports)["env"]["NCCL_IB_GID_INDEX"] == "3"


def test_roce_port_with_down_netdev_is_left_out():
    ifaces = [ETH0, {"name": "ens2", "state": "down", "ipv4": []}]
    chosen, excluded = select_hcas([_port("mlx5_0", "Ethernet", netdev="ens2", roce_v2_gid_index=3)], ifaces)
    assert chosen == []
    assert excluded == {"mlx5_0:1": "RoCE netdev ens2 is down"}
    out = render_nccl_env(ifaces, [_port("mlx5_0", "Ethernet", netdev="ens2", roce_v2_gid_index=3)])
    assert "NCCL_IB_HCA" not in out["env"]
    assert "socket transport" in out["warnings"][0]


def test_explicit_hcas():
    ports = [_port("mlx5_0", "InfiniBand"), _port("mlx5_1", "InfiniBand")]
    assert render_nccl_env([ETH0], ports, hcas="mlx5_1:1")["env"]["NCCL_IB_HCA"] == "=mlx5_1:1"
    with pytest.raises(NcclEnvError, match="mlx5_7:1 is not on this node"):
        render_nccl_env([ETH0], ports, hcas=["mlx5_7"])


def test_gdr_plugin_and_socket_threads():
    ports = [_port("mlx5_0", "InfiniBand")]
    out = render_nccl_env(
        [ETH0], ports, gdr_level="pxb", net_plugin="harp", socket_nthreads=4, nsocks_perthread=8
    )
    assert out["env"] == {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_NET_GDR_LEVEL": "PXB",
        "NCCL_NET_PLUGIN": "harp",
        "NCCL_SOCKET_NTHREADS": "4",
        "NCCL_NSOCKS_PERTHREAD": "8",
    }
    assert render_nccl_env([ETH0], ports, gpudirect_rdma=False)["env"]["NCCL_NET_GDR_LEVEL"] == "LOC"
    with pytest.raises(NcclEnvError, match="one of LOC, PIX, PXB, PHB, SYS"):
        render_nccl_env([ETH0], ports, gdr_level="NVL")
    with pytest.raises(NcclEnvError, match=r"8 x 16 = 128 exceeds NCCL's limit of 64"):
        render_nccl_env([ETH0], socket_nthreads=8, nsocks_perthread=16)
    with pytest.raises(NcclEnvError, match="1-16"):
        render_nccl_env([ETH0], socket_nthreads=17)
    with pytest.raises(NcclEnvError, match="plugin name"):
        render_nccl_env([ETH0], net_plugin="harp; rm -rf /")


# ---- nccl.conf ----------------------------------------------------------------------------------


def test_render_nccl_conf_text():
    out = render_nccl_env([ETH0], [_port("mlx5_0", "InfiniBand")], net_plugin="harp")
    text = render_nccl_conf(out)
    assert text == (
        "# Managed by Ansible (gpucluster): NCCL settings for this node; edits are overwritten\n"
        "NCCL_IB_HCA==mlx5_0:1\n"
        "NCCL_NET_PLUGIN=harp\n"
        "NCCL_SOCKET_IFNAME==eth0\n"
    )
    assert parse_nccl_conf(text) == out["env"]
    assert render_nccl_conf(out["env"]) == text
    with pytest.raises(NcclEnvError, match="line break"):
        render_nccl_conf({"NCCL_DEBUG": "WARN\nNCCL_P2P_DISABLE=1"})
    with pytest.raises(NcclEnvError, match="not an environment variable name"):
        render_nccl_conf({"nccl debug": "WARN"})


@pytest.mark.parametrize(
    "ifaces,ports",
    [
        ([ETH0, {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]}], []),
        ([ETH0], [_port("mlx5_10", "InfiniBand"), _port("mlx5_2", "InfiniBand"), _port("mlx5_1", "Ethernet")]),
        ([{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"}],
         [{"device": "mlx5_bond_0", "port": 1, "state": "PORT_ACTIVE (4)", "link_layer": "Ethernet",
           "netdev": "bond0", "gids": c32_gids()}]),
    ],
)
def test_rendering_again_from_the_recorded_choice_gives_the_same_settings(ifaces, ports):
    # playbooks/runtime.yml re-renders /etc/nccl.conf from what the last converge recorded
    # (ansible_local.gpucluster.nccl: data_interfaces, hcas) because it has no GPU-NIC map;
    # the result must be what site.yml wrote, or the next converge would change the node again.
    first = render_nccl_env(ifaces, ports)
    again = render_nccl_env(ifaces, ports, data_interfaces=first["data_interfaces"], hcas=first["hcas"] or None)
    assert again["env"] == first["env"] and again["mca"] == first["mca"]


def test_launch_settings_refuse_what_launch_cannot_carry():
    with pytest.raises(NcclEnvError, match="only NCCL_"):
        launch_settings({"env": {"FOO": "1"}, "mca": {}})
    with pytest.raises(NcclEnvError, match="differ"):
        launch_settings({"env": {}, "mca": {"btl_tcp_if_include": "a", "oob_tcp_if_include": "b"}})


def test_configured_gid_index_is_checked_against_the_gid_table():
    ifaces = [{"name": "bond0", "state": "up", "ipv4": ["192.0.2.6/24"], "type": "bonding"}]
    port = {"device": "mlx5_bond_0", "port": 1, "state": "ACTIVE", "link_layer": "Ethernet",
            "netdev": "bond0", "gids": c32_gids(), "roce_v2_gid_index": 1}
    with pytest.raises(NcclEnvError, match="mlx5_bond_0:1 GID index=1: .*link-local.*index 3"):
        render_nccl_env(ifaces, [port])
    port["roce_v2_gid_index"] = 3
    assert render_nccl_env(ifaces, [port])["env"]["NCCL_IB_GID_INDEX"] == "3"


def test_lint_nccl_conf_checks_the_gid_index_against_the_node():
    conf = "NCCL_SOCKET_IFNAME==bond0\nNCCL_IB_GID_INDEX=1\n"
    gid_text = fixture_text(C32 + ".1-ibv-devinfo-v-gid-table.txt")
    findings = lint_nccl_conf(conf, gids=gid_text)
    assert len(findings) == 1 and "NCCL_IB_GID_INDEX=1" in findings[0] and "index 3" in findings[0]
    assert lint_nccl_conf(conf.replace("=1", "=3"), gids=gid_text) == []
    assert lint_nccl_conf(conf) == []  # without the table nothing is claimed


# --- /etc/nccl.conf shared with the user: one managed block, user lines kept ------------------

def test_parse_nccl_conf_first_line_wins_as_in_nccl_setenv_no_overwrite():
    assert parse_nccl_conf("NCCL_DEBUG=WARN\nNCCL_DEBUG=INFO\n") == {"NCCL_DEBUG": "WARN"}


def test_merge_nccl_conf_keeps_user_lines_and_comments_out_the_c29_line():
    from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import (
        NCCL_CONF_BEGIN,
        NCCL_CONF_END,
        merge_nccl_conf,
    )
    # C29: the image appended NCCL_SOCKET_IFNAME=^docker0 (it lets NCCL pick lo).
    c29 = fixture_text("nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo."
                       "1-nccl-conf-line-written-by-the-image.txt")
    image_line = c29.split(">>")[0].replace("echo ", "").strip()
    assert image_line == "NCCL_SOCKET_IFNAME=^docker0"
    user = f"# site tuning\nNCCL_DEBUG=INFO\n{image_line}\nNCCL_IB_TIMEOUT=22\n"
    env = {"NCCL_SOCKET_IFNAME": "=data0,eth0", "NCCL_IB_HCA": "=mlx5_0:1"}
    out = merge_nccl_conf(user, env)
    lines = out["text"].splitlines()
    assert lines[0] == NCCL_CONF_BEGIN and lines[3] == NCCL_CONF_END
    assert lines[1:3] == ["NCCL_IB_HCA==mlx5_0:1", "NCCL_SOCKET_IFNAME==data0,eth0"]
    assert lines[4:] == ["# site tuning", "NCCL_DEBUG=INFO",
                         "# gpucluster: overridden by the managed block above, kept for reference: "
                         "NCCL_SOCKET_IFNAME=^docker0", "NCCL_IB_TIMEOUT=22"]
    assert out["overridden"] == [image_line]
    read = parse_nccl_conf(out["text"])  # what NCCL reads
    assert read == {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=data0,eth0", "NCCL_DEBUG": "INFO",
                    "NCCL_IB_TIMEOUT": "22"}
    # rerun on its own output: same text; a changed plan replaces only the block
    assert merge_nccl_conf(out["text"], env)["text"] == out["text"]
    again = merge_nccl_conf(out["text"], {"NCCL_SOCKET_IFNAME": "=eth0"})
    assert again["text"].splitlines()[1:3] == ["NCCL_SOCKET_IFNAME==eth0", NCCL_CONF_END]
    assert again["text"].splitlines()[3:] == lines[4:]


def test_merge_nccl_conf_replaces_a_file_an_older_gpucluster_wrote_whole():
    from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl import merge_nccl_conf
    old = render_nccl_conf({"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "WARN"})
    out = merge_nccl_conf(old, {"NCCL_SOCKET_IFNAME": "=eth1"})
    assert parse_nccl_conf(out["text"]) == {"NCCL_SOCKET_IFNAME": "=eth1"}
    assert out["overridden"] == [] and out["user_lines"] == []
    assert merge_nccl_conf("", {"NCCL_SOCKET_IFNAME": "=eth1"})["text"] == out["text"]


def test_parse_nccl_conf_keeps_names_and_values_verbatim_as_nccl_setenvfile():
    # NVIDIA/nccl src/misc/param.cc setEnvFile(): skips lines starting with '#' or without '=',
    # drops only the final '\n', and setenv()s the text before the first '=' as the name and the
    # rest as the value, verbatim (no strip, no 'export', '\r' of a CRLF file kept).
    text = ("# site tuning\nNCCL_DEBUG = INFO\n  NCCL_IB_HCA=mlx5_0\nexport NCCL_SOCKET_IFNAME=eth0\n"
            "NCCL_IB_TIMEOUT=22\r\nNCCL_NET_GDR_LEVEL=PHB\n")
    assert parse_nccl_conf(text) == {"NCCL_DEBUG ": " INFO", "  NCCL_IB_HCA": "mlx5_0",
                                     "export NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_TIMEOUT": "22\r",
                                     "NCCL_NET_GDR_LEVEL": "PHB"}
    findings = lint_nccl_conf(text)
    assert len(findings) == 4
    assert "sets 'NCCL_DEBUG ', not NCCL_DEBUG" in findings[0]
    assert "not NCCL_IB_HCA" in findings[1] and "not NCCL_SOCKET_IFNAME" in findings[2]
    assert "NCCL_IB_TIMEOUT=22" in findings[3] and "carriage return" in findings[3]
    assert lint_nccl_conf("NCCL_DEBUG=INFO\nNCCL_IB_TIMEOUT=22\n") == []
