"""The strategy's plugin preload (plugins/strategy/mitogen_linear.py): the collection's filter,
test and action plugins are imported in the controller process, under the names Ansible's plugin
loader gives them, so a forked worker finds them in sys.modules instead of compiling them again.
Each check runs in a fresh interpreter with the plugin loader set up as ansible-playbook does."""

from __future__ import annotations

import json
import subprocess
import textwrap

from tests.conftest import ROOT

PY = str(ROOT / ".venv/bin/python")

# A probe: optionally preload, then forbid any new load of a file of this collection and resolve
# one filter, one test-free filter file and the action plugin through the loaders.
# Both probes start alike: the plugin loader set up as ansible-playbook does, then the strategy
# file loaded under test.
LOAD_STRATEGY = textwrap.dedent("""
    import importlib.util, json, pathlib, sys
    root = pathlib.Path(sys.argv[1])
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([str(root / "collections")])
    spec = importlib.util.spec_from_file_location("strategy_under_test", root / "plugins/strategy/mitogen_linear.py")
    strategy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(strategy)
""")

PROBE = LOAD_STRATEGY + textwrap.dedent("""
    from ansible.plugins.loader import action_loader, filter_loader
    names = strategy.preload_plugins() if sys.argv[2] == "preload" else []
    loaded_again = []
    real = importlib.util.spec_from_file_location
    def watch(name, *args, **kwargs):
        if str(name).startswith("ansible_collections.gpucluster.cluster."):
            loaded_again.append(str(name))
        return real(name, *args, **kwargs)
    importlib.util.spec_from_file_location = watch
    found = [filter_loader.get("gpucluster.cluster.hugepages_plan") is not None,
             filter_loader.get("gpucluster.cluster.gpucluster_node_plan") is not None,
             action_loader.has_plugin("gpucluster.cluster.contract")]
    print(json.dumps({"names": names, "loaded_again": loaded_again, "found": found}))
""")


def _probe(mode):
    out = subprocess.run([PY, "-c", PROBE, str(ROOT), mode], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expected_names():
    return sorted(f"ansible_collections.gpucluster.cluster.plugins.{kind}.{p.stem}"
                  for kind in ("filter", "test", "action")
                  for p in (ROOT / "plugins" / kind).glob("*.py") if not p.name.startswith("_"))


def test_preload_imports_every_filter_test_and_action_plugin_file():
    got = _probe("preload")
    assert sorted(got["names"]) == _expected_names()
    assert "ansible_collections.gpucluster.cluster.plugins.filter.hugepages" in got["names"]
    assert "ansible_collections.gpucluster.cluster.plugins.action.contract" in got["names"]


def test_after_the_preload_the_loaders_load_no_file_of_the_collection_again():
    got = _probe("preload")
    assert got["found"] == [True, True, True]
    assert got["loaded_again"] == []


def test_without_it_the_loaders_compile_the_files_again():
    # The other arm: what every forked worker does when the controller did not preload.
    got = _probe("none")
    assert got["found"][:2] == [True, True]
    assert "ansible_collections.gpucluster.cluster.plugins.filter.hugepages" in got["loaded_again"]


def test_a_plugin_file_that_fails_to_import_is_left_to_the_worker(tmp_path):
    # Not under the collection's name, so nothing imports: nothing listed, nothing raised.
    (tmp_path / "filter").mkdir()
    (tmp_path / "filter" / "broken.py").write_text("raise RuntimeError('broken at import')\n")
    code = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("s", {str(ROOT / 'plugins/strategy/mitogen_linear.py')!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        import pathlib
        print(m.preload_plugins(pathlib.Path({str(tmp_path)!r}), "nobody.nothing"))
    """)
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


COLLECTIONS_PROBE = LOAD_STRATEGY + textwrap.dedent("""
    import ansible.collections.list as cl
    import ansible_mitogen.planner as planner

    class Invocation:
        def __init__(self):
            self._extra_sys_paths = set()

    before = Invocation()
    planner._load_collections(before)          # mitogen's own: a walk over the collections
    dirs = strategy.cache_collection_dirs()
    walks = []
    real = cl.list_collection_dirs
    cl.list_collection_dirs = lambda *a, **k: walks.append(1) or real(*a, **k)
    again = strategy.cache_collection_dirs()   # the next play's strategy: the same list, no walk
    after = [Invocation(), Invocation()]
    for inv in after:
        planner._load_collections(inv)         # the cached list, no walk
    print(json.dumps({"same": [sorted(inv._extra_sys_paths) == sorted(before._extra_sys_paths) for inv in after],
                      "walks": len(walks), "dirs": len(dirs), "again": again is dirs,
                      "ours": any(d.endswith(b"gpucluster/cluster") for d in dirs)}))
""")


def test_mitogen_planner_reuses_one_listing_of_the_collections():
    out = subprocess.run([PY, "-c", COLLECTIONS_PROBE, str(ROOT)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # The same sys.path entries as mitogen's walk, from the one listing made before the workers fork.
    assert got == {"same": [True, True], "walks": 0, "dirs": got["dirs"], "again": True, "ours": True}
    assert got["dirs"] > 1


# mitogen's module scan for real ansible modules, once with the builtin compile and once with the
# strategy's memo: the same module_utils found, and no source compiled twice with the memo.
SCAN_PROBE = LOAD_STRATEGY + textwrap.dedent("""
    import builtins, collections
    import ansible.executor.module_common as mc
    import ansible.modules
    import ansible_mitogen.module_finder as finder
    from ansible.plugins.loader import module_utils_loader
    search = tuple(module_utils_loader._get_paths(subdirs=False)) + (mc._MODULE_UTILS_PATH,)
    mods = pathlib.Path(ansible.modules.__file__).parent
    names = ["file", "stat", "apt", "systemd_service", "command"]
    def scan_all():
        return [finder.scan("ansible_module_" + n, str(mods / (n + ".py")), search) for n in names]
    compiled = collections.Counter()
    real = builtins.compile
    def counting(source, filename, mode, *args, **kwargs):
        compiled[(filename, hash(source))] += 1
        return real(source, filename, mode, *args, **kwargs)
    builtins.compile = counting
    plain = scan_all()
    plain_compiles = sum(compiled.values())
    compiled.clear()
    cache = strategy.memoize_scan_compile()
    again = strategy.memoize_scan_compile()
    memo = scan_all() + scan_all()
    print(json.dumps({"same": memo == plain + plain, "installed_once": cache is again,
                      "plain": plain_compiles, "memo": sum(compiled.values()), "twice": max(compiled.values()),
                      "utils": sum(len(r) for r in plain)}))
""")


def test_mitogen_module_scan_compiles_each_file_once():
    out = subprocess.run([PY, "-c", SCAN_PROBE, str(ROOT)], capture_output=True, text=True, check=True, cwd=ROOT)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["same"] and got["installed_once"], got
    # Without the memo each module compiles the module_utils it shares with the others again.
    assert got["utils"] > 20 and got["plain"] > got["utils"], got
    # With it, two rounds over the five modules compile each source once.
    assert got["twice"] == 1 and got["memo"] < got["plain"], got
