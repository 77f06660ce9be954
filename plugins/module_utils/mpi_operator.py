"""Kubeflow mpi-operator jobs, read from pasted launcher logs and ``kubectl`` output.

Stdlib only, Python 3.8+. Two state models: :func:`read_launcher_log` (why the launcher's
mpirun could not start its workers) and :func:`read_job_status` (whether an MPIJob is really
running: pods, and the gang-scheduling PodGroup).

Grammar and sources:

- launcher log: OpenSSH client messages ``ssh: Could not resolve hostname <h>: <gai_strerror>``
  (``Name or service not known``, ``Temporary failure in name resolution``), ``ssh: connect to
  host <h> port <p>: Connection refused``, ``Permission denied (publickey...)``; Open MPI's
  ORTE/PRRTE banner ``ORTE was unable to reliably start one or more daemons.`` (its bullets are
  generic; the ssh lines before it name the cause). Worker host names are the operator's
  headless-service names ``<job>-worker-<i>.<job>-worker`` (mpi-operator v2beta1
  ``pkg/controller/mpi_job_controller.go``; fixture N08, kubeflow/mpi-operator #481, #386).
- ``kubectl get mpijob`` (``NAME AGE STATE``), ``kubectl get pods [-o wide]`` (``NAME READY
  STATUS RESTARTS AGE [IP NODE ...]``): columns found by header, white-space separated.
- ``kubectl get podgroup -o yaml`` / ``mpijob -o yaml`` ``status.conditions`` (Volcano
  scheduling.volcano.sh/v1beta1 PodGroup: ``type: Unschedulable``, ``reason:
  NotEnoughResources``, message ``<n>/<m> tasks in gang unschedulable: pod group is not ready,
  <histogram>[; Pending: <reasons>]`` where the histogram lists ``<count> <task status>`` for
  every status that has tasks, plus ``<k> minAvailable`` (so no ``Running`` entry means 0
  running); ``phase``, ``running``). A quoted YAML scalar continued on the next line is joined
  (fixture N10). Pastes lose their indentation, so a condition's keys are told from the
  status' own (``phase``, ``replicaStatuses``, ...) by name.
- Which condition is current: the latest ``lastTransitionTime`` among those with status True
  (list order breaks ties). MPIJob condition types (mpi-operator ``pkg/apis/kubeflow/v2beta1``
  ``types.go``): Created, Running, Restarting, Succeeded, Suspended, Failed; ``kubectl get
  mpijob`` STATE is the latest one. PodGroup types: Scheduled, Unschedulable; ``phase:
  Running`` (minMember pods running) outranks an older Unschedulable condition (Volcano docs,
  "PodGroup" example).
- Pod roles: ``<job>-launcher`` (v1) or ``<job>-launcher-<5 chars>`` (v2beta1: the launcher is
  a batch/v1 Job, whose pod name gets a random suffix; kubeflow/mpi-operator #552),
  ``<job>-worker-<i>``. A pod whose STATUS is a container failure reason (``Error``,
  ``CrashLoopBackOff``, ``OOMKilled``, ``ImagePullBackOff``, ...) is failing.
"""

from __future__ import annotations

import re

from ansible_collections.gpucluster.cluster.plugins.module_utils.parsing import ParseError, shorten, split_lines

_RESOLVE = re.compile(r"ssh: Could not resolve hostname (\S+?): (.+?)\s*$")
_REFUSED = re.compile(r"ssh: connect to host (\S+) port (\d+): Connection refused")
_DENIED = re.compile(r"^(?:(\S+): )?Permission denied \((publickey[^)]*)\)")
_ORTE = re.compile(r"ORTE was unable to reliably start one or more daemons|PRTE has lost communication|"
                   r"ORTE does not know how to route a message")
_WORKER = re.compile(r"^(?P<job>.+)-worker-(?P<i>\d+)\.(?P=job)-worker(?:\.[\w.\-]+)?$")


