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


# ---- launch, runtime and scheduling failures (real output, inline) ------------------------------

# Open MPI v4 help-orte-rmaps-base.txt [orte-rmaps-base:alloc-error], as pasted in
# https://github.com/open-mpi/ompi/blob/v4.1.x/orte/mca/rmaps/base/help-orte-rmaps-base.txt
SLOTS_V4 = """\
$ mpirun -np 16 --hostfile hosts ./allgather
--------------------------------------------------------------------------
There are not enough slots available in the system to satisfy the 16
slots that were requested by the application:

  allgather

Either request fewer slots for your application, or make more slots
available for use.

A "slot" is the Open MPI term for an allocatable unit where we can
launch a process.  The number of slots available are defined by the
environment in which Open MPI processes are run:
--------------------------------------------------------------------------
"""
# Open MPI v3 / 1.x wording (one line longer before the wrap), users mailing list archive
# https://www.mail-archive.com/users@lists.open-mpi.org/ ("mpirun -np 2 -nooversubscribe")
SLOTS_V3 = """\
There are not enough slots available in the system to satisfy the 2 slots
that were requested by the application:
  ./hello

Either request fewer slots for your application, or make more slots available
for use.
"""
# Open MPI 5 / PRRTE help-prte-rmaps-base.txt, as quoted in a PBS run log
# https://github.com/openpmix/prrte/blob/master/src/mca/rmaps/base/help-prte-rmaps-base.txt
SLOTS_PRRTE = """\
There are not enough slots available in the system to satisfy the 9
slots that were requested by the application:

  /home/user/miniconda3/envs/miv/bin/optimize-network

Either request fewer procs for your application, or make more slots
available for use.
"""


@pytest.mark.parametrize(("text", "n", "app"), [(SLOTS_V4, "16", "allgather"), (SLOTS_V3, "2", "./hello"),
                                                  (SLOTS_PRRTE, "9", "optimize-network")])
def test_not_enough_slots_v3_v4_prrte(text, n, app):
    d = classify(text)
    assert d.kind == "mpi_not_enough_slots"
    assert f"asked for {n} processes" in d.message and app in d.message
    assert "slots=<GPUs per node>" in d.fix and "--oversubscribe only knowingly" in d.fix
    assert d.evidence[0].startswith("There are not enough slots available in the system")


def test_not_enough_slots_names_np():
    assert "(-np 16)" in classify(SLOTS_V4).message


def test_slots_neighbour_is_not_slots():
    # the rank/slot listing of a rankfile (users mailing list) mentions slots but is no failure
    assert classify("rank 0=node01 slot=0\nrank 1=node01 slot=1\nslots available: 8\n") is None


# help-orterun.txt [orterun:executable-not-found]; output from
# https://github.com/open-mpi/ompi/blob/v4.1.x/orte/tools/orterun/help-orterun.txt (a user's nbody run)
EXEC_NOT_FOUND = """\
$ mpirun -np 12 --hostfile hosts.txt /mpi/178342/nbody_mpi 16384 100
--------------------------------------------------------------------------
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: /mpi/178342/nbody_mpi
Node: 192.168.14.207

while attempting to start process rank 8.
--------------------------------------------------------------------------
8 total processes failed to start
"""
# the same help with a misspelt option taken for the program (users mailing list, "-prefix=")
EXEC_OPTION = """\
mpirun was unable to launch the specified application as it could not access
or execute an executable:

Executable: -prefix=/myname
Node: host1

while attempting to start process rank 0.
"""
# Open MPI 1.3 wording, "could not find an executable" (users mailing list)
EXEC_OLD = """\
mpirun was unable to launch the specified application as it could
not find an executable:

Executable: a.out_32
Node: compil02

while attempting to start process rank 1.
"""


def test_executable_not_found_names_path_node_rank():
    d = classify(EXEC_NOT_FOUND)
    assert d.kind == "mpi_executable_not_found"
    assert "/mpi/178342/nbody_mpi on 192.168.14.207 (rank 8)" in d.message
    assert "in that node's container" in d.message
    assert "ls -l /mpi/178342/nbody_mpi" in d.fix and "mpirun -x PATH" in d.fix and "chmod +x" in d.fix
    assert "Executable: /mpi/178342/nbody_mpi" in d.evidence


def test_executable_not_found_option_taken_for_program_and_old_wording():
    d = classify(EXEC_OPTION)
    assert d.kind == "mpi_executable_not_found" and "-prefix=/myname" in d.message and "--prefix" in d.fix
    d = classify(EXEC_OLD)
    assert d.kind == "mpi_executable_not_found" and "could not find a.out_32 on compil02 (rank 1)" in d.message


def test_executable_neighbour_ompi_info_is_none():
    assert classify("Executable: /usr/bin/orted\nNode: node1\n                 Prefix: /usr\n") is None


