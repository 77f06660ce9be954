"""roles/benchmark/files/cpu_dp_bench.py: the backward pass is the gradient of the loss (checked
against finite differences), the allreduce averages it, and a run prints the result the
benchmark playbook parses. mpi4py is replaced by a communicator of ``size`` identical ranks
(every rank holds the same batch, so the allreduced sum is ``size`` x the local gradient)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from ansible_collections.gpucluster.cluster.plugins.filter import benchmark as gb

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "benchmark" / "files" / "cpu_dp_bench.py"


class FakeComm:
    def __init__(self, size=1):
        self.size = size
        self.allreduce_calls = 0

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.size

    def gather(self, value, root=0):
        return [value] * self.size

    def allgather(self, value):
        return [value] * self.size

    def Barrier(self):
        return None

    def Allreduce(self, sendbuf, recvbuf, op=None):
        self.allreduce_calls += 1
        recvbuf *= self.size  # IN_PLACE sum over `size` identical ranks

    def allreduce(self, value, op=None):
        return value * self.size


@pytest.fixture
def bench(monkeypatch):
    def load(size=1):
        comm = FakeComm(size)
        mpi = types.SimpleNamespace(COMM_WORLD=comm, IN_PLACE=object(), SUM="sum", MAX="max")
        monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=mpi))
        monkeypatch.setitem(sys.modules, "mpi4py.MPI", mpi)
        spec = importlib.util.spec_from_file_location("cpu_dp_bench", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, comm
    return load


def _loss(module, x, y, layers, grads, flat_grad, flat_params, comm):
    return module.step(x, y, layers, grads, flat_grad, flat_params, comm, lr=0.0)


def test_backward_pass_is_the_gradient_of_the_loss(bench):
    module, comm = bench()
    flat, layers = module.build([5, 4, 4, 3], seed=7)
    grad = np.zeros_like(flat)
    grads = module.grad_views(grad, layers)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5), dtype=np.float32)
    y = rng.integers(0, 3, size=6)
    # Biases start at 0; move them so ReLU kinks are not at the evaluation point.
    for _, b in layers:
        b[...] = rng.standard_normal(b.shape, dtype=np.float32) * 0.1
    _loss(module, x, y, layers, grads, grad, flat, comm)
    analytic = grad.copy()
    # Central differences with a step below the smallest |pre-activation| of this seed, so no
    # ReLU changes side (float32 parameters, float32 loss).
    eps = 1e-3
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + eps
        up = _loss(module, x, y, layers, grads, grad, flat, comm)
        flat[i] = keep - eps
        down = _loss(module, x, y, layers, grads, grad, flat, comm)
        flat[i] = keep
        assert analytic[i] == pytest.approx((up - down) / (2 * eps), abs=2e-3), i


def test_allreduce_averages_over_ranks(bench):
    for size in (1, 3):
        module, comm = bench(size)
        flat, layers = module.build([4, 3, 2], seed=1)
        grad = np.zeros_like(flat)
        grads = module.grad_views(grad, layers)
        x = np.ones((2, 4), dtype=np.float32)
        y = np.array([0, 1])
        before = flat.copy()
        module.step(x, y, layers, grads, grad, flat, comm, lr=0.5)
        # grad holds the sum over ranks; the update uses the mean: the same step at any size.
        np.testing.assert_allclose(before - flat, 0.5 * grad / size, rtol=1e-5, atol=1e-7)
        assert comm.allreduce_calls == 1
        if size == 1:
            one_rank_step = before - flat
        else:
            np.testing.assert_allclose(before - flat, one_rank_step, rtol=1e-5, atol=1e-7)


def test_a_run_prints_the_result_the_playbook_parses(bench, capsys):
    module, _ = bench(2)
    rc = module.main(["--batch-size", "8", "--input", "16", "--hidden", "16", "--warmup", "2", "--iters", "2",
                      "--batches-per-iter", "20"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Number of CPU ranks: 2 (CPU data-parallel benchmark, not a GPU result)" in out
    assert "Total samples/sec on 2 CPU rank(s): " in out
    data = json.loads(out.strip().splitlines()[-1])
    assert data["device"] == "cpu" and data["ranks"] == 2 and data["params_in_sync"]
    assert data["loss_last"] < data["loss_first"]  # it learns its batch
    assert data["total"] == pytest.approx(2 * data["per_rank"])
    step = {"name": "2 nodes", "gpus": 2, "nodes": 2, "hosts": data["hosts"][:1]}
    assert gb.benchmark_result(out, step, "lightcc", "cpu")["throughput"] == data["total"]