def read_launcher_log(text) -> dict:
    """Class, hosts, cause and fix of a failed launcher; ParseError when nothing in it is known.

    Classes: ``WORKER_DNS_NOT_RESOLVABLE`` (takes priority over the ORTE banner),
    ``WORKER_SSHD_REFUSED``, ``SSH_AUTH_FAILED``, ``ORTE_DAEMONS_NOT_STARTED`` (banner alone).
    """
    lines = [re.sub(r"[ \t]+", " ", ln.strip()) for ln in split_lines(text, "launcher log")]
    unresolved, refused, denied = [], [], []
    banner = False
    for line in lines:
        m = _RESOLVE.search(line)
        if m and m.group(1) not in unresolved:
            unresolved.append(m.group(1))
        m = _REFUSED.search(line)
        if m and m.group(1) not in refused:
            refused.append(m.group(1))
        m = _DENIED.search(line)
        if m:
            denied.append(m.group(1) or "?")
        banner = banner or bool(_ORTE.search(line))
    jobs = sorted({m.group("job") for m in (_WORKER.match(h) for h in unresolved + refused) if m})
    base = {"unresolved_hosts": unresolved, "refused_hosts": refused, "orte_banner": banner, "jobs": jobs}
    if unresolved:
        svc = ", ".join(f"{j}-worker" for j in jobs) or "the workers' headless Service"
        return dict(base, **{
            "class": "WORKER_DNS_NOT_RESOLVABLE", "severity": "fail",
            "cause": f"{len(unresolved)} worker host name(s) do not resolve ({', '.join(unresolved)}): the launcher "
                     "started before the worker pods were Running and their DNS records existed, or the headless "
                     "Service is missing (not an ssh key or orted problem)",
            "fix": f"wait for the workers before mpirun (mpi-operator launcherCreationPolicy: WaitForWorkersReady, or "
                   f"an init loop resolving every /etc/mpi/hostfile entry); rely on the launcher's restart; check that "
                   f"Service {svc} exists"})
    if refused:
        return dict(base, **{
            "class": "WORKER_SSHD_REFUSED", "severity": "fail",
            "cause": f"ssh to {', '.join(refused)} was refused: sshd is not (yet) listening in the worker",
            "fix": "check the worker image runs sshd on the port the launcher uses, and that the worker is Ready"})
    if denied:
        return dict(base, **{
            "class": "SSH_AUTH_FAILED", "severity": "fail",
            "cause": "ssh public-key authentication to the workers failed",
            "fix": "check the operator-mounted ssh secret (authorized_keys) and file modes in the image"})
    if banner:
        return dict(base, **{
            "class": "ORTE_DAEMONS_NOT_STARTED", "severity": "fail",
            "cause": "mpirun could not start orted on the workers; the log holds no ssh line naming why",
            "fix": "capture the full launcher log (kubectl logs <job>-launcher) and check the workers are Ready"})
    raise ParseError("launcher log: no ssh or ORTE failure line in it")


def _table(lines, start, first_col="NAME"):
    header = re.sub(r"NOMINATED NODE", "NOMINATED_NODE", re.sub(r"READINESS GATES", "READINESS_GATES",
                                                                   lines[start])).split()
    rows = []
    i = start + 1
    while i < len(lines) and lines[i].strip():
        # kubectl >= 1.22 prints RESTARTS as "3 (2m ago)": one cell
        cells = re.sub(r"(\d+) \((\S+) ago\)", r"\1(\2_ago)", lines[i].strip()).split()
        if len(cells) != len(header):
            raise ParseError(f"kubectl table line {i + 1}: {len(cells)} columns, header has {len(header)} (cut or "
                             f"wrapped row?): {shorten(lines[i])!r}")
        rows.append(dict(zip(header, cells)))  # noqa: B905 (a short row is padded by kubectl)
        i += 1
    return header, rows, i


# Keys of a condition item (Kubernetes / kubeflow JobCondition, Volcano PodGroupCondition). Any other
# key ends the conditions list: pastes lose their indentation, so keys are told apart by name.
_CONDITION_KEYS = {"type", "status", "reason", "message", "lastTransitionTime", "lastUpdateTime",
                   "lastProbeTime", "lastHeartbeatTime", "transitionID"}


def _conditions(lines, start):
    """``status.conditions`` items and the scalars after them, joining quoted continuations.

    A key that is not a condition field (``phase``, ``running``, ``replicaStatuses``, ...) ends
    the current item and is kept with the status scalars."""
    conds, scalars = [], {}
    cur = None
    i = start
    pending = None  # (dict, key, text, quote)
    while i < len(lines):
        s = lines[i].strip()
        i += 1
        if pending:
            d, key, val, q = pending
            val = val + " " + s
            if val.endswith(q):
                d[key] = val[1:-1]
                pending = None
            else:
                pending = (d, key, val, q)
            continue
        if not s or s.startswith("=="):
            if s.startswith("=="):
                i -= 1
                break
            continue
        if s in ("status:", "conditions:"):
            continue
        m = re.match(r"^(- )?(\w+): ?(.*)$", s)
        if not m:
            i -= 1
            break
        key, val = m.group(2), m.group(3)
        if m.group(1):
            cur = {}
            conds.append(cur)
        elif key not in _CONDITION_KEYS:
            cur = None
        target = cur if cur is not None else scalars
        if val[:1] in ("'", '"') and not (len(val) > 1 and val.endswith(val[0])):
            pending = (target, key, val, val[0])
            continue
        target[key] = val[1:-1] if val[:1] in ("'", '"') else val
    if pending:
        raise ParseError(f"kubectl YAML: quoted value of '{pending[1]}' never closed (cut?)")
    return conds, scalars, i


