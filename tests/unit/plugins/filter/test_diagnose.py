"""plugins/filter/diagnose.py: failure diagnosis filters."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import fixture_text
from tests.unit.plugins.filter.filters import all_filters

FILTERS = all_filters()
GiB = 1024**3


def test_diagnosis_filters():
    d = FILTERS["diagnose_failure"](
        fixture_text("nccl-logs/E18_mpirun_btl_tcp_connect_docker0_refused.1-mpirun-error-line.txt")
    )
    assert d["kind"] == "mpi_tcp_wrong_interface"
    assert FILTERS["diagnose_failure"](fixture_text("nccl-logs/E16_nccl_info_containers_ib_4hca.txt")) is None
    ulimit = fixture_text("mpi-containers/C36_memlock_ulimit_64k_ibv_create_cq_enomem.1-ulimit-a.txt")
    assert FILTERS["memlock_check"](ulimit)["kind"] == "rdma_memlock"
    assert FILTERS["parse_ulimit_a"](ulimit)["memlock"] == 64
    assert (
        FILTERS["nccl_transport_summary"](fixture_text("nccl-logs/E14_nccl_info_roce_ib_gdr_disabled.txt"))[
            "gdr"
        ]
        is False
    )
    with pytest.raises(AnsibleFilterError, match="ulimit -a"):
        FILTERS["parse_ulimit_a"]("nothing")
