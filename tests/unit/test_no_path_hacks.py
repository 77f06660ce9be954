"""No shipped Python file finds its imports by patching the import path.

Shipped: everything under plugins/, src/, roles/ (molecule scenarios excluded: galaxy.yml's
build_ignore keeps them out of the collection) and playbooks/. Such a file imports the core as
``ansible_collections.gpucluster.cluster.plugins.<kind>.<name>`` (how Ansible and the wheel install
it), never by appending to ``sys.path``, a package's ``__path__`` or a site dir, never as the
pre-collection ``ansible.module_utils.gpucluster`` and never by a plugin file's bare name
(``import gpucluster_core``), which only resolves when a path hack put its folder first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DIRS = ("plugins", "src", "roles", "playbooks")
# A plugin file imported by its bare name only works when its folder was put on sys.path.
BARE_NAMES = frozenset(
    p.stem
    for kind in ("filter", "module_utils", "plugin_utils", "modules")
    for p in (ROOT / "plugins" / kind).glob("*.py")
    if p.stem != "__init__"
)


def shipped_files() -> list[Path]:
    files = []
    for top in SHIPPED_DIRS:
        for p in sorted((ROOT / top).rglob("*.py")):
            rel = p.relative_to(ROOT)
            if top == "roles" and "molecule" in rel.parts:
                continue
            if "__pycache__" in rel.parts:
                continue
            files.append(p)
    return files


def problems(source: str) -> list[str]:
    """Every path hack and forbidden import in ``source``, as 'line N: what'."""
    tree = ast.parse(source)
    sys_names = {"sys"}  # names bound to the sys module (import sys as s)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names |= {a.asname for a in node.names if a.name == "sys" and a.asname}
    found = []

    def bad_module(name: str | None) -> str | None:
        if not name:
            return None
        if name == "ansible.module_utils.gpucluster" or name.startswith("ansible.module_utils.gpucluster."):
            return f"imports {name} (use ansible_collections.gpucluster.cluster.plugins.module_utils.<x>)"
        if name.split(".")[0] in BARE_NAMES:
            return f"imports the plugin file {name!r} by its bare name (use its collection name)"
        return None

    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Attribute):
            if node.attr == "__path__":
                found.append(f"line {line}: uses a module's __path__")
            elif node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id in sys_names:
                found.append(f"line {line}: uses sys.path")
            elif node.attr == "addsitedir":
                found.append(f"line {line}: calls addsitedir")
        elif isinstance(node, ast.ImportFrom):
            if node.module == "sys" and any(a.name in ("path", "meta_path", "path_hooks") for a in node.names):
                found.append(f"line {line}: imports path from sys")
            if node.module == "site" and any(a.name == "addsitedir" for a in node.names):
                found.append(f"line {line}: imports addsitedir")
            if node.level == 0 and (why := bad_module(node.module)):
                found.append(f"line {line}: {why}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if why := bad_module(a.name):
                    found.append(f"line {line}: {why}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.startswith("ansible.module_utils.gpucluster")):
            # importlib.import_module("ansible.module_utils.gpucluster.x") and the like
            found.append(f"line {line}: names {node.value}")
    return found


def test_the_scan_sees_shipped_files():
    rels = {str(p.relative_to(ROOT)) for p in shipped_files()}
    assert "src/gpucluster/cli.py" in rels and "plugins/modules/gpu_facts.py" in rels
    assert any(r.startswith("plugins/filter/") for r in rels)
    assert not any("/molecule/" in r for r in rels)


@pytest.mark.parametrize("source", [
    "import sys\nsys.path.insert(0, '/x')\n",
    "import sys\nsys.path = ['/x']\n",
    "import sys as _s\n_s.path += ['/x']\n",
    "from sys import path\npath.append('/x')\n",
    "import ansible.module_utils as mu\nmu.__path__.append('/x')\n",
    "import site\nsite.addsitedir('/x')\n",
    "from ansible.module_utils.gpucluster.gpu import parse\n",
    "import ansible.module_utils.gpucluster\n",
    "import importlib\nimportlib.import_module('ansible.module_utils.gpucluster.gpu')\n",
    "import gpudirect\n",
    "from nccl import render_nccl_env\n",
])
def test_each_kind_of_hack_is_found(source):
    assert problems(source), source


def test_collection_imports_pass():
    src = (
        "from __future__ import annotations\nimport os\nimport sys\nprint(sys.argv)\n"
        "from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu import x\n"
        "from .sibling import y\nimport ansible.module_utils.basic\n"
    )
    assert problems(src) == []


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_file_has_no_path_hack(path):
    found = problems(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}:\n  " + "\n  ".join(found)
