"""Net-plugin state on tests/fixtures/nccl-net-plugin (N01, N02) and on the loader messages of
other NCCL releases (format strings of NVIDIA/nccl v2.4 .. v2.27)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.nccl_net_plugin import read_net_plugin
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

N01 = "nccl-net-plugin/N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt"
N02 = "nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt"
P = "host-a:100:100 [0] NCCL INFO "


def test_n01_v5_plugin_under_v6_nccl_is_the_compat_path_not_a_failure():
    s = read_net_plugin(fixture_text(N01))
    assert s.cls == "PLUGIN_LOADED_OLDER_API"
    assert s.severity == "warn"  # not "fail": each "Failed to find ..._v6" is followed by "Loaded ... (v5)"
    assert s.nccl_version == "2.18.5+cuda11.8"
    assert s.highest_api_asked == 6
    assert s.plugin == {"name": "NCCL RDMA Plugin", "api": 5,
                        "path": "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"}
    assert s.coll_plugin == {"name": "SHARP", "api": 5}
    assert s.bootstrap == [{"host": "gpu-host-a100-n02", "interface": "ibp12s0", "address": "192.0.2.102"}]
    assert s.cuda_driver_version == 11020
    ranks = {(r["pid"], r["device"]): r for r in s.ranks}
    assert ranks[(2293, 0)]["state"] == "PLUGIN_LOADED_OLDER_API"
    assert ranks[(2293, 0)]["p2p_plugin"] == "IBext"
    # The excerpt stops after rank 3's "Failed to find" line: unknown, not guessed.
    assert ranks[(2296, 3)]["state"] == "UNKNOWN"
    assert ranks[(2296, 3)]["plugin"] is None
    assert "pid 2296" in s.cause and "HPC-X" in s.fix


def test_n02_library_without_supported_symbol_is_info_unless_a_plugin_is_expected():
    text = fixture_text(N02)
    s = read_net_plugin(text)
    assert s.cls == "FOUND_BUT_INCOMPATIBLE"
    assert s.severity == "ok"
    assert (s.nccl_version, s.cuda_driver_version) == ("2.20.5+cuda12.3", 12060)
    assert s.bootstrap == [{"host": "c00000000001", "interface": "eth0", "address": "198.18.2.2"}]
    assert s.networks == []  # no "Using network" line: the transport is not guessed
    assert s.plugin is None
    # The CUDA errors are counted apart; they do not change the plugin verdict.
    assert s.cuda_failures == {"named symbol not found": 10}
    expected = read_net_plugin(text, expect_plugin="aws-ofi-nccl")
    assert expected.severity == "fail"
    assert "v5" in expected.fix and "stray libnccl-net.so" in expected.fix


@pytest.mark.parametrize(
    ("lines", "cls", "severity", "network"),
    [
        # 2.7 .. 2.11: no plugin file
        (["NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", "Using network IB"],
         "PLUGIN_NOT_FOUND", "ok", "IB"),
        # 2.18
        (["NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: "
          "No such file or directory", "NET/Plugin : No plugin found, using internal implementation",
          "Using network Socket"], "PLUGIN_NOT_FOUND", "ok", "Socket"),
        # 2.23+: ENOENT names collected in one line
        (["NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", "Using network IB"],
         "PLUGIN_NOT_FOUND", "ok", "IB"),
        # 2.23+: any other dlopen failure is printed as the dlerror text
        (["NET/Plugin: libnccl-net-ofi.so: undefined symbol: fi_getinfo", "Using network IB"],
         "PLUGIN_LOAD_ERROR", "warn", "IB"),
        # 2.12 and older: a loaded plugin shows only in "Using network"
        (["Using network AWS Libfabric"], "PLUGIN_LOADED", "ok", "AWS Libfabric"),
        # 2.21+: requested by NCCL_NET_PLUGIN and loaded at the newest API
        (["NET/Plugin: Plugin name set by env to libnccl-net-ofi.so",
          "NET/Plugin: Loaded net plugin AWS Libfabric (v8)",
          "Using network AWS Libfabric"], "PLUGIN_LOADED", "ok", "AWS Libfabric"),
        # 2.27
        (["Initialized NET plugin IB", "Assigned NET plugin IB to comm"], "INTERNAL_NETWORK", "ok", "IB"),
    ],
)
def test_loader_messages_across_versions(lines, cls, severity, network):
    s = read_net_plugin("\n".join(P + ln for ln in lines) + "\n")
    assert (s.cls, s.severity) == (cls, severity)
    assert s.networks == [network]


def test_requested_plugin_not_found_fails_and_names_it():
    text = (P + "NCCL_NET_PLUGIN set by environment to ofi\n"
            + P + "NET/Plugin: Could not find: ofi libnccl-net-ofi.so. Using internal network plugin.\n"
            + P + "Using network IB\n")
    s = read_net_plugin(text)
    assert s.cls == "PLUGIN_NOT_FOUND"
    assert s.severity == "fail"
    assert s.requested_plugin == "ofi"
    assert "ofi" in s.fix


def test_nccl_net_naming_a_missing_network_fails():
    text = "host-a:100:100 [0] NCCL WARN Error: network AWS Libfabric not found.\n" + P + "Using network IB\n"
    s = read_net_plugin(text)
    assert s.cls == "NET_NOT_FOUND" and s.severity == "fail"
    assert "AWS Libfabric" in s.cause


@pytest.mark.parametrize("cut", ["NET/Plugin: Loaded net plu", "NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v",
                                 "NET/Plugin: Failed to find ncclNetPlugin_v"])
def test_a_cut_plugin_line_is_a_parse_error_naming_the_line(cut):
    with pytest.raises(ParseError, match="line 2"):
        read_net_plugin(P + "Bootstrap : Using eth0:192.0.2.1<0>\n" + P + cut + "\n")


def test_no_plugin_line_is_a_parse_error():
    with pytest.raises(ParseError, match="NCCL_DEBUG=INFO"):
        read_net_plugin(P + "Bootstrap : Using eth0:192.0.2.1<0>\n")
