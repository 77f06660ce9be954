"""plugins/filter/nccl.py: NCCL settings from facts, nccl.conf, mpirun through launch."""

from __future__ import annotations

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import fixture_text
from tests.unit.plugins.filter.filters import all_filters

FILTERS = all_filters()
GiB = 1024**3


def test_nccl_filters_from_ansible_facts_and_template():
    facts = {
        "interfaces": ["lo", "docker0", "enp159s0"],
        "lo": {
            "device": "lo",
            "active": True,
            "type": "loopback",
            "ipv4": {"address": "127.0.0.1", "prefix": "8"},
        },
        "docker0": {
            "device": "docker0",
            "active": True,
            "type": "bridge",
            "ipv4": {"address": "172.17.0.1", "netmask": "255.255.0.0"},
        },
        "enp159s0": {
            "device": "enp159s0",
            "active": True,
            "type": "ether",
            "ipv4": {"address": "198.18.160.6", "netmask": "255.255.240.0"},
        },
    }
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    text = env.from_string("{{ (facts | nccl_env(net_plugin='harp')).env | nccl_conf }}").render(facts=facts)
    assert text.splitlines()[1:] == ["NCCL_NET_PLUGIN=harp", "NCCL_SOCKET_IFNAME==enp159s0"]
    mca = env.from_string("{{ (facts | nccl_env(mca_use_cidr=true)).mca.btl_tcp_if_include }}").render(
        facts=facts
    )
    assert mca == "198.18.160.0/20"
    assert FILTERS["nccl_check_socket_ifname"]("^docker0")
    assert FILTERS["net_arp_sysctls"](["ens1"])["net.ipv4.conf.ens1.rp_filter"] == "2"
    gid_text = fixture_text(
        "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt"
    )
    assert FILTERS["nccl_gid_index"](gid_text, "192.0.2.6") == 3


def test_nccl_env_error_names_the_filter():
    with pytest.raises(AnsibleFilterError, match="no usable data interface"):
        FILTERS["nccl_env"]([{"name": "lo", "state": "up", "ipv4": ["127.0.0.1/8"], "type": "loopback"}])


def test_nccl_parse_conf():
    assert FILTERS["nccl_parse_conf"]("# x\nNCCL_DEBUG=INFO\n") == {"NCCL_DEBUG": "INFO"}




def test_nccl_mpirun_args_is_launch_render_mpirun():
    rendered = FILTERS["nccl_env"]([{"name": "enp159s0", "state": "up", "ipv4": ["198.18.160.6/20"]},
                                    {"name": "docker0", "state": "up", "ipv4": ["172.17.0.1/16"]}])
    job = {"name": "j", "image": "img", "command": "python t.py", "nodes": ["a", "b"], "gpus_per_node": 2}
    argv = FILTERS["nccl_mpirun_args"](rendered, job)
    assert argv[:4] == ["mpirun", "--allow-run-as-root", "-np", "4"]
    assert "NCCL_SOCKET_IFNAME==enp159s0" in argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "enp159s0"
    with pytest.raises(AnsibleFilterError, match="nccl_mpirun_args: invalid job spec"):
        FILTERS["nccl_mpirun_args"](rendered, {"name": "j"})
