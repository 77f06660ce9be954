#!/usr/bin/env bash
# Create .venv: gpucluster (editable) with the test, aws, tencent and k8s extras, every package at
# the exact version of requirements/constraints.txt (pyproject.toml holds the ranges; regenerate
# the constraints with scripts/lock.sh). Re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.gpucluster-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements/constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -c requirements/constraints.txt -e '.[test,aws,tencent,k8s]'
  touch "$stamp"
fi
