"""The GPU component as a whole: fixture coverage, Python 3.8, the gpu.py index."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import (
    gpu,
    gpu_driver,
    gpu_fabric,
    gpu_kernel,
    gpu_pci,
    gpu_smi,
    gpu_topology,
)

from tests.conftest import FIXTURES, ROOT
from tests.unit.plugins.module_utils.gpu_cases import (
    C02,
    C04_M,
    COVERED,
    N21_JOURNAL,
    N21_START,
    N24,
    SMI_Q_DIR,
)

# --------------------------------------------------------------------------------------------
# Fixture coverage and Python 3.8 compatibility
# --------------------------------------------------------------------------------------------


def test_every_case_is_covered():
    ids = {p.name.split("_")[0] for kind in ("nvidia-smi", "nvidia-smi-topo")
           for p in (FIXTURES / kind).glob("*.md")}
    assert ids == COVERED


@pytest.mark.parametrize("name", ["gpu.py", "gpu_pci.py", "gpu_smi.py", "gpu_topology.py",
                                  "gpu_driver.py", "gpu_kernel.py", "gpu_fabric.py", "rdma.py",
                                  "peermem.py", "parsing.py", "facts.py"])
def test_module_utils_parse_as_python_38(name):
    source = (ROOT / "plugins/module_utils" / name).read_text()
    ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source


def _python38():
    """A Python 3.8 interpreter that really runs (a pyenv shim may not), or None."""
    candidates = sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))
    candidates += [c for c in [shutil.which("python3.8")] if c]
    for candidate in candidates:
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 8)":
            return candidate
    return None


PY38 = _python38()


@pytest.mark.skipif(PY38 is None, reason="no python3.8 interpreter on this machine")
def test_parsers_run_on_python_38():
    """The managed node may only have Python 3.8: run the parsers there on the fixtures."""
    script = f"""
import sys
sys.path.insert(0, {str(ROOT / "collections")!r})  # the checkout as the collection, no ansible needed
from ansible_collections.gpucluster.cluster.plugins.module_utils import gpu, gpu_kernel, rdma, peermem
F = {str(FIXTURES)!r} + "/"
topo = gpu.parse_topo_matrix(open(F + {C02!r}).read())
assert gpu.gpu_nic_map(topo)[1]["nic"] == "mlx5_1"
assert gpu.pick_gpu_subset(topo, 4) == [0, 1, 2, 3]
assert gpu.parse_topo_matrix(open(F + {C04_M!r}).read())["gpu_count"] == 2
assert gpu_kernel.parse_kernel_log(open(F + {N24!r}).read())["lost_bus_ids"] == ["0000:b3:00.0"]
fm = gpu.parse_fabricmanager(open(F + {N21_START!r}).read() + open(F + {N21_JOURNAL!r}).read())
assert gpu.fabricmanager_state(fm, [])["class"] == "FABRIC_MANAGER_NOT_APPLICABLE"
q = gpu.parse_smi_q(open({str(SMI_Q_DIR / "r535_h100_2gpu.txt")!r}).read())
assert q["complete"] and q["gpus"][1]["remapped_rows"]["failure"] is True
ports = rdma.parse_ibstatus(open(F + "rdma/C06_ibstatus_roce_8x100g_ethernet_link_layer.txt").read())
assert len(ports) == 8
assert peermem.peer_memory_module("535.104.05")["module"] == "nvidia_peermem"
print("ok", sys.version_info[:2])
"""
    out = subprocess.run([PY38, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "ok (3, 8)" in out.stdout



def test_gpu_index_reexports_the_parts():
    parts = (gpu_driver, gpu_fabric, gpu_kernel, gpu_pci, gpu_smi, gpu_topology)
    public = [n for n in dir(gpu) if not n.startswith("_") and n != "annotations"]
    assert len(public) > 25
    for name in public:
        owners = [p for p in parts if getattr(p, name, None) is getattr(gpu, name)]
        assert owners, f"gpu.{name} is not one of the parts' objects"
    # gpu.py defines nothing of its own: only imports
    tree = ast.parse((ROOT / "plugins/module_utils/gpu.py").read_text())
    assert all(isinstance(n, (ast.ImportFrom, ast.Expr)) for n in tree.body)
