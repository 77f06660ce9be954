"""The strategy's controller-side skip (plugins/strategy/mitogen_linear.py, controller_skip): a
task whose condition is false for a host gets, without a worker, the result a worker gives it.
Each playbook runs for real on this machine (connection local) under the strategy and under
Ansible's own linear strategy, in an interpreter that counts the workers forked; what the tasks
registered, the recap and the errors must be the same, with fewer forks only where a task was
skipped by its condition."""

from __future__ import annotations

import pytest

from tests.unit.plugins.strategy.harness import run_playbook as _run

TASKS = [
    {"name": "Skipped by a false variable", "ansible.builtin.command": "false", "when": "flag",
     "register": "r_flag"},
    {"name": "Skipped by the play context's connection", "ansible.builtin.command": "false",
     "when": "ansible_connection != 'local'", "register": "r_conn"},
    {"name": "Runs where the play context says local", "ansible.builtin.set_fact": {"ran_local": True},
     "when": "ansible_connection == 'local'", "register": "r_local"},
    {"name": "A block", "when": "not flag", "block": [
        {"name": "Skipped by its own condition inside a true block", "ansible.builtin.set_fact": {"x": 1},
         "when": ["flag or none_true", "ansible_check_mode is defined"], "register": "r_block"}]},
    {"name": "Conditions per item", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1, 2],
     "when": "item == 2", "register": "r_loop"},
    {"name": "Skipped include", "ansible.builtin.include_tasks": "missing.yml", "when": "flag"},
    {"name": "Skipped with no_log", "ansible.builtin.command": "false", "when": "flag", "no_log": True,
     "register": "r_nolog"},
    {"name": "Skipped run_once", "ansible.builtin.command": "false", "when": "flag", "run_once": True,
     "register": "r_once"},
    {"name": "Write what was registered", "ansible.builtin.copy": {
        "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
        "content": "{{ {'flag': r_flag, 'conn': r_conn, 'local': r_local, 'block': r_block, 'loop': r_loop,"
                   " 'nolog': r_nolog, 'once': r_once} | to_json }}"}},
]


def test_a_false_condition_is_skipped_in_the_controller_with_the_workers_result(tmp_path):
    ours, got, ours_forks, ours_recap = _run(tmp_path, "mitogen_linear", TASKS)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    plain, want, plain_forks, plain_recap = _run(tmp_path, "linear", TASKS)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    # Every registered result is the one Ansible's own worker gives, the recap is the same.
    assert got == want
    assert ours_recap == plain_recap and len(ours_recap) == 2
    assert got["flag"] == {"changed": False, "skipped": True, "skip_reason": "Conditional result was False",
                           "false_condition": "flag"}
    assert got["conn"]["false_condition"] == "ansible_connection != 'local'"
    assert got["local"]["ansible_facts"] == {"ran_local": True}
    assert got["block"]["false_condition"] == "flag or none_true"
    assert [i.get("skipped", False) for i in got["loop"]["results"]] == [True, False]
    assert got["nolog"]["skipped"] is True
    # Fewer forks by the skipped task-hosts (flag, conn, block, include, no_log on 2 hosts, run_once
    # on 1) and by the set_fact that ran, on 2 hosts (run_in_controller, test_controller_actions.py).
    assert plain_forks - ours_forks == 5 * 2 + 1 + 2, (plain_forks, ours_forks)


@pytest.mark.parametrize(("when", "no_log", "rc"), [
    ("no_such_variable", False, 2),
    ("flag | no_such_filter", False, 2),
    # A false condition with a no_log that does not template: masked with a warning, as in the worker.
    ("flag", "{{ no_such_variable }}", None),
])
def test_a_condition_that_raises_ends_as_in_the_worker(tmp_path, when, no_log, rc):
    tasks = [{"name": "Broken condition", "ansible.builtin.debug": {"msg": "x"}, "when": when, "no_log": no_log}]
    ours, _, _, ours_recap = _run(tmp_path, "mitogen_linear", tasks)
    plain, _, _, plain_recap = _run(tmp_path, "linear", tasks)
    assert ours.returncode == plain.returncode, ours.stdout + ours.stderr + plain.stdout
    assert rc is None or ours.returncode == rc, ours.stdout
    assert ours_recap == plain_recap and len(ours_recap) == 2
    fatal = sorted(line for line in ours.stdout.splitlines() if line.startswith("fatal:"))
    assert fatal == sorted(line for line in plain.stdout.splitlines() if line.startswith("fatal:"))
    assert len(fatal) == (2 if rc else 0)