# Open MPI v4 help-errmgr-base.txt [node-died]: https://github.com/openpmix/prrte/issues/681 (v4 ids)
DAEMON_LOST_V4 = """\
--------------------------------------------------------------------------
ORTE has lost communication with a remote daemon.

  HNP daemon   : [[47075,0],0] on node fj-debug1
  Remote daemon: [[47075,0],27] on node fj078

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
"""
# Open MPI 5 / PRRTE, https://github.com/openpmix/prrte/issues/2694
DAEMON_LOST_PRRTE = """\
nid002944
--------------------------------------------------------------------------
PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-nid002944-1918870@0,0] on node nid002944
  Remote daemon: [prterun-nid002944-1918870@0,1] on node nid003032

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself.

Any processes that were running on that node have been lost.
--------------------------------------------------------------------------
"""


@pytest.mark.parametrize(("text", "runtime", "host", "hnp"), [(DAEMON_LOST_V4, "ORTE", "fj078", "fj-debug1"),
                                                               (DAEMON_LOST_PRRTE, "PRTE", "nid003032", "nid002944")])
def test_daemon_lost_names_the_node(text, runtime, host, hnp):
    d = classify(text)
    assert d.kind == "mpi_daemon_lost"
    assert d.message.startswith(f"{runtime} lost the daemon on {host} (launcher daemon on {hnp})")
    assert "OOM" in d.message and f"on {host}:" in d.fix and "oob_tcp_if_include" in d.fix
    assert any("Remote daemon" in e for e in d.evidence)


def test_daemon_lost_old_wording_and_neighbour():
    old = ("ORTE has lost communication with its daemon located on node:\n\n  hostname:  node02\n\n"
           "This is usually due to either a failure of the TCP network\n")
    assert "the daemon on node02" in classify(old).message
    # --debug-daemons chatter about a daemon that reported back is no failure
    assert classify("[node01:12345] [[47075,0],0] orted_cmd: received add_local_procs\n"
                    "Daemon [[47075,0],1] checking in as pid 2214 on host node02\n") is None


# PyTorch ProcessGroupNCCL: ncclSystemError through torch.distributed, from a LUMI user's notes
# (https://github.com/pytorch/pytorch/blob/v1.11.0/torch/csrc/distributed/c10d/NCCLUtils.hpp)
NCCL_SYSTEM = """\
    work = default_pg.barrier(opts=opts)
RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.11.4
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. It can be also caused by unexpected exit of a remote peer, you can check NCCL warnings for failure reason and see if there is connection closure by a peer.
"""  # noqa: E501
# ncclRemoteError via the watchdog (NCCL 2.19, "Last error:" tail), https://github.com/NVIDIA/nccl/issues
NCCL_REMOTE = """\
[E ProcessGroupNCCL.cpp:852] [Rank 16] NCCL watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.19.3
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
Last error:
NET/IB : Got completion from peer 10.42.0.2<47534> with error 5, opcode 48, len 32764, vendor err 244
terminate called after throwing an instance of 'std::runtime_error'
"""  # noqa: E501
# Horovod's nccl_operations.cc: "<op> failed: " + ncclGetErrorString()
NCCL_HOROVOD = "horovod.common.exceptions.HorovodInternalError: ncclCommInitRank failed: unhandled system error\n"


def test_nccl_system_error_code_and_version():
    d = classify(NCCL_SYSTEM)
    assert d.kind == "nccl_system_or_remote_error"
    assert d.message.startswith("NCCL 2.11.4 returned 2 (ncclSystemError) in ProcessGroupNCCL.cpp:1191")
    assert "NCCL_DEBUG=INFO" in d.fix and "classify that log" in d.fix and "NCCL_SOCKET_IFNAME" in d.fix
    assert "ibv_devinfo" in d.fix


def test_nccl_remote_error_names_rank_and_last_error():
    d = classify(NCCL_REMOTE)
    assert d.kind == "nccl_system_or_remote_error"
    assert d.message.startswith("NCCL 2.19.3 returned 6 (ncclRemoteError) on rank 16")
    assert "Got completion from peer 10.42.0.2<47534> with error 5" in d.message
    assert "Last error:" in d.evidence


def test_nccl_error_through_horovod_and_neighbours():
    d = classify(NCCL_HOROVOD)
    assert d.kind == "nccl_system_or_remote_error" and "returned 2 (ncclSystemError) in ncclCommInitRank" in d.message
    # an invalid-usage error is the program's, not the network's: not this class
    assert classify("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, "
                    "invalid usage, NCCL version 2.14.3\n") is None
    assert classify("NCCL version 2.19.3+cuda12.3\n") is None


# torch ProcessGroupNCCL.cpp watchdog (2.x with SeqNum/NumelIn), a DeepSpeed run's log
# https://github.com/pytorch/pytorch/blob/v2.5.0/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
WATCHDOG = """\
[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.
[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.
"""  # noqa: E501
# torch 1.x form: "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000)"
WATCHDOG_1X = ("[E ProcessGroupNCCL.cpp:566] [Rank 3] Watchdog caught collective operation timeout: "
               "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1806794 milliseconds before timing out.\n")


