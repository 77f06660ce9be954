"""images/Dockerfile.cuda against the validate role: the image builds nccl-tests at a pinned
tag, with MPI, where validate's NCCL proof runs it (validate_nccl_tests_bin). The CUDA image is
not built here (no nvcr.io), so this static check is what ties the two owners together."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "images" / "Dockerfile.cuda").read_text()


def _args(text):
    return dict(re.findall(r"^ARG\s+([A-Z_]+)=(\S+)\s*$", text, re.M))


def _validate_vars():
    """The validate role's settings (its defaults)."""
    return yaml.safe_load((ROOT / "roles" / "validate" / "defaults" / "main.yml").read_text())


def test_nccl_tests_pinned_to_a_release_tag():
    args = _args(DOCKERFILE)
    assert re.fullmatch(r"v\d+\.\d+\.\d+", args["NCCL_TESTS_VERSION"]), args.get("NCCL_TESTS_VERSION")
    clone = re.search(r"git clone --depth 1 --branch \"\$\{NCCL_TESTS_VERSION\}\" "
                      r"https://github\.com/NVIDIA/nccl-tests\.git \"\$\{NCCL_TESTS_DIR\}\"", DOCKERFILE)
    assert clone, "Dockerfile.cuda must clone NVIDIA/nccl-tests at ${NCCL_TESTS_VERSION} into ${NCCL_TESTS_DIR}"


def test_nccl_tests_built_with_mpi_where_validate_runs_it():
    args = _args(DOCKERFILE)
    assert re.search(r'make -C "\$\{NCCL_TESTS_DIR\}" [^\n]*\bMPI=1 MPI_HOME="\$\{MPI_HOME\}"', DOCKERFILE)
    # nccl-tests' Makefile writes the binaries to BUILDDIR ?= ../build from src/: <dir>/build.
    assert "BUILDDIR" not in DOCKERFILE
    assert _validate_vars()["validate_nccl_tests_bin"] == f"{args['NCCL_TESTS_DIR']}/build/all_reduce_perf"
    assert 'test -x "${NCCL_TESTS_DIR}/build/all_reduce_perf"' in DOCKERFILE
