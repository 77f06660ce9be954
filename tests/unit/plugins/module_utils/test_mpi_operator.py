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


# mpi-operator README's status block (kubeflow/mpi-operator README.md): finished, not running.
SUCCEEDED = """\
status:
  completionTime: "2019-07-09T22:17:06Z"
  conditions:
  - lastTransitionTime: "2019-07-09T22:15:51Z"
    lastUpdateTime: "2019-07-09T22:15:51Z"
    message: MPIJob default/tensorflow-benchmarks is created.
    reason: MPIJobCreated
    status: "True"
    type: Created
  - lastTransitionTime: "2019-07-09T22:15:54Z"
    lastUpdateTime: "2019-07-09T22:15:54Z"
    message: MPIJob default/tensorflow-benchmarks is running.
    reason: MPIJobRunning
    status: "False"
    type: Running
  - lastTransitionTime: "2019-07-09T22:17:06Z"
    lastUpdateTime: "2019-07-09T22:17:06Z"
    message: MPIJob default/tensorflow-benchmarks successfully completed.
    reason: MPIJobSucceeded
    status: "True"
    type: Succeeded
  replicaStatuses:
    Launcher:
      succeeded: 1
    Worker: {}
  startTime: "2019-07-09T22:15:51Z"
"""


def test_mpijob_succeeded_condition_is_not_running():
    r = read_job_status(SUCCEEDED)
    assert [(c["type"], c["status"]) for c in r["mpijob_conditions"]] == [
        ("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert "Launcher" not in r["mpijob_conditions"][-1]  # replicaStatuses is not part of the condition
    assert r["podgroup"] is None
    assert (r["class"], r["severity"]) == ("JOB_SUCCEEDED", "warn")
    assert "successfully completed" in r["cause"]


def test_mpijob_failed_condition_and_state_column_fail():
    # mpi-operator controller: reason mpiJobFailedReason "MPIJobFailed", "MPIJob %s/%s has failed"
    failed = (SUCCEEDED.replace("successfully completed.", "has failed").replace("MPIJobSucceeded", "MPIJobFailed")
              .replace("type: Succeeded", "type: Failed").replace("succeeded: 1", "failed: 1"))
    r = read_job_status(failed)
    assert (r["class"], r["severity"]) == ("JOB_FAILED", "fail")
    assert "MPIJobFailed: MPIJob default/tensorflow-benchmarks has failed" in r["cause"]
    r = read_job_status("NAME                    AGE   STATE\ntensorflow-benchmarks   12m   Failed\n")
    assert r["mpijob"]["state"] == "Failed" and (r["class"], r["severity"]) == ("JOB_FAILED", "fail")
    # the latest True condition wins over an earlier one, whatever the list order
    r = read_job_status("status:\n  conditions:\n"
                        "  - lastTransitionTime: \"2024-01-01T00:05:00Z\"\n    status: \"True\"\n    type: Restarting\n"
                        "  - lastTransitionTime: \"2024-01-01T00:00:00Z\"\n    status: \"True\"\n    type: Created\n")
    assert (r["class"], r["severity"]) == ("JOB_RESTARTING", "warn")
    # conditions outrank a STATE column pasted with them
    r = read_job_status("NAME AGE STATE\njob 1m Failed\n\n" + SUCCEEDED)
    assert r["class"] == "JOB_SUCCEEDED"


def test_launcher_crashloop_is_failing_and_v2_launcher_pod_has_its_role():
    # kubeflow/mpi-operator #90; the v2beta1 launcher is a batch/v1 Job, its pod "<job>-launcher-<hash>" (#552)
    table = ("NAME                                 READY     STATUS             RESTARTS   AGE\n"
             "mpi-test-2-mpijob-launcher-lv2fx     1/1       CrashLoopBackOff   2          1m\n"
             "mpi-test-2-mpijob-worker-0           1/1       Running            0          1m\n"
             "mpi-test-2-mpijob-worker-1           1/1       Running            0          1m\n")
    r = read_job_status(table)
    assert [p["role"] for p in r["pods"]] == ["launcher", "worker", "worker"]
    assert (r["class"], r["severity"]) == ("PODS_FAILING", "fail")
    assert "launcher mpi-test-2-mpijob-launcher-lv2fx CrashLoopBackOff (2 restarts)" in r["cause"]
    r = read_job_status(table.replace("CrashLoopBackOff", "Error           "))
    assert r["class"] == "PODS_FAILING" and "Error" in r["cause"]


# Volcano docs, "PodGroup" example: an old Unschedulable, then Scheduled, phase Running.
VOLCANO_RUNNING = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  creationTimestamp: "2020-08-11T12:28:55Z"
  generation: 5
  name: test
  namespace: default
spec:
  minMember: 1
  minResources:
    cpu: "3"
    memory: "2048Mi"
  priorityClassName: high-priority
  queue: default
status:
  conditions:
  - lastTransitionTime: "2020-08-11T12:28:57Z"
    message: '1/0 tasks in gang unschedulable: pod group is not ready, 1 minAvailable.'
    reason: NotEnoughResources
    status: "True"
    transitionID: 77d5be3f-6169-4f86-8e65-0bdc621ce983
    type: Unschedulable
  - lastTransitionTime: "2020-08-11T12:29:02Z"
    reason: tasks in gang are ready to be scheduled
    status: "True"
    transitionID: 54514401-5c90-4b11-840d-90c1cda93096
    type: Scheduled
  phase: Running
  running: 1
"""


def test_podgroup_later_scheduled_and_phase_running_supersede_an_old_unschedulable():
    r = read_job_status(VOLCANO_RUNNING)
    assert [c["type"] for c in r["podgroup"]["conditions"]] == ["Unschedulable", "Scheduled"]
    assert (r["podgroup"]["phase"], r["podgroup"]["running"]) == ("Running", 1)
    assert (r["class"], r["severity"]) == ("RUNNING", "ok")
    assert "PodGroup phase Running, 1 member(s) running" in r["cause"]
    # without the phase, the later Scheduled condition still decides
    r = read_job_status(VOLCANO_RUNNING.replace("  phase: Running\n", "  phase: Inqueue\n"))
    assert r["class"] == "RUNNING"
    # and with the order of the times reversed, Unschedulable is the current one
    swapped = (VOLCANO_RUNNING.replace("12:28:57Z", "12:29:09Z").replace("  phase: Running\n", "  phase: Pending\n")
               .replace("  running: 1\n", ""))
    r = read_job_status(swapped)
    assert r["class"] == "GANG_UNSCHEDULABLE"
    assert (r["podgroup"]["gang_running"], r["podgroup"]["min_available"]) == (0, 1)


def test_podgroup_message_without_a_running_count_is_zero_placed():
    # Volcano JobInfo.FitError lists "<count> <status>" for each status that has tasks: no Running, none run
    text = """\
status:
  conditions:
  - lastTransitionTime: "2022-12-01T04:48:19Z"
    message: '3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending,
      3 minAvailable; Pending: 3 Undetermined'
    reason: NotEnoughResources
    status: "True"
    transitionID: 3956b64f-fc52-4779-831e-d379648eecfc
    type: Unschedulable
  phase: Pending
"""
    r = read_job_status(text)
    assert (r["podgroup"]["gang_running"], r["podgroup"]["min_available"]) == (0, 3)
    assert r["class"] == "GANG_UNSCHEDULABLE" and "0/3 members placed" in r["cause"]
    assert "for 3 more pod(s)" in r["fix"] and "None" not in r["cause"] + r["fix"]
    unknown = read_job_status(text.replace("pod group is not ready, 3 Pending,", "something else,"))
    assert unknown["class"] == "GANG_UNSCHEDULABLE" and unknown["podgroup"]["min_available"] is None
    assert "None" not in unknown["cause"] + unknown["fix"]