def test_watchdog_timeout_names_op_timeout_ranks():
    d = classify(WATCHDOG)
    assert d.kind == "torch_nccl_watchdog_timeout"
    assert d.message.startswith("PyTorch's NCCL watchdog on ranks 0, 1 gave up on BROADCAST #1 after 600081 ms "
                                "(timeout 600 s)")
    assert "did NOT print this line" in d.fix and "TORCH_NCCL_DESYNC_DEBUG=1" in d.fix
    assert len(d.evidence) == 2
    d = classify(WATCHDOG_1X)
    assert "on rank 3 gave up on ALLREDUCE after 1806794 ms (timeout 1800 s)" in d.message


def test_watchdog_neighbour_heartbeat_is_none():
    assert classify("[I ProcessGroupNCCL.cpp:835] [Rank 0] ProcessGroupNCCL initialization options: "
                    "NCCL_ASYNC_ERROR_HANDLING: 1, NCCL_DESYNC_DEBUG: 0, Timeout(ms): 600000\n") is None


# PyTorch DataLoader in a container with Docker's 64 MB /dev/shm (pytorch/pytorch #2244 and the
# discuss.pytorch.org thread "unable to write to file </torch_18692_1954506624>")
SHM_TORCH = """\
RuntimeError: unable to write to file </torch_9931_3149260800_0>: No space left on device (28)
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
RuntimeError: DataLoader worker (pid 9943) is killed by signal: Bus error.
"""
# NCCL src/misc/shmutils.cc, from the NCCL troubleshooting guide and a containerised deployment
SHM_NCCL = """\
3d3e22c3066f:168:168 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-UbzKZ9 to 9637892 bytes
3d3e22c3066f:168:168 [0] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-UbzKZ9 (size 9637888)
3d3e22c3066f:168:168 [0] NCCL INFO transport/shm.cc:114 -> 2
RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3
"""  # noqa: E501


def test_shm_exhausted_torch_and_nccl():
    d = classify(SHM_TORCH)
    assert d.kind == "container_shm_exhausted"
    assert "DataLoader workers" in d.message and "64 MB" in d.message
    assert "training_image_shm_size" in d.fix and "--ipc=host" in d.fix and "medium: Memory" in d.fix
    assert len(d.evidence) == 3
    found = classify_all(SHM_NCCL)
    # the /dev/shm failure is the cause of NCCL's system error, so it comes first
    assert [f.kind for f in found] == ["container_shm_exhausted", "nccl_system_or_remote_error"]
    assert "NCCL could not grow /dev/shm/nccl-UbzKZ9 to 9637892 bytes" in found[0].message


def test_shm_bus_error_core_dumped_and_mpirun_signal_7():
    assert classify("./train.sh: line 4:  212 Bus error (core dumped) python train.py\n").kind == \
        "container_shm_exhausted"
    d = classify("mpirun noticed that process rank 3 with PID 0 on node gpu02 exited on signal 7 (Bus error).\n")
    assert d.kind == "container_shm_exhausted" and "on gpu02" in d.message


def test_shm_neighbour_too_many_open_files_is_not_shm():
    # the file-descriptor sharing strategy running out of fds (ulimit -n), not a full /dev/shm
    assert classify("RuntimeError: unable to open shared memory object </torch_7_2090463367> in read-write mode: "
                    "Too many open files (24)\n") is None


# kube-scheduler FitError on an MPIJob worker (kubectl describe pod / kubectl get events)
# https://github.com/kubernetes/kubernetes/blob/master/pkg/scheduler/framework/plugins/noderesources/fit.go
K8S_GPU = """\
Events:
  Type     Reason            Age   From               Message
  ----     ------            ----  ----               -------
  Warning  FailedScheduling  12s   default-scheduler  0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.
"""  # noqa: E501
K8S_RDMA = """\
LAST SEEN   TYPE      REASON             OBJECT                    MESSAGE
34s         Warning   FailedScheduling   pod/bert-mpijob-worker-1   0/2 nodes are available: 2 Insufficient rdma/hca_shared_devices_a.
"""  # noqa: E501


def test_k8s_insufficient_gpu_names_counts_and_other_reasons():
    d = classify(K8S_GPU)
    assert d.kind == "k8s_insufficient_device"
    assert "none of the 4 nodes fits - 3 without enough free nvidia.com/gpu" in d.message
    assert "untolerated taint" in d.message and "preemption" not in d.message
    assert "Allocatable" in d.fix and "device plugin" in d.fix


def test_k8s_insufficient_rdma_names_pod():
    d = classify(K8S_RDMA)
    assert "pod bert-mpijob-worker-1" in d.message and "2 without enough free rdma/hca_shared_devices_a" in d.message
    assert "RDMA device plugin" in d.fix


def test_k8s_neighbour_insufficient_cpu_is_none():
    assert classify("Warning  FailedScheduling  5s  default-scheduler  0/3 nodes are available: "
                    "3 Insufficient cpu.\n") is None
