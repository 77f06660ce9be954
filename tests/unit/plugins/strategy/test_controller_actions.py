"""The strategy runs the actions that never reach the node (assert, set_fact, debug,
validate_argument_spec) in its own process with Ansible's TaskExecutor instead of forking a worker
(plugins/strategy/mitogen_linear.py, run_in_controller). Each playbook runs for real on this machine
(connection local, two hosts) under the strategy and under Ansible's own linear strategy: what the
tasks registered, the facts they set, the recap and the errors must be the same, each host with its
own templated values, with one fork fewer per such task and host."""

from __future__ import annotations

import json

import pytest

from tests.unit.plugins.strategy.harness import run_playbook

SPEC = {"argument_specs": {"main": {"short_description": "A role with a spec", "options": {
    "size": {"type": "int", "required": True, "description": "A size."}}}}}

TASKS = [
    {"name": "A fact per host {{ inventory_hostname }}", "ansible.builtin.set_fact": {
        "mine": "{{ inventory_hostname }}-{{ 40 + 2 }}", "listed": "{{ [inventory_hostname] * 2 }}"},
     "register": "r_fact"},
    {"name": "The fact is the host's own", "ansible.builtin.assert": {
        "that": ["mine == inventory_hostname ~ '-42'", "listed | length == 2"], "quiet": True},
     "register": "r_assert"},
    {"name": "A failed assert, ignored", "ansible.builtin.assert": {
        "that": "mine == 'node-b-42'", "fail_msg": "{{ inventory_hostname }}: mine is {{ mine }}"},
     "ignore_errors": True, "register": "r_failed"},
    {"name": "Debug a variable", "ansible.builtin.debug": {"var": "mine"}, "register": "r_debug"},
    {"name": "Debug a secret", "ansible.builtin.debug": {"msg": "{{ mine }}"}, "no_log": True,
     "register": "r_secret"},
    {"name": "A role's spec, met", "ansible.builtin.validate_argument_spec": {
        "argument_spec": SPEC["argument_specs"]["main"]["options"], "provided_arguments": {"size": "7"}},
     "register": "r_spec"},
    {"name": "Write what was registered", "ansible.builtin.copy": {
        "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
        "content": "{{ {'fact': r_fact, 'assert': r_assert, 'failed': r_failed, 'debug': r_debug,"
                   " 'secret': r_secret, 'spec': r_spec, 'mine': mine} | to_json }}"}},
]


def _shown(stdout, task):
    """The lines the output shows under ``TASK [task]``."""
    block = stdout.split(f"TASK [{task}]", 1)[1].split("\n\n", 1)[0]
    return block.splitlines()[1:]


def _both(tmp_path, tasks):
    ours = run_playbook(tmp_path, "mitogen_linear", tasks)
    plain = run_playbook(tmp_path, "linear", tasks)
    return ours, plain


def test_controller_actions_run_in_the_strategy_with_the_workers_results(tmp_path):
    (ours, got, ours_forks, ours_recap), (plain, want, plain_forks, plain_recap) = _both(tmp_path, TASKS)
    assert ours.returncode == plain.returncode == 0, ours.stdout + ours.stderr + plain.stdout
    assert got == want
    assert ours_recap == plain_recap and len(ours_recap) == 2
    assert got["mine"] == "node-a-42" and got["fact"]["ansible_facts"]["listed"] == ["node-a", "node-a"]
    assert got["failed"]["failed"] is True and got["failed"]["msg"] == "node-a: mine is node-a-42"
    assert got["debug"]["mine"] == "node-a-42"
    # no_log: the registered value keeps the message, the output hides it, as from a worker.
    assert got["secret"]["msg"] == "node-a-42"
    # The strategy shows the hosts in inventory order; Ansible's own linear shows them as its
    # workers finish, which is either order.
    assert _shown(ours.stdout, "Debug a secret") == sorted(_shown(plain.stdout, "Debug a secret")) == [
        "ok: [node-a]", "ok: [node-b]"]
    assert got["spec"]["validate_args_context"] == {} and not got["spec"].get("failed")
    # Each host's own task name, as the worker templates it.
    assert ours.stdout.count("A fact per host node-a") == plain.stdout.count("A fact per host node-a")
    # One fork fewer for each of the six controller tasks on each host; the copy still forks.
    assert plain_forks - ours_forks == 6 * 2 and ours_forks == 2, (plain_forks, ours_forks)


