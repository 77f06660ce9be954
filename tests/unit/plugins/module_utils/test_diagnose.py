"""Failure classification and NCCL log reading, on tests/fixtures/mpi-containers and nccl-logs."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.diagnose import (
    Diagnosis,
    check_memlock,
    classify,
    classify_all,
    diagnose_text,
    find_insecure_ssh_options,
    nccl_transport_summary,
    parse_ulimit_a,
)
from ansible_collections.gpucluster.cluster.plugins.module_utils.multi_nic import parse_ifconfig

from tests.conftest import fixture_text

C34 = "mpi-containers/C34_mpirun_in_container_ssh_port_22_reaches_host_sshd_orted_missing.2-output.txt"
C35 = "mpi-containers/C35_mpi_host_key_verification_failed_known_hosts.1-mpiexec-failure.txt"
C36_ULIMIT = "mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.1-ulimit-a.txt"
C36_UCX = "mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.2-ucx-error-newer-ucx.txt"
E12 = "nccl-logs/E12_nccl_info_socket_no_ib_virbr0.txt"
E14 = "nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt"
E16 = "nccl-logs/E16_nccl_info_containers_ib_4hca.txt"
E17 = "nccl-logs/E17_horovod_nccl_bootstrap_connection_refused_lo.txt"
E18_LINE = "nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.1-mpirun-error-line.txt"
E18_IFCONFIG = "nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.2-ifconfig-docker0.txt"
C30 = "nccl-network/C30_openmpi_btl_tcp_uses_docker0_with_host_network"
C32_NCCL = (
    "nccl-network/C32_roce_gid_index_link_local_v2_fails_ipv4_v2_works.2-nccl-failure-with-gid-index-1.txt"
)


@pytest.mark.parametrize(
    ("relpath", "kind"),
    [
        (C34, "mpi_ssh_wrong_sshd"),
        (C35, "mpi_ssh_host_key"),
        (C36_UCX, "rdma_memlock"),
        (E12, "nccl_socket_virtual_interface"),
        (E14, "nccl_gdr_disabled"),
        (E16, None),
        (E17, "nccl_bootstrap_refused"),
        (E18_LINE, "mpi_tcp_wrong_interface"),
        (C30 + ".1-with-nccl-socket-ifname-docker0.txt", "mpi_tcp_wrong_interface"),
        (C30 + ".2-with-nccl-socket-ifname-data-nic.txt", "mpi_tcp_wrong_interface"),
        (C32_NCCL, "nccl_roce_gid"),
        # Inputs that are listings, not failures: nothing to classify.
        (C36_ULIMIT, None),
        (E18_IFCONFIG, None),
    ],
)
def test_classify_kind(relpath, kind):
    d = classify(fixture_text(relpath))
    assert (d.kind if d else None) == kind
    if d:
        assert d.message and d.fix and d.evidence


# ---- mpi-containers -----------------------------------------------------------------------------


def test_c34_landed_on_the_host_sshd_not_a_path_issue():
    d = classify(fixture_text(C34))
    assert "192.0.2.36" in d.message
    assert "/usr/local/bin/orted does not exist" in d.message
    assert "host's own sshd" in d.message
    assert "not a PATH problem" in d.message
    assert '-mca plm_rsh_args "-p <port>"' in d.fix
    assert "12345" in d.fix
    assert "ssh -p <port> <peer> command -v orted" in d.fix
    assert d.evidence == ("bash: /usr/local/bin/orted: No such file or directory",)


def test_c35_known_hosts_missing_never_strict_no():
    d = classify(fixture_text(C35))
    assert d.message.startswith("known_hosts missing for <host>")
    assert "ssh-keyscan -p <port> <host>" in d.fix
    assert "never StrictHostKeyChecking=no" in d.fix
    named = classify(
        "No ECDSA host key is known for worker-1 and you have requested strict checking.\n"
        + fixture_text(C35)
    )
    assert named.message.startswith("known_hosts missing for worker-1:")


def test_c35_insecure_ssh_options_flagged():
    args = ["-mca", "plm_rsh_args", "-p 12345 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"]
    findings = find_insecure_ssh_options(args)
    assert len(findings) == 2
    assert "keep StrictHostKeyChecking=yes" in findings[0]
    assert find_insecure_ssh_options('-mca plm_rsh_args "-p 12345 -o StrictHostKeyChecking=yes"') == []


def test_c36_ulimit_reading():
    limits = parse_ulimit_a(fixture_text(C36_ULIMIT))
    assert limits["memlock"] == 64  # KiB
    assert limits["nofile"] == 1024
    assert limits["stack"] == 8192
    assert limits["data"] == "unlimited"
    assert limits["core"] == 0
    assert limits["nproc"] == 1030810
    assert limits["msgqueue"] == 819200
    assert len(limits) == 16


def test_c36_memlock_64k_fails_for_rdma():
    d = check_memlock(parse_ulimit_a(fixture_text(C36_ULIMIT)))
    assert isinstance(d, Diagnosis)
    assert d.kind == "rdma_memlock"
    assert "64 KiB, expected unlimited" in d.message
    for part in (
        "--ulimit memlock=-1:-1",
        "LimitMEMLOCK=infinity",
        "memlock unlimited",
        "inside the container",
    ):
        assert part in d.fix
    assert check_memlock(fixture_text(C36_ULIMIT)) == d  # raw text works too
    assert check_memlock(fixture_text(C36_ULIMIT), rdma=False) is None
    assert check_memlock({"memlock": "unlimited"}) is None
    assert check_memlock({"memlock": 64}, min_kib=64) is None
    with pytest.raises(ValueError, match="max locked memory"):
        check_memlock({"nofile": 1024})


def test_c36_ucx_error_names_value_and_device():
    d = classify(fixture_text(C36_UCX))
    assert "on mlx5_0" in d.message
    assert "max locked memory is 64 KiB, expected unlimited" in d.message


def test_ulimit_other_shells():
    zsh = "-t: cpu time (seconds)              unlimited\n-l: locked-in-memory size (kbytes)  64\n"
    assert parse_ulimit_a(zsh) == {"cpu": "unlimited", "memlock": 64}
    dash = "time(seconds)        unlimited\nlocked memory(kbytes) unlimited\nnofiles              1048576\n"
    assert parse_ulimit_a(dash) == {"memlock": "unlimited", "nofile": 1048576}
    with pytest.raises(ValueError, match="ulimit -a"):
        parse_ulimit_a("bash: ulimit: command not found")


# ---- nccl-logs ------------------------------------------------------------------------------------


def test_e12_socket_transport_on_eth0_and_virbr0():
    s = nccl_transport_summary(fixture_text(E12))
    assert s["transport"] == "Socket"
    assert s["socket_interfaces"] == [
        {"name": "eth0", "address": "192.0.2.10"},
        {"name": "virbr0", "address": "192.168.122.1"},
    ]
    assert s["bootstrap"] == [{"host": "host-a", "name": "eth0", "address": "192.0.2.10"}]
    assert s["ibverbs_available"] is False
    assert s["net_plugin"] == "internal"
    assert s["gdr"] is None
    assert s["nccl_version"] == "2.16.5+cuda11.8"
    assert s["warnings"] == ["Could not find a path for pattern 4, falling back to simple order"]
    assert s["error_code"] is None
    d = classify(fixture_text(E12))
    assert "virbr0" in d.message and "libibverbs could not be opened" in d.message
    assert "NCCL_SOCKET_IFNAME==eth0" in d.fix


def test_e14_roce_ib_with_gdr_disabled():
    s = nccl_transport_summary(fixture_text(E14))
    assert s["transport"] == "IB"
    assert s["net_plugin"] == "internal"
    assert s["ib_devices"] == [
        {"device": "mlx5_0", "port": 1, "link_layer": "RoCE"},
        {"device": "mlx5_1", "port": 1, "link_layer": "RoCE"},
    ]
    assert s["relaxed_ordering"] is True
    assert s["gdr"] is False
    assert s["gdr_by_hca"] == {"mlx5_0": False, "mlx5_1": False}
    assert s["nranks"] == 16
    assert s["oob"] == [{"host": "hostname1", "name": "primaryip", "address": "192.0.2.10"}]
    d = classify(fixture_text(E14))
    assert "HCA 0 'mlx5_0', HCA 1 'mlx5_1'" in d.message
    assert "nvidia_peermem" in d.fix and "NCCL_NET_GDR_LEVEL" in d.fix


def test_e16_ib_in_containers_four_hcas():
    s = nccl_transport_summary(fixture_text(E16))
    assert s["transport"] == "IB"
    assert s["net_plugin"] == "internal"
    assert [(d["device"], d["port"], d["link_layer"]) for d in s["ib_devices"]] == [
        ("mlx5_0", 1, "IB"),
        ("mlx5_1", 1, "IB"),
        ("mlx5_2", 1, "IB"),
        ("mlx5_3", 1, "IB"),
    ]
    assert s["relaxed_ordering"] is True
    assert {(b["host"], b["name"], b["address"]) for b in s["bootstrap"]} == {
        ("container-a1", "eth0", "192.0.2.2"),
        ("container-b2", "eth0", "192.0.2.4"),
    }
    assert s["gdr"] is None  # not shown in this log
    assert s["nccl_version"] == "2.13.4+cuda11.7"
    assert s["hosts"] == ["container-a1", "container-b2"]


def test_e17_bootstrap_refused_with_lo_and_link_local():
    text = fixture_text(E17)
    s = nccl_transport_summary(text)
    assert s["transport"] == "Socket"
    assert s["socket_interfaces"] == [
        {"name": "lo", "address": "127.0.0.1"},
        {"name": "eth0", "address": "192.0.2.40"},
        {"name": "eth1", "address": "fe80::200:ff:fe00:1"},
    ]
    assert s["nranks"] == 4
    assert (s["error_code"], s["error_name"]) == (2, "ncclSystemError")
    assert s["warnings"] == ["Call to connect timeout : Connection refused"] * 2
    assert s["hosts"] == ["gpu-node-a", "gpu-node-b"]
    d = classify(text)
    assert "gpu-node-b devices [1], [0]" in d.message
    assert "lo:127.0.0.1 (loopback)" in d.message
    assert "eth1:fe80::200:ff:fe00:1 (IPv6 link-local)" in d.message
    assert "2 (ncclSystemError)" in d.message
    assert "NCCL_SOCKET_IFNAME==eth0" in d.fix


def test_e18_btl_tcp_to_docker0():
    line = fixture_text(E18_LINE)
    for interfaces in (None, parse_ifconfig(fixture_text(E18_IFCONFIG))):
        d = classify(line, interfaces)
        assert d.kind == "mpi_tcp_wrong_interface"
        assert "gpu-host-01 (job [38971,1] rank 2)" in d.message
        assert "172.17.0.1 (docker0" in d.message
        assert "btl_tcp_if_include" in d.fix
        assert "btl_tcp_if_exclude lo,docker0" in d.fix
        assert "NCCL_SOCKET_IFNAME" in d.fix
    s = nccl_transport_summary(line)
    assert s["transport"] is None and s["socket_interfaces"] == [] and s["ib_devices"] == []


def test_e18_address_named_from_facts():
    ifaces = [{"name": "docker0", "ipv4": ["10.99.0.1/16"]}]
    line = fixture_text(E18_LINE).replace("172.17.0.1", "10.99.0.1")
    assert "10.99.0.1 (docker0)" in classify(line, ifaces).message
    # An address of no known shared interface is a plain connect failure, not docker0.
    other = classify(fixture_text(E18_LINE).replace("172.17.0.1", "198.18.160.7"))
    assert other.kind == "mpi_tcp_connect_failed"
    assert "198.18.160.7" in other.message


def test_c32_qp_timeout_points_at_gid_index():
    d = classify(fixture_text(C32_NCCL))
    assert "NCCL_IB_GID_INDEX" in d.fix and "RoCE v2" in d.fix and "link-local" in d.fix


def test_unknown_output_is_none_and_all_lists_several():
    assert classify("everything fine\n") is None
    assert classify_all("") == []
    both = fixture_text(C35) + fixture_text(C36_UCX)
    assert [d.kind for d in classify_all(both)] == ["mpi_ssh_host_key", "rdma_memlock"]


def test_diagnosis_as_dict():
    d = classify(fixture_text(C35))
    assert d.as_dict() == {"kind": d.kind, "message": d.message, "fix": d.fix, "evidence": list(d.evidence)}


# ---- public outputs the classifier misread (probe2b) -----------------------------------------------


def test_host_key_changed_with_key_type_names_host_and_stale_line():
    # kftsehk/phy-clusters #29 (MPI launch fail due to host key change): OpenSSH up to 8.4 prints the
    # key type first ("RSA host key for cu25 has changed"), which the "Host key for" pattern missed.
    text = (
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
        "Add correct host key in /home/USER/.ssh/known_hosts to get rid of this message.\n"
        "Offending key in /home/USER/.ssh/known_hosts:27\n"
        "RSA host key for cu25 has changed and you have requested strict checking.\n"
        "Host key verification failed.\n"
    )
    d = classify(text)
    assert d.kind == "mpi_ssh_host_key"
    assert d.message.startswith("known_hosts holds a stale key for cu25 (/home/USER/.ssh/known_hosts:27)")
    assert "missing" not in d.message
    assert "ssh-keygen -R cu25" in d.fix and "never StrictHostKeyChecking=no" in d.fix
    # OpenSSH >= 8.5: "Offending ECDSA key in ..." and "Host key for <host> has changed".
    newer = text.replace("Offending key", "Offending ECDSA key").replace("RSA host key for", "Host key for")
    assert classify(newer).message.startswith("known_hosts holds a stale key for cu25 (/home/USER/.ssh/known_hosts:27)")


def test_ucx_1_12_create_cq_enomem_is_memlock():
    # openucx/ucx #8229 (title and report): UCX 1.12 prints "ibv_create_cq(cqe=4096) failed: Cannot
    # allocate memory" without the ulimit hint of later UCX; the "ibv_create_cq()" pattern missed it.
    line = ("[1652735127.584329] [node01:12345:0]        ib_iface.c:744  UCX  ERROR "
            "ibv_create_cq(cqe=4096) failed: Cannot allocate memory\n")
    assert classify(line).kind == "rdma_memlock"
    assert [(f.kind, f.cls) for f in diagnose_text(line)] == [("mpi", "rdma_memlock")]


def test_btl_tcp_line_of_a_vpath_build():
    # Open MPI users list (sputnik5, Open MPI built out of tree): __FILE__ is the relative source path,
    # "[../../../../../opal/mca/btl/tcp/btl_tcp_endpoint.c:675:...]"; it was read as unreadable.
    line = ("[sputnik5][[41877,1],29][../../../../../opal/mca/btl/tcp/btl_tcp_endpoint.c:675:"
            "mca_btl_tcp_endpoint_complete_connect] connect() to 192.168.1.42 failed: Connection refused (111)\n")
    d = classify(line)
    assert d.kind == "mpi_tcp_connect_failed"
    assert "sputnik5 (job [41877,1] rank 29)" in d.message and "192.168.1.42" in d.message
    assert "Connection refused" in d.message


def test_btl_tcp_line_behind_tag_output():
    # mpirun --tag-output puts "[1,0]<stderr>:" before a rank's line (openucx/ucx #3513 shows the prefix
    # on UCX errors); the btl_tcp_endpoint line of open-mpi/ompi #2168 behind it was not read.
    line = ("[1,0]<stderr>:[ivy08][[463,1],0][btl_tcp_endpoint.c:803:mca_btl_tcp_endpoint_complete_connect] "
            "connect() to 172.17.0.1 failed: No route to host (113)\n")
    d = classify(line)
    assert d.kind == "mpi_tcp_wrong_interface"
    assert "ivy08 (job [463,1] rank 0)" in d.message and "172.17.0.1 (docker0" in d.message


def test_btl_tcp_client_connect_fail_help():
    # omni-compiler/omni-compiler #626 (Open MPI 4.0.5): since 4.0.3 (open-mpi/ompi #7131) the TCP BTL
    # reports a failed connect() with the "client connect fail" help of help-mpi-btl-tcp.txt, not the
    # BTL_ERROR line; nothing read it.
    text = (
        "--------------------------------------------------------------------------\n"
        "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\n"
        "should not happen.\n\n"
        "Your Open MPI job may now hang or fail.\n\n"
        "  Local host: centos-1cpu-1gb-es-mad1\n"
        "  PID:        272589\n"
        "  Message:    connect() to 10.7.0.188:1024 failed\n"
        "  Error:      Operation now in progress (115)\n"
        "--------------------------------------------------------------------------\n"
        "--------------------------------------------------------------------------\n"
        "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\n"
        "should not happen.\n\n"
        "Your Open MPI job may now hang or fail.\n\n"
        "  Local host: centos-1cpu-1gb-es-mad2\n"
        "  PID:        292546\n"
        "  Message:    connect() to 10.7.0.187:1024 failed\n"
        "  Error:      Operation now in progress (115)\n"
        "--------------------------------------------------------------------------\n"
    )
    d = classify(text)
    assert d.kind == "mpi_tcp_connect_failed"
    assert d.message == ("Open MPI's TCP BTL on centos-1cpu-1gb-es-mad1 (pid 272589) could not connect to "
                         "10.7.0.188 (Operation now in progress); 1 more failed connect(s) in the output")
    assert d.evidence == ("Message: connect() to 10.7.0.188:1024 failed",
                          "Message: connect() to 10.7.0.187:1024 failed")
    assert [(f.kind, f.cls) for f in diagnose_text(text)] == [("mpi", "mpi_tcp_connect_failed")]
    # The same help naming docker0's address (the input above, one address changed) is the wrong interface.
    docker = text.replace("10.7.0.187:1024", "172.17.0.1:1024")
    wrong = classify(docker)
    assert wrong.kind == "mpi_tcp_wrong_interface"
    assert "centos-1cpu-1gb-es-mad2 (pid 292546) tried 172.17.0.1 (docker0" in wrong.message
