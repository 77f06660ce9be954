#!/usr/bin/env python3
"""A minimal, valid wheel (PEP 427) of a distribution whose ``horovod`` module says it is a stand-in.

light-horovod is the vendor's package (not on PyPI) and a GPU build of horovod needs CUDA and NCCL,
so the runtime role's tests install two wheels made here, named light-horovod and horovod. The pip
steps on them are the real ones. Used by this molecule scenario and tests/integration/test_benchmark.py.

    stand_in_wheel.py DEST DIST VERSION   -> prints the wheel's path
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

STAND_IN = "gpucluster test stand-in: the package's name and version only, no Horovod inside"


def stand_in_wheel(dest: Path, dist: str, version: str) -> Path:
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    files = {
        "horovod/__init__.py": f'"""{STAND_IN}"""\n__version__ = "{version}"\nSTAND_IN = True\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nSummary: {STAND_IN}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpucluster-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    out = Path(dest) / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in files.items():
            z.writestr(path, text)
    return out


if __name__ == "__main__":
    print(stand_in_wheel(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
