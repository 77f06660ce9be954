"""The test runner's grouping, as scripts/test.sh uses it, really keeps a group on one worker.

scripts/test.sh runs everything in one ``pytest -n 2 --dist loadgroup``; the sandbox tests share
one cluster and must run on one worker in file order (tests/integration/conftest.py marks them
``xdist_group("sandbox")``). pytest 9.2 with pytest-xdist 3.8 silently stopped honouring the
mark (pytest-dev/pytest-xdist#1386) and CI tore the sandbox down in the middle of the benchmark.
This runs the same mechanism - a conftest that adds the mark at collection - in a throwaway
project with the installed pytest and xdist, and fails when the group is split.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

CONFTEST = textwrap.dedent('''
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(config, items):
        for item in items:
            if "grouped" in item.nodeid:
                item.add_marker(pytest.mark.xdist_group("sandbox"))
''')

TESTS = textwrap.dedent('''
    import time
    import pytest

    @pytest.mark.parametrize("i", range(4))
    def test_it(i):
        time.sleep(0.05)
''')


def test_loadgroup_keeps_the_marked_tests_on_one_worker(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("test_grouped_a.py", "test_grouped_b.py", "test_free.py"):
        (tmp_path / name).write_text(TESTS)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2", "--dist", "loadgroup",
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", r.stdout, re.M)
    assert len(ran) == 12, r.stdout[-3000:]
    grouped_workers = {worker for worker, nodeid in ran if "grouped" in nodeid}
    assert len(grouped_workers) == 1, (
        "the xdist_group('sandbox') tests ran on several workers: --dist loadgroup ignores the mark "
        f"with this pytest/pytest-xdist pair:\n{r.stdout[-3000:]}"
    )
    assert all(nodeid.endswith("@sandbox") for _, nodeid in ran if "grouped" in nodeid), r.stdout[-3000:]