def _current(conds, types):
    """The condition among ``types`` with status True and the latest lastTransitionTime (later
    in the list on a tie, or when times are missing), or None. RFC 3339 UTC times as
    Kubernetes prints them sort as text."""
    true = [(c.get("lastTransitionTime") or "", n, c) for n, c in enumerate(conds)
            if c.get("type") in types and c.get("status") == "True"]
    return max(true, key=lambda t: (t[0], t[1]))[2] if true else None


_JOB_STATES = ("Created", "Running", "Restarting", "Succeeded", "Suspended", "Failed")
# kubectl's STATUS column: a container's waiting/terminated reason, or the pod phase.
_POD_FAILING = {"Error", "CrashLoopBackOff", "OOMKilled", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "ContainerCannotRun",
                "Failed", "Evicted", "StartError"}
_LAUNCHER = re.compile(r"-launcher(?:-[a-z0-9]{5})?$")


def _gang_histogram(message):
    """``{"Running": 1, "minAvailable": 3, ...}`` from a Volcano gang message, or None."""
    m = re.search(r"pod group is not ready,([^;]*)", message or "")
    if not m:
        return None
    pairs = re.findall(r"(\d+) ([A-Za-z]+)", m.group(1))
    return {name: int(count) for count, name in pairs} or None


def read_job_status(text) -> dict:
    """MPIJob, pods and PodGroup status from pasted ``kubectl get``/``-o yaml`` output.

    Returns ``{"mpijob": {name, age, state}|None, "pods": [{name, ready, status, ip, node, role}],
    "podgroup": {conditions, phase, running, min_available, gang_running}|None,
    "mpijob_conditions": [...], "class", "severity", "cause", "fix"}``. Classes, in
    order: ``JOB_FAILED`` (fail) and ``JOB_SUCCEEDED`` (warn: it finished, nothing runs), from
    the current MPIJob condition or else the STATE column; ``GANG_UNSCHEDULABLE`` (PodGroup
    Unschedulable now: blocked whatever MPIJob STATE says); ``PODS_FAILING`` (fail: a pod in
    Error, CrashLoopBackOff, ...); ``JOB_RESTARTING`` / ``JOB_SUSPENDED`` (warn);
    ``PODS_PENDING``; ``RUNNING``.
    """
    lines = [re.sub(r"[ \t]+", " ", ln.rstrip()) for ln in split_lines(text, "kubectl output")]
    mpijob, pods, podgroup, job_conditions = None, [], None, []
    restarts = {}
    section = None
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        words = s.split()
        if s.startswith("=="):
            section = s.strip("= ").upper()
            i += 1
            continue
        if words[:1] == ["NAME"] and "STATE" in words and "AGE" in words:
            _, rows, i = _table(lines, i)
            if rows:
                r = rows[0]
                mpijob = {"name": r["NAME"], "age": r.get("AGE"), "state": r.get("STATE")}
            continue
        if words[:1] == ["NAME"] and "STATUS" in words and "READY" in words:
            _, rows, i = _table(lines, i)
            for r in rows:
                name = r["NAME"]
                role = "launcher" if _LAUNCHER.search(name) else ("worker" if re.search(r"-worker-\d+$", name)
                                                                   else None)
                restarts[name] = re.sub(r"\(.*", "", r.get("RESTARTS") or "") or None
                pods.append({"name": name, "ready": r["READY"], "status": r["STATUS"],
                             "ip": None if r.get("IP") in (None, "<none>") else r.get("IP"),
                             "node": None if r.get("NODE") in (None, "<none>") else r.get("NODE"), "role": role})
            continue
        if s in ("status:", "conditions:"):
            conds, scalars, i = _conditions(lines, i)
            gang = any(c.get("type") in ("Unschedulable", "Scheduled") for c in conds)
            if "PODGROUP" in (section or "") or gang or "running" in scalars:
                podgroup = {"conditions": conds, "phase": scalars.get("phase"),
                            "running": int(scalars["running"]) if scalars.get("running", "").isdigit() else None}
            else:
                job_conditions = conds
            continue
        i += 1
    if mpijob is None and not pods and podgroup is None and not job_conditions:
        raise ParseError("kubectl output: no MPIJob table, pod table or status conditions in it")
    running = sum(p["status"] == "Running" for p in pods)
    pending = sum(p["status"] == "Pending" for p in pods)
    current = _current(job_conditions, _JOB_STATES)
    job_state = current["type"] if current else (mpijob or {}).get("state")
    out = {"mpijob": mpijob, "pods": pods, "podgroup": podgroup, "mpijob_conditions": job_conditions,
           "pods_running": running, "pods_pending": pending}
    said = f" ({current.get('reason')}: {current.get('message')})" if current and current.get("message") else ""
    if job_state == "Failed":
        return dict(out, **{"class": "JOB_FAILED", "severity": "fail",
                            "cause": f"the MPIJob has failed{said}; nothing of it is running",
                            "fix": "read the launcher's log (kubectl logs job/<job>-launcher) for why mpirun "
                                   "exited, fix that, and delete and resubmit the MPIJob"})
    if job_state == "Succeeded":
        return dict(out, **{"class": "JOB_SUCCEEDED", "severity": "warn",
                            "cause": f"the MPIJob has completed{said}; it is no longer running",
                            "fix": "read the results in the launcher's log (kubectl logs job/<job>-launcher); "
                                   "submit it again to run again"})
    if podgroup is not None:
        gang_state = _gang_unschedulable(podgroup)
        if gang_state is not None:
            return dict(out, **_gang_verdict(podgroup, gang_state, (mpijob or {}).get("state")))
    failing = [p for p in pods if p["status"] in _POD_FAILING or p["status"].split(":")[-1] in _POD_FAILING]
    if failing:
        names = ", ".join(f"{p['role'] or 'pod'} {p['name']} {p['status']}"
                          + (f" ({restarts[p['name']]} restarts)" if restarts.get(p["name"]) not in (None, "0") else "")
                          for p in failing)
        return dict(out, **{"class": "PODS_FAILING", "severity": "fail",
                            "cause": f"{names}; {running} pod(s) Running, but the job is not working",
                            "fix": "kubectl logs --previous <pod> and kubectl describe pod <pod> for why its "
                                   "container exits"})
    if job_state in ("Restarting", "Suspended"):
        return dict(out, **{"class": f"JOB_{job_state.upper()}", "severity": "warn",
                            "cause": f"the MPIJob is {job_state}{said}; {running} pod(s) Running",
                            "fix": "kubectl describe mpijob <job> for the events; do not start benchmarks yet"})
    if pending:
        return dict(out, **{"class": "PODS_PENDING", "severity": "warn",
                            "cause": f"{pending} pod(s) Pending, {running} Running",
                            "fix": "kubectl describe pod <pending pod> for the scheduler's reason"})
    cause = f"{running} pod(s) Running"
    if podgroup is not None:
        members = f", {podgroup['running']} member(s) running" if podgroup.get("running") is not None else ""
        cause += f"; PodGroup phase {podgroup.get('phase')}{members}"
    return dict(out, **{"class": "RUNNING", "severity": "ok", "cause": cause, "fix": None})