@pytest.mark.parametrize("task", [
    {"name": "A failed assert stops the host", "ansible.builtin.assert": {
        "that": "inventory_hostname == 'node-b'", "fail_msg": "not node-b: {{ inventory_hostname }}"}},
    {"name": "A spec not met", "ansible.builtin.validate_argument_spec": {
        "argument_spec": SPEC["argument_specs"]["main"]["options"], "provided_arguments": {"size": "big"}}},
    {"name": "An undefined variable", "ansible.builtin.debug": {"msg": "{{ no_such_variable }}"}},
    {"name": "A broken set_fact", "ansible.builtin.set_fact": {"x": "{{ 1 | no_such_filter }}"}},
])
def test_a_failing_controller_action_fails_as_in_the_worker(tmp_path, task):
    (ours, _, _, ours_recap), (plain, _, _, plain_recap) = _both(tmp_path, [task])
    assert ours.returncode == plain.returncode == 2, ours.stdout + ours.stderr
    assert ours_recap == plain_recap
    fatal = sorted(line for line in ours.stdout.splitlines() if line.startswith("fatal:"))
    assert fatal and fatal == sorted(line for line in plain.stdout.splitlines() if line.startswith("fatal:"))


@pytest.mark.parametrize(("task", "forks"), [
    ({"name": "A loop", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1, 2]}, 2),
    ({"name": "Delegated", "ansible.builtin.debug": {"msg": "x"}, "delegate_to": "node-b"}, 2),
    ({"name": "Retried", "ansible.builtin.set_fact": {"x": 1}, "until": "x is defined", "retries": 1}, 2),
    ({"name": "A module", "ansible.builtin.ping": None}, 2),
])
def test_what_a_worker_must_run_still_forks_one(tmp_path, task, forks):
    (ours, _, ours_forks, _), (plain, _, plain_forks, _) = _both(tmp_path, [task])
    assert ours.returncode == plain.returncode == 0, ours.stdout + ours.stderr
    assert ours_forks == plain_forks == forks


def test_one_hosts_failure_is_not_seen_by_the_next_host_in_the_same_task(tmp_path):
    """The results of controller tasks reach linear once every host of the task is queued, as a
    worker's do: node-a's failed assert does not drop it from node-b's ansible_play_hosts in that task."""
    task = {"name": "Fails on node-a, needs node-a in play on node-b", "ansible.builtin.assert": {
        "that": ["inventory_hostname != 'node-a'", "'node-a' in ansible_play_hosts"]}}
    (ours, _, _, recap), _ = _both(tmp_path, [task])
    assert ours.returncode == 2, ours.stdout
    assert [line.split(":")[0].strip() for line in recap if "failed=1" in line] == ["node-a"], ours.stdout


def _publish(data, register):
    return {"name": f"Publish {register}", "register": register, "gpucluster.cluster.contract": {
        "stage": "runtime", "data": data, "path": "{{ out }}.{{ inventory_hostname }}.d",
        "facts_path": "{{ out }}.{{ inventory_hostname }}.facts"}}


def test_a_controller_first_action_answers_here_when_it_can_and_forks_a_worker_when_it_cannot(tmp_path):
    """contract (CONTROLLER_FIRST_ACTIONS): the first publish of the run needs the node (a worker),
    the same data again is answered from this run's facts in the strategy's process (no fork),
    other data needs the node again. The same registered results as under Ansible's linear."""
    tasks = [
        _publish({"runtime": "horovod"}, "first"),
        _publish({"runtime": "horovod"}, "same"),
        _publish({"runtime": "lightcc"}, "other"),
        {"name": "Write what was registered", "ansible.builtin.copy": {
            "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
            "content": "{{ {'first': first, 'same': same, 'other': other,"
                       " 'local': ansible_local.gpucluster} | to_json }}"}},
    ]
    (ours, got, ours_forks, ours_recap), (plain, want, plain_forks, plain_recap) = _both(tmp_path, tasks)
    assert ours.returncode == plain.returncode == 0, ours.stdout + ours.stderr + plain.stdout
    def same_paths(result):  # each arm writes under its own name; the run key is each run's own
        result = json.loads(json.dumps(result).replace("mitogen_linear.json", "linear.json"))
        result.get("ansible_facts", {}).get("gpucluster_contract_read", {}).pop("run", None)
        return result

    for key in ("first", "same", "other"):
        assert same_paths(got[key]) == same_paths(want[key]), key
    assert [got[k]["on_node"] for k in ("first", "same", "other")] == [True, False, True]
    assert [got[k]["changed"] for k in ("first", "same", "other")] == [True, False, True]
    assert got["local"] == {"runtime": {"runtime": "lightcc"}}
    assert ours_recap == plain_recap
    # first, other and the copy fork on each host; same does not
    assert plain_forks - ours_forks == 2 and ours_forks == 3 * 2, (plain_forks, ours_forks)