def _same_as_linear(tmp_path, tasks, **env):
    """``tasks`` under the strategy and under Ansible's linear (``env`` for both): both succeed with
    the same registered results, recap and skip lines; returns what node-a registered, the forks of
    each and the skip lines."""
    ours, got, ours_forks, ours_recap = _run(tmp_path, "mitogen_linear", tasks, **env)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    plain, want, plain_forks, plain_recap = _run(tmp_path, "linear", tasks, **env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert got == want
    assert ours_recap == plain_recap and len(ours_recap) == 2
    assert _skipping_lines(ours) == _skipping_lines(plain)
    return got, ours_forks, plain_forks, _skipping_lines(ours)


def test_an_empty_loop_is_skipped_in_the_controller_with_the_workers_result(tmp_path):
    """A loop over an empty list gets the worker's "No items in the list" skip without a fork,
    whatever its condition (a worker does not evaluate it then); a loop with items, a loop that is
    no list and a with_* lookup still go to a worker."""
    tasks = [
        {"name": "Empty loop", "ansible.builtin.command": "false", "loop": "{{ [] }}", "register": "r_empty"},
        {"name": "Empty loop of a filtered variable, with a condition that would fail",
         "ansible.builtin.command": "false", "loop": "{{ [1, 2] | select('gt', 5) | list }}",
         "when": "no_such_variable", "register": "r_filtered"},
        {"name": "A loop with items", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1],
         "register": "r_items"},
        {"name": "An empty with_items", "ansible.builtin.debug": {"msg": "{{ item }}"}, "with_items": [],
         "register": "r_with"},
        {"name": "Write what was registered", "ansible.builtin.copy": {
            "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
            "content": "{{ {'empty': r_empty, 'filtered': r_filtered, 'items': r_items, 'with': r_with} | to_json }}"}},
    ]
    got, ours_forks, plain_forks, _ = _same_as_linear(tmp_path, tasks)
    assert got["empty"] == {"changed": False, "skipped": True, "skipped_reason": "No items in the list",
                            "results": []}
    assert got["filtered"] == got["empty"]
    # the two empty loops on 2 hosts; the loop with items, with_items and the copy fork
    assert plain_forks - ours_forks == 2 * 2, (plain_forks, ours_forks)


def test_a_loop_that_is_no_list_fails_in_the_worker_as_before(tmp_path):
    tasks = [{"name": "A loop of a string", "ansible.builtin.debug": {"msg": "x"}, "loop": "{{ 'abc' }}"}]
    ours, _, _, ours_recap = _run(tmp_path, "mitogen_linear", tasks)
    plain, _, _, plain_recap = _run(tmp_path, "linear", tasks)
    assert ours.returncode == plain.returncode == 2, ours.stdout + plain.stdout
    assert ours_recap == plain_recap


def test_a_condition_reads_connection_variables_through_the_play_context_only_where_it_names_one(tmp_path):
    """The play context is applied only for a condition that names a connection variable; one
    that reads such a variable through another variable gets the worker's answer all the same."""
    from ansible_collections.gpucluster.cluster.plugins.strategy.mitogen_linear import reads_connection_variables

    assert reads_connection_variables(["ansible_connection != 'local'"])
    assert reads_connection_variables(["flag", "hostvars[x].ansible_host is defined"])
    assert not reads_connection_variables(["flag", "ansible_facts.os_family == 'Debian'", True])
    assert not reads_connection_variables(["'ansible_connection_x' in group_names"])  # no such variable name
    tasks = [
        {"name": "Through another variable", "ansible.builtin.command": "false",
         "vars": {"is_local": "{{ ansible_connection == 'local' }}"}, "when": "not is_local",
         "register": "r_indirect"},
        {"name": "Runs through another variable", "ansible.builtin.set_fact": {"x": 1},
         "vars": {"is_local": "{{ ansible_connection == 'local' }}"}, "when": "is_local",
         "register": "r_runs"},
        {"name": "Write what was registered", "ansible.builtin.copy": {
            "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
            "content": "{{ {'indirect': r_indirect, 'runs': r_runs} | to_json }}"}},
    ]
    got, _, _, _ = _same_as_linear(tmp_path, tasks)
    assert got["indirect"]["skipped"] is True and got["runs"]["ansible_facts"] == {"x": 1}


