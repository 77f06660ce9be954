"""``diagnose_text``/``diagnose_inputs``: kind detection and one finding per output, on the fixtures."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import (
    diagnose_inputs,
    diagnose_text,
    exit_code,
    split_blocks,
)

from tests.conftest import fixture_text

N04 = "container-toolkit/N04_unknown_runtime_nvidia_daemon_json_edited_dockerd_not_restarted"
N05 = "container-toolkit/N05_container_nvml_unknown_error_after_systemctl_daemon_reload"


@pytest.mark.parametrize(
    ("relpath", "kind", "state", "cls"),
    [
        ("nccl-net-plugin/N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt",
         "nccl-net-plugin", "warn", "PLUGIN_LOADED_OLDER_API"),
        ("nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt",
         "nccl-net-plugin", "ok", "FOUND_BUT_INCOMPATIBLE"),
        ("nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt", "nccl-log", "fail", "nccl_gdr_disabled"),
        ("nccl-logs/E16_nccl_info_containers_ib_4hca.txt", "nccl-log", "ok", "NCCL_INIT"),
        ("benchmark-output/E08_nccl_tests_allreduce_2node_16x_h100_gcp_a3mega.txt", "nccl-tests", "ok",
         "NCCL_TESTS_OK"),
        ("benchmark-output/E11_nccl_tests_allreduce_2node_errored_internal_error.txt", "nccl-tests", "fail",
         "NCCL_TESTS_FAILED"),
        ("benchmark-output/E02_horovod_tf2_synth_8gpu_singlenode_horovodrun.txt", "benchmark", "ok", "THROUGHPUT"),
        ("nvidia-smi/C09_nvml_driver_library_mismatch_proc_version_vs_dpkg.1-nvidia-smi.txt", "nvidia-smi", "fail",
         "DRIVER_LIBRARY_MISMATCH"),
        ("nvidia-smi/C14_nvidia_smi_no_devices_found_rminitadapter.txt", "nvidia-smi", "fail",
         "NO_DEVICES_INITIALISED"),
        (N05 + ".3-environment.txt", "nvidia-smi", "ok", "READY"),
        ("nvidia-smi/C11_query_gpu_csv_na_not_supported_units.1-new-driver-nounits.txt", "nvidia-smi-query", "ok",
         "QUERY_GPU"),
        ("nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt", "nvidia-smi-topo", "ok", "TOPOLOGY"),
        (N05 + ".2-on-host.txt", "nvidia-smi-list", "warn", "MIXED_GPU_MODELS"),
        ("rdma/C06_ibstatus_roce_8x100g_ethernet_link_layer.txt", "ibstatus", "ok", "RDMA_OK"),
        ("rdma/C07_ibv_devinfo_vf_in_pod_port_init.txt", "ibv_devinfo", "fail", "RDMA_PORT_PROBLEM"),
        ("rdma/C05_ibdev2netdev_h100_ib_plus_eth_netdev_down.txt", "ibdev2netdev", "ok", "RDMA_OK"),
        ("nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.1-ibv-devinfo-v-gid-table.txt",
         "gid-table", "ok", "GID_TABLE"),
        (N04 + ".1-docker-compose-up.txt", "container-toolkit", "fail", "RUNTIME_NOT_REGISTERED"),
        (N04 + ".2-daemon-json-as-pasted.txt", "daemon-json", "ok", "DAEMON_JSON"),
        (N04 + ".3-docker-info-grep-runtime.txt", "docker-info", "ok", "DOCKER_RUNTIMES"),
        (N05 + ".1-inside-container.txt", "container-toolkit", "fail", "CONTAINER_LOST_GPU_ACCESS"),
        ("container-toolkit/N06_cdi_unresolvable_runtime_nvidia_gpu_all_auto_spec_generation_failed.txt",
         "container-toolkit", "fail", "CDI_DEVICE_UNRESOLVABLE"),
        ("docker-daemon-json/C16_daemon_json_two_objects_smart_quotes_plus_dropin_runtime.2-etc-docker-daemon-json.txt",
         "daemon-json", "fail", "DAEMON_JSON_INVALID"),
        ("docker-daemon-json/C19_default_runtime_nvidia_left_after_uninstall_binary_missing.1-docker-run-after-"
         "uninstall.txt", "container-toolkit", "fail", "RUNTIME_BINARY_MISSING"),
        ("mpi-operator/N08_mpijob_v2beta1_launcher_ssh_cannot_resolve_worker_dns.txt", "mpi-operator", "fail",
         "WORKER_DNS_NOT_RESOLVABLE"),
        ("mpi-operator/N10_mpijob_gang_podgroup_notenoughresources_1_of_3_running.txt", "mpi-operator", "fail",
         "GANG_UNSCHEDULABLE"),
        ("mpi-containers/C35_mpi_host_key_verification_failed_known_hosts.1-mpiexec-failure.txt", "mpi", "fail",
         "mpi_ssh_host_key"),
        ("mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.1-ulimit-a.txt", "ulimit", "warn",
         "rdma_memlock"),
        ("hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero.2-kubectl-describe-node-as-pasted.txt",
         "hugepages-k8s", "ok", "KUBELET_HUGEPAGES"),
        ("hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero.1-node-facts.txt", "meminfo", "ok",
         "MEMINFO_HUGEPAGES"),
        ("cloud-eni/N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt", "cloud-eni", "fail",
         "ENI_ATTACH_LIMIT_EXCEEDED"),
        ("cloud-eni/N15_efa_p5_device_index_exceeds_network_card_limit.1-nodegroup-creation-error.txt", "cloud-eni",
         "fail", "EFA_DEVICE_INDEX_OUT_OF_RANGE"),
        ("policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt", "policy-routing", "ok",
         "POLICY_ROUTING_OK"),
        ("nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.2-ifconfig-docker0.txt", "ifconfig", "ok",
         "INTERFACES"),
        ("nccl-network/C29_nccl_socket_ifname_exclude_docker0_selects_lo.1-nccl-conf-line-written-by-the-image.txt",
         "nccl-conf", "fail", "NCCL_CONF_PROBLEM"),
        ("peer-memory/C24_nv_peer_mem_unknown_symbol_ib_register_peer_memory_client.1-modprobe-dmesg.txt",
         "peer-memory", "fail", "PEER_MEM_API_MISSING"),
    ],
)
def test_kind_state_class_per_fixture(relpath, kind, state, cls):
    found = [(f.kind, f.state, f.cls) for f in diagnose_text(fixture_text(relpath))]
    assert (kind, state, cls) in found
    for f in diagnose_text(fixture_text(relpath)):
        assert f.cause
        if f.state == "fail":
            assert f.fix or f.kind == "peer-memory"  # peermem's message carries its remedy


def test_nccl_warns_are_not_blamed_on_the_plugin():
    found = diagnose_text(fixture_text(
        "nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt"))
    warn = next(f for f in found if f.kind == "nccl-log")
    assert warn.cls == "NCCL_WARN" and "named symbol not found" in warn.cause
    assert "not net-plugin errors" in warn.cause


def _paste(*parts):
    return "".join(f"user@host:~$ {cmd}\n{fixture_text(rel)}" for cmd, rel in parts)


def test_multi_output_paste_detects_every_block_and_cross_checks_them():
    text = _paste(("docker compose up", N04 + ".1-docker-compose-up.txt"),
                  ("cat /etc/docker/daemon.json", N04 + ".2-daemon-json-as-pasted.txt"),
                  ("docker info | grep -i runtime", N04 + ".3-docker-info-grep-runtime.txt"),
                  ("ip -4 rule", "policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt"),
                  ("nvidia-smi topo -m", "nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt"))
    kinds = [b.kind for b in split_blocks(text)]
    assert kinds == ["container-toolkit", "daemon-json", "docker-info", "policy-routing", "nvidia-smi-topo"]
    r = diagnose_inputs([("paste", text)])
    cls = [f.cls for f in r["findings"]]
    assert cls == ["RUNTIME_NOT_REGISTERED", "DAEMON_JSON", "DOCKER_RUNTIMES", "POLICY_ROUTING_OK", "TOPOLOGY",
                   "DAEMON_CONFIG_NOT_APPLIED"]
    assert r["exit_code"] == 1
    # line numbers point into the paste
    first = r["findings"][0]
    assert first.source == "paste" and first.lines == (2, 4)


def test_blocks_without_prompts_split_by_grammar():
    text = (fixture_text("mpi-operator/N08_mpijob_v2beta1_launcher_ssh_cannot_resolve_worker_dns.txt")
            + fixture_text("cloud-eni/N13_eni_attachment_limit_exceeded_t2_medium_ipamd.txt")
            + fixture_text("nccl-net-plugin/N01_nccl_plugin_hpcx_v5_loaded_under_nccl_2_18_v6_api.txt"))
    assert [b.kind for b in split_blocks(text)] == ["mpi", "cloud-eni", "nccl-log"]
    assert [f.cls for f in diagnose_text(text)] == ["WORKER_DNS_NOT_RESOLVABLE", "ENI_ATTACH_LIMIT_EXCEEDED",
                                                    "PLUGIN_LOADED_OLDER_API"]


def test_cross_checks_host_gpus_and_hugepages():
    r = diagnose_inputs([("c", fixture_text(N05 + ".1-inside-container.txt")),
                         ("h", fixture_text(N05 + ".2-on-host.txt"))])
    lost = [f for f in r["findings"] if f.source == "(host nvidia-smi -L + container)"]
    assert lost and "4 GPU(s)" in lost[0].cause
    c20 = "hugepages/C20_hugepages_runtime_alloc_kubelet_reports_zero"
    r = diagnose_inputs([("m", fixture_text(c20 + ".1-node-facts.txt")),
                         ("k", fixture_text(c20 + ".2-kubectl-describe-node-as-pasted.txt"))])
    stale = next(f for f in r["findings"] if f.cls == "KUBELET_HUGEPAGES_STALE")
    assert "4096 x 2048 kB" in stale.cause and "hugepages-2Mi=0" in stale.cause and "restart kubelet" in stale.fix
    assert r["exit_code"] == 1


def test_exit_codes():
    healthy = diagnose_inputs([("t", fixture_text("nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt"))])
    assert healthy["exit_code"] == 0
    assert diagnose_inputs([("x", "hello\nworld\n")])["exit_code"] == 2
    cut = fixture_text("policy-routing/N16_multi_eni_same_subnet_source_rules_table_10001_present.txt")[:420]
    unreadable = diagnose_inputs([("cut", cut)])
    assert [f.state for f in unreadable["findings"]] == ["unreadable"]
    assert "line" in unreadable["findings"][0].cause and unreadable["exit_code"] == 2
    assert exit_code([]) == 2


def test_unrecognised_stretches_are_reported_not_dropped():
    env = fixture_text(N05 + ".3-environment.txt")  # hostnamectl + systemctl --version + a cut nvidia-smi table
    r = diagnose_inputs([("env", env)])
    assert [f.cls for f in r["findings"]] == ["READY"]
    assert r["unrecognised"] and all(u["source"] == "env" for u in r["unrecognised"])
    assert r["unrecognised"][0]["lines"][0] == 2  # line 1 is the "cmd: hostnamectl" prompt


def test_ibstat_and_ibv_devices_are_recognised_even_before_rdma_reads_them():
    ibstat = ("CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tFirmware version: 20.31.1014\n"
              "\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n")
    devices = ("    device          \t   node GUID\n    ------          \t----------------\n"
               "    mlx5_bond_0     \t0000000000000000\n")
    assert [b.kind for b in split_blocks(ibstat)] == ["ibstat"]
    assert [b.kind for b in split_blocks(devices)] == ["ibv_devices"]
    for text in (ibstat, devices):
        (finding,) = diagnose_text(text)
        assert finding.state in ("ok", "warn", "fail")  # a reader's verdict, or "no reader yet" (warn)


def test_a_plugin_set_in_the_nccl_settings_turns_the_internal_fallback_into_a_failure():
    n02 = fixture_text("nccl-net-plugin/N02_nccl_plugin_found_but_no_supported_symbol_internal_fallback.txt")
    alone = diagnose_inputs([("log", n02)])
    assert ("nccl-net-plugin", "ok", "FOUND_BUT_INCOMPATIBLE") in [(f.kind, f.state, f.cls) for f in alone["findings"]]
    r = diagnose_inputs([("env", "NCCL_NET_PLUGIN=ofi\n"), ("log", n02)])
    failed = [f for f in r["findings"] if f.source == "(NCCL settings + NCCL log)"]
    assert len(failed) == 1 and failed[0].state == "fail" and failed[0].cls == "FOUND_BUT_INCOMPATIBLE"
    assert "NCCL_NET_PLUGIN=ofi" in failed[0].cause and "stray libnccl-net.so" in failed[0].fix


def test_paste_routes_launch_runtime_and_scheduling_failures():
    from tests.unit.plugins.module_utils.test_diagnose import (
        DAEMON_LOST_PRRTE,
        K8S_GPU,
        SHM_TORCH,
        SLOTS_V4,
        WATCHDOG,
    )

    rows = {(f.kind, f.cls) for t in (SLOTS_V4, DAEMON_LOST_PRRTE, WATCHDOG, SHM_TORCH, K8S_GPU)
            for f in diagnose_text(t)}
    assert rows == {("mpi", "mpi_not_enough_slots"), ("mpi", "mpi_daemon_lost"),
                    ("training-log", "torch_nccl_watchdog_timeout"), ("training-log", "container_shm_exhausted"),
                    ("mpi-operator", "k8s_insufficient_device")}
    assert exit_code(diagnose_text(SLOTS_V4 + "\n" + K8S_GPU)) == 1
