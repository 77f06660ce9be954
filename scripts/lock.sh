#!/usr/bin/env bash
# Regenerate requirements/constraints.txt: the exact version of every package of the full test
# venv (pyproject.toml's dependencies with the test, aws, tencent and k8s extras), resolved from
# PyPI into a fresh venv. scripts/venv.sh and CI install with it; pyproject.toml keeps the ranges.
#
#   scripts/lock.sh                    # fresh venv under a temp dir, removed afterwards
#   LOCK_VENV=/tmp/v scripts/lock.sh   # or resolve into (and keep) this venv
#
# Then review `git diff requirements/constraints.txt` and run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LOCK_VENV:-}"
if [ -z "$venv" ]; then
  venv="$(mktemp -d)/venv"
  trap 'rm -rf "$(dirname "$venv")"' EXIT
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e '.[test,aws,tencent,k8s]'
out=requirements/constraints.txt
{
  echo "# Exact versions of the full test venv: pyproject.toml + extras test, aws, tencent, k8s, on"
  echo "# Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), resolved from PyPI into a fresh venv."
  echo "# Used by scripts/venv.sh (CI):  pip install -c requirements/constraints.txt -e '.[test,aws,tencent,k8s]'"
  echo "# Regenerate (after changing a range in pyproject.toml):  scripts/lock.sh"
  echo "# (a fresh venv, pip install -e '.[test,aws,tencent,k8s]', pip freeze --exclude-editable)."
  "$venv/bin/python" -m pip freeze --exclude-editable
} > "$out"
echo "wrote $out ($(grep -vc '^#' "$out") packages)"