def _skipping_lines(proc):
    """The default callback's lines for skipped items and tasks, sorted (the hosts' workers write
    theirs in whichever order they finish)."""
    return sorted(line for line in proc.stdout.splitlines() if line.startswith("skipping:"))


def test_a_loop_whose_condition_is_false_for_every_item_is_skipped_in_the_controller(tmp_path):
    """A looped task whose condition names no loop variable and is false gets, without a fork, the
    worker's result: every item's skipped result (item, loop var, index var, ansible_loop, label)
    and the per-item callbacks. A condition that names the item, reads it through another variable,
    or is true, and a loop that is no list, still go to a worker."""
    tasks = [
        {"name": "Skipped for every item", "ansible.builtin.command": "false", "loop": [1, 2, 3],
         "when": "flag", "register": "r_plain"},
        {"name": "Skipped with loop_control", "ansible.builtin.command": "false",
         "loop": "{{ [{'n': 'a'}, {'n': 'b'}] }}", "when": ["not none_true", "flag"],
         "loop_control": {"loop_var": "nic", "index_var": "i", "extended": True, "label": "{{ nic.n }}"},
         "register": "r_control"},
        {"name": "Skipped with no_log", "ansible.builtin.command": "false", "loop": [1], "when": "flag",
         "no_log": True, "register": "r_nolog"},
        {"name": "Names the item", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1, 2],
         "when": "item == 5", "register": "r_item"},
        {"name": "Reads the item through another variable", "ansible.builtin.debug": {"msg": "x"},
         "vars": {"is_two": "{{ item == 2 }}"}, "loop": [1, 2], "when": "not is_two and flag",
         "register": "r_indirect"},
        {"name": "True for every item", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1],
         "when": "not flag", "register": "r_true"},
        {"name": "Write what was registered", "ansible.builtin.copy": {
            "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
            "content": "{{ {'plain': r_plain, 'control': r_control, 'nolog': r_nolog, 'item': r_item,"
                       " 'indirect': r_indirect, 'true': r_true} | to_json }}"}},
    ]
    got, ours_forks, plain_forks, skipping = _same_as_linear(tmp_path, tasks, ANSIBLE_DISPLAY_SKIPPED_HOSTS="true")
    assert len(skipping) >= 6 * 2
    assert got["plain"]["msg"] == "All items skipped" and [r["item"] for r in got["plain"]["results"]] == [1, 2, 3]
    assert all(r["false_condition"] == "flag" for r in got["plain"]["results"])
    assert [(r["nic"], r["i"], r["_ansible_item_label"] if "_ansible_item_label" in r else r["nic"]["n"])
            for r in got["control"]["results"]] == [({"n": "a"}, 0, "a"), ({"n": "b"}, 1, "b")]
    assert got["control"]["results"][1]["ansible_loop"]["last"] is True
    # the three skipped loops on 2 hosts; names the item, indirect, true and the copy fork
    assert plain_forks - ours_forks == 3 * 2, (plain_forks, ours_forks)


def test_a_skipped_loop_of_no_list_fails_in_the_worker_as_before(tmp_path):
    tasks = [{"name": "A loop of a string", "ansible.builtin.debug": {"msg": "x"}, "loop": "{{ 'abc' }}",
              "when": "flag"}]
    ours, _, _, ours_recap = _run(tmp_path, "mitogen_linear", tasks)
    plain, _, _, plain_recap = _run(tmp_path, "linear", tasks)
    assert ours.returncode == plain.returncode == 2, ours.stdout + plain.stdout
    assert ours_recap == plain_recap
    fatal = sorted(line for line in ours.stdout.splitlines() if line.startswith("fatal:"))
    assert fatal == sorted(line for line in plain.stdout.splitlines() if line.startswith("fatal:")) and fatal