def test_includes_run_in_the_strategy_and_include_the_same_tasks_per_host(tmp_path):
    """include_tasks and include_role (with vars, apply, a loop, a per-host file name, a false
    condition) are run by the strategy with Ansible's TaskExecutor, which returns their arguments
    without a connection: each host includes the same tasks with the same variables as under
    linear, with one fork fewer per include and host; the included tasks still fork."""
    for host in ("a", "b"):
        (tmp_path / f"inc-node-{host}.yml").write_text(json.dumps([
            {"name": f"Included for node-{host}",
             "ansible.builtin.set_fact": {f"seen_{host}": "{{ greeting }}-{{ inventory_hostname }}"}}]))
    (tmp_path / "each.yml").write_text(json.dumps([
        {"name": "Per item", "ansible.builtin.set_fact": {"items_seen": "{{ items_seen | default([]) + [each] }}"}}]))
    tasks_dir = tmp_path / "roles" / "r1" / "tasks"
    tasks_dir.mkdir(parents=True)
    (tasks_dir / "main.yml").write_text(json.dumps([
        {"name": "In the role", "ansible.builtin.set_fact": {"roles_seen": "{{ roles_seen | default([]) + [size] }}"}},
        {"name": "A module in the role", "ansible.builtin.command": "true", "changed_when": False}]))
    tasks = [
        {"name": "Include a file per host", "ansible.builtin.include_tasks": "inc-{{ inventory_hostname }}.yml",
         "vars": {"greeting": "hi"}},
        {"name": "Include a file per item", "ansible.builtin.include_tasks": {"file": "each.yml"},
         "loop": ["x", "y"], "loop_control": {"loop_var": "each"}},
        {"name": "Include a role per item", "ansible.builtin.include_role": {"name": "r1", "apply": {"tags": ["t"]}},
         "vars": {"size": "{{ item }}"}, "loop": [1, 2]},
        {"name": "An include skipped by its condition", "ansible.builtin.include_role": {"name": "r1"},
         "vars": {"size": 9}, "when": "flag"},
        {"name": "Write what was registered", "ansible.builtin.copy": {
            "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
            "content": "{{ {'a': seen_a | default(none), 'b': seen_b | default(none), 'items': items_seen,"
                       " 'roles': roles_seen} | to_json }}"}},
    ]
    (ours, got, ours_forks, ours_recap), (plain, want, plain_forks, plain_recap) = _both(tmp_path, tasks)
    assert ours.returncode == plain.returncode == 0, ours.stdout + ours.stderr + plain.stdout
    assert got == want == {"a": "hi-node-a", "b": None, "items": ["x", "y"], "roles": [1, 2]}
    assert ours_recap == plain_recap and len(ours_recap) == 2
    # Only the role's command (twice per host) and the copy fork here; linear forks for the three
    # includes, the skipped one and the five set_facts they bring, on each host.
    assert ours_forks == 3 * 2 and plain_forks - ours_forks == (3 + 1 + 5) * 2, (plain_forks, ours_forks)


def test_an_include_that_fails_to_template_fails_as_in_the_worker(tmp_path):
    tasks = [{"name": "Include an undefined file", "ansible.builtin.include_tasks": "{{ no_such_variable }}.yml"}]
    (ours, _, _, ours_recap), (plain, _, _, plain_recap) = _both(tmp_path, tasks)
    assert ours.returncode == plain.returncode == 2, ours.stdout + ours.stderr
    assert ours_recap == plain_recap
    fatal = sorted(line for line in ours.stdout.splitlines() if line.startswith("fatal:"))
    assert fatal and fatal == sorted(line for line in plain.stdout.splitlines() if line.startswith("fatal:"))
