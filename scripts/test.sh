#!/usr/bin/env bash
# All tests, as CI runs them (.ci/run calls this): lint, unit tests, every role's molecule
# scenario, and the main job end to end on the local 3-node test cluster.
#
#   scripts/test.sh            # everything (needs root or a Docker engine; ~40 min on 2 cores)
#   scripts/test.sh unit       # lint + unit tests only (seconds, no Docker)
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

if [ "$what" = all ]; then
  scripts/host-prereqs.sh
fi
scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== lint"
yamllint --strict .
ansible-lint --offline -q
ruff check .

echo "== tests"
if [ "$what" = unit ]; then
  exec pytest -q tests/unit
fi
# One pytest run, so one summary line counts everything. Two workers (pytest-xdist): the
# integration tests stay together, in this order, on one worker (their sandbox; teardown last),
# while the other takes the molecule scenarios (their own apt cache and network) and the unit
# tests. Not three: a converge keeps both cores ~90% busy (vmstat), so a third worker would
# only stretch the sandbox worker, the run's longest path.
exec pytest -v -n "${GPUCLUSTER_TEST_WORKERS:-2}" --dist loadgroup --durations=40 tests/unit tests/molecule \
  tests/integration/test_packaging.py \
  tests/integration/test_check_mode.py tests/integration/test_sandbox.py tests/integration/test_health.py tests/integration/test_membership.py \
  tests/integration/test_benchmark.py tests/integration/test_teardown.py
