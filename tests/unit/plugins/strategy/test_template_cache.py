"""The strategy's cache of compiled Jinja code (plugins/strategy/mitogen_linear.py,
cache_template_compiles): ansible-core 2.19 compiles a template or conditional again each time it
is templated, once per task and host. With the cache, the same source compiles once, and every
result is the one Ansible gives without it: templates and expressions through new Templars (new
environments), backslash escaping on and off, a template that sets its own delimiters, a syntax
error. Each check runs in a fresh interpreter with the plugin loader set up as ansible-playbook
does."""

from __future__ import annotations

import json
import subprocess

from tests.unit.plugins.strategy.harness import run_playbook
from tests.unit.plugins.strategy.test_mitogen_linear import LOAD_STRATEGY, PY, ROOT

PROBE = LOAD_STRATEGY + r"""
import jinja2.environment
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

generated = []
real_generate = jinja2.environment.Environment._generate
def counting(self, *args, **kwargs):
    generated.append(1)
    return real_generate(self, *args, **kwargs)
jinja2.environment.Environment._generate = counting

VARS = {"x": 1, "name": "node-a", "names": ["b", "a"]}
CASES = [
    ("template", "{{ name }}-{{ x + 41 }}", {}),
    ("template", "{{ names | sort | join(',') }}", {}),
    ("template", "{{ 'a1b' | regex_replace('(\\d)', '<\\1>') }}", {"escape_backslashes": True}),
    ("template", "{{ 'a1b' | regex_replace('(\\d)', '<\\1>') }}", {"escape_backslashes": False}),
    ("template", "#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ name ]] {{ name }}", {}),
    ("template", "[[ name ]] {{ name }}", {}),
    ("template", "{{ name ", {}),
    ("expression", "x == 1 and name is match('node-')", {}),
    ("expression", "names | length", {}),
    ("expression", "'a1b' | regex_replace('(\\d)', '<\\1>')", {"escape_backslashes": True}),
    ("expression", "'a1b' | regex_replace('(\\d)', '<\\1>')", {"escape_backslashes": False}),
    ("expression", "x ==", {}),
]

def render(kind, source, kwargs):
    templar = Templar(loader=DataLoader(), variables=VARS)  # a new environment each time
    try:
        if kind == "template":
            value = templar.template(trust_as_template(source), **kwargs)
        else:
            value = templar.evaluate_expression(trust_as_template(source), **kwargs)
        return ["ok", str(value)]
    except Exception as exc:
        return ["error", type(exc).__name__]

def round():
    return [render(*case) for case in CASES]

plain = round()
plain_compiles = len(generated)
cache = strategy.cache_template_compiles()
again = strategy.cache_template_compiles()
del generated[:]
first = round()
first_compiles = len(generated)
del generated[:]
second = round()
print(json.dumps({"plain": plain, "first": first, "second": second, "plain_compiles": plain_compiles,
                  "first_compiles": first_compiles, "second_compiles": len(generated),
                  "installed_once": cache is again, "cached": len(cache)}))
"""


