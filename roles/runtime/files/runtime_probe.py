#!/usr/bin/env python3
"""What the training container has for the runtime switch (the runtime role, playbooks/runtime.yml).

Prints one JSON object:

    {"python": "3.11.2",
     "pip": true,                                   # python3 -m pip is importable
     "packages": {"light-horovod": "0.2.1" | null,  # installed distributions (importlib.metadata)
                  "horovod": null},
     "nvcc": "/usr/local/cuda/bin/nvcc" | null,     # CUDA compiler a Horovod GPU build needs
     "nccl": "libnccl.so.2" | null}                 # NCCL library (ldconfig cache or NCCL_HOME)

Standard library only, so it runs in any image with a python3.
"""

import ctypes.util
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import sys

DISTRIBUTIONS = ("light-horovod", "horovod")


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for path in ("/usr/local/cuda/bin/nvcc", os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin/nvcc")):
        if os.access(path, os.X_OK):
            return path
    return None


def nccl():
    found = ctypes.util.find_library("nccl")
    if found:
        return found
    for home in (os.environ.get("HOROVOD_NCCL_HOME"), os.environ.get("NCCL_HOME"), "/usr/local/nccl"):
        if home:
            hits = sorted(glob.glob(os.path.join(home, "lib*", "libnccl.so*")))
            if hits:
                return hits[0]
    return None


def main():
    result = {
        "python": platform.python_version(),
        "pip": importlib.util.find_spec("pip") is not None,
        "packages": {name: version(name) for name in DISTRIBUTIONS},
        "nvcc": nvcc(),
        "nccl": nccl(),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