def _gang_unschedulable(podgroup):
    """The PodGroup's Unschedulable condition when that is its state now, else None.

    ``phase: Running`` (or Completed) means minMember pods run: an older Unschedulable no longer
    holds (Volcano docs' PodGroup example). Otherwise the latest of Scheduled / Unschedulable
    (with status True) decides.
    """
    if podgroup.get("phase") in ("Running", "Completed"):
        return None
    cond = _current(podgroup.get("conditions", []), ("Unschedulable", "Scheduled"))
    return cond if cond is not None and cond.get("type") == "Unschedulable" else None


def _gang_verdict(podgroup, unsched, state):
    histogram = _gang_histogram(unsched.get("message"))
    min_av = (histogram or {}).get("minAvailable")
    # every task status with tasks is listed, so no "Running" entry is 0 Running
    gang_running = histogram.get("Running", 0) if min_av is not None else None
    podgroup.update(min_available=min_av, gang_running=gang_running)
    placed = (f"{gang_running}/{min_av} members placed" if min_av is not None
              else "the message does not say how many members are placed")
    cause = (f"gang unschedulable ({unsched.get('reason')}): {placed}"
             + (f"; MPIJob STATE says {state}, which is not to be trusted" if state else ""))
    if gang_running:
        cause += "; the partly bound gang holds GPUs while it waits"
    need = (min_av - gang_running) if min_av is not None else None
    return {"class": "GANG_UNSCHEDULABLE", "severity": "fail", "cause": cause,
            "fix": f"free or add capacity (GPUs/CPU/memory) for {need if need is not None else 'the missing'} "
                   "more pod(s), or lower replicas/minAvailable; do not start benchmarks"}