def _probe():
    out = subprocess.run([PY, "-c", PROBE, str(ROOT)], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiled_code_is_reused_and_every_result_is_ansibles_own():
    got = _probe()
    assert got["installed_once"], got
    assert got["first"] == got["second"] == got["plain"], got
    plain = got["plain"]
    # The cases mean what they say: escaping changes a template's result (Ansible escapes only
    # inside a template's {{ }}, so an expression's is the same both ways), the delimiters of the
    # header apply to that template only, and the syntax errors are errors.
    assert plain[0] == ["ok", "node-a-42"] and plain[1] == ["ok", "a,b"], plain
    assert plain[2] == ["ok", "a<1>b"] and plain[3] == ["ok", "a<\x01>b"], plain
    assert plain[4] == ["ok", "node-a {{ name }}"] and plain[5] == ["ok", "[[ name ]] node-a"], plain
    assert plain[6][0] == "error" and plain[11][0] == "error", plain
    # Without the cache every round compiles each source again; with it, the second round
    # compiles nothing, and the first only what the cache had not seen.
    assert got["plain_compiles"] >= 9 and got["first_compiles"] <= got["plain_compiles"], got
    assert got["second_compiles"] == 0 and got["cached"] >= 8, got


TASKS = [
    {"name": "Facts from templates, {{ inventory_hostname }}", "ansible.builtin.set_fact": {
        "mine": "{{ inventory_hostname | regex_replace('^node-(.)$', '<\\1>') }}",
        "same": "{{ inventory_hostname | regex_replace('^node-(.)$', '<\\1>') }}"}},
    {"name": "A condition per host", "ansible.builtin.set_fact": {"picked": "{{ mine }}"},
     "when": "inventory_hostname is match('node-a')"},
    {"name": "Write what each host got", "ansible.builtin.copy": {
        "dest": "{{ out }}.{{ inventory_hostname }}", "mode": "0600",
        "content": "{{ {'mine': mine, 'same': same, 'picked': picked | default('none')} | to_json }}"}},
]


def test_a_playbook_gets_the_same_values_per_host_as_under_linear(tmp_path):
    ours, got, _, ours_recap = run_playbook(tmp_path, "mitogen_linear", TASKS)
    plain, want, _, plain_recap = run_playbook(tmp_path, "linear", TASKS)
    assert ours.returncode == plain.returncode == 0, ours.stdout + ours.stderr
    assert got == want == {"mine": "<a>", "same": "<a>", "picked": "<a>"}
    assert ours_recap == plain_recap


# Filters and tests resolved through new Templars (new environments), with and without the shared
# functions: the same results, a second environment asks the plugin loader nothing, an unknown
# filter fails every time, and an environment's own filter comes before the shared one.
PLUGINS_PROBE = LOAD_STRATEGY + r"""
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, test_loader
from ansible.template import Templar, trust_as_template

asked = []
for loader in (filter_loader, test_loader):
    real = loader.get
    def counting(name, *args, _real=real, **kwargs):
        asked.append(name)
        return _real(name, *args, **kwargs)
    loader.get = counting

SOURCES = ["{{ {'a': [1]} | to_json }}", "{{ 'node-a' is match('node-') }}",
           "{{ 'ssh -o StrictHostKeyChecking=no x' | gpucluster.cluster.insecure_ssh_options }}",
           "{{ 1 | no_such_filter }}"]

def render(source, templar=None):
    templar = templar or Templar(loader=DataLoader(), variables={})
    try:
        return ["ok", str(templar.template(trust_as_template(source)))]
    except Exception as exc:
        return ["error", type(exc).__name__]

def round():
    del asked[:]
    return [render(s) for s in SOURCES], list(asked)

plain, plain_asked = round()
shared = strategy.share_template_plugins()
again = strategy.share_template_plugins()
first, first_asked = round()
second, second_asked = round()
own = Templar(loader=DataLoader(), variables={})
own.environment.filters["to_json"] = lambda value: "own"
print(json.dumps({"plain": plain, "first": first, "second": second, "plain_asked": plain_asked,
                  "first_asked": first_asked, "second_asked": second_asked, "installed_once": shared is again,
                  "own": render(SOURCES[0], own), "other": render(SOURCES[0])}))
"""


def test_filters_and_tests_are_resolved_once_for_every_environment():
    out = subprocess.run([PY, "-c", PLUGINS_PROBE, str(ROOT)], capture_output=True, text=True, check=True, cwd=ROOT)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["installed_once"], got
    assert got["first"] == got["second"] == got["plain"], got
    assert got["plain"][0] == ["ok", '{"a": [1]}'] and got["plain"][1] == ["ok", "True"], got
    assert got["plain"][2][0] == "ok" and got["plain"][3][0] == "error", got
    # Without sharing, every environment asks the loader for each name; with it, only the name
    # it cannot resolve is asked again.
    assert {"to_json", "match", "gpucluster.cluster.insecure_ssh_options"} <= set(got["plain_asked"]), got
    assert got["second_asked"] == ["no_such_filter"], got
    assert got["own"] == ["ok", "own"] and got["other"] == got["plain"][0], got
