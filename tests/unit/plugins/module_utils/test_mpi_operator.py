"""mpi-operator readers on tests/fixtures/mpi-operator (N08, N10)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.mpi_operator import read_job_status, read_launcher_log
from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError

from tests.conftest import fixture_text

N08 = "mpi-operator/N08_mpijob_v2beta1_launcher_ssh_cannot_resolve_worker_dns.txt"
N10 = "mpi-operator/N10_mpijob_gang_podgroup_notenoughresources_1_of_3_running.txt"


def test_n08_worker_dns_outranks_the_orte_banner():
    r = read_launcher_log(fixture_text(N08))
    assert r["class"] == "WORKER_DNS_NOT_RESOLVABLE"
    assert r["unresolved_hosts"] == ["tensorflow-benchmarks-worker-0.tensorflow-benchmarks-worker",
                                     "tensorflow-benchmarks-worker-1.tensorflow-benchmarks-worker"]
    assert r["jobs"] == ["tensorflow-benchmarks"]
    assert r["orte_banner"] is True
    assert "LD_LIBRARY_PATH" not in r["cause"]  # the banner's generic bullets are not the cause
    assert "WaitForWorkersReady" in r["fix"] and "tensorflow-benchmarks-worker" in r["fix"]


def test_n10_gang_unschedulable_although_mpijob_says_running():
    r = read_job_status(fixture_text(N10))
    assert r["mpijob"] == {"name": "hvd-tf1-mnist", "age": "16m", "state": "Running"}
    pods = {p["name"]: p for p in r["pods"]}
    assert pods["hvd-tf1-mnist-launcher"]["status"] == "Pending" and pods["hvd-tf1-mnist-launcher"]["ip"] is None
    assert pods["hvd-tf1-mnist-worker-0"] == {"name": "hvd-tf1-mnist-worker-0", "ready": "1/1", "status": "Running",
                                              "ip": "192.0.2.172", "node": "gpunode-212", "role": "worker"}
    assert (r["pods_running"], r["pods_pending"]) == (1, 2)
    cond = r["podgroup"]["conditions"][0]
    assert cond["message"] == "2/1 tasks in gang unschedulable: pod group is not ready, 1 Running, 3 minAvailable"
    assert (cond["type"], cond["status"], cond["reason"]) == ("Unschedulable", "True", "NotEnoughResources")
    assert (r["podgroup"]["phase"], r["podgroup"]["running"]) == ("Unknown", 1)
    assert (r["podgroup"]["gang_running"], r["podgroup"]["min_available"]) == (1, 3)
    assert r["mpijob_conditions"][0]["reason"] == "MPIJobCreated"
    assert r["class"] == "GANG_UNSCHEDULABLE" and r["severity"] == "fail"
    assert "1/3" in r["cause"] and "holds GPUs" in r["cause"]
    assert "2 more pod(s)" in r["fix"]


def test_launcher_other_classes_and_unknown_input():
    assert read_launcher_log("ssh: connect to host w-0.w port 22: Connection refused\n")["class"] == \
        "WORKER_SSHD_REFUSED"
    assert read_launcher_log("Permission denied (publickey,password).\n")["class"] == "SSH_AUTH_FAILED"
    with pytest.raises(ParseError):
        read_launcher_log("all good\n")
    with pytest.raises(ParseError, match="never closed"):
        read_job_status("status:\n  conditions:\n  - message: 'cut here\n")


def test_pod_table_restarts_with_age_and_a_cut_row():
    table = ("NAME                READY   STATUS    RESTARTS      AGE\n"
             "job-launcher        0/1     Error     3 (2m ago)    5m\n"
             "job-worker-0        1/1     Running   0             5m\n")
    r = read_job_status(table)
    assert [(p["name"], p["status"], p["role"]) for p in r["pods"]] == [("job-launcher", "Error", "launcher"),
                                                                       ("job-worker-0", "Running", "worker")]
    cut = table.splitlines()[0] + "\n" + table.splitlines()[1] + "\njob-worker-1        0/1\n"
    with pytest.raises(ParseError, match="line 3"):
        read_job_status(cut)
