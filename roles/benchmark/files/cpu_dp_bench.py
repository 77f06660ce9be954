#!/usr/bin/env python3
"""CPU data-parallel training benchmark, run by playbooks/benchmark.yml where there is no GPU.

This is a CPU benchmark, not a GPU one: it stands in for Horovod's
``pytorch_synthetic_benchmark.py`` on a test cluster without GPUs or Horovod, so that the
benchmark path (launch across 1..N nodes, parse, scaling report) runs end to end. It does the
same work per step as data-parallel training:

- every rank holds the same multi-layer perceptron (same seed; float32; ReLU; softmax
  cross-entropy), ``--input`` -> ``--hidden`` x ``--layers`` -> ``--classes``;
- each step: forward and backward pass (numpy) on the rank's own synthetic batch, then ONE
  MPI allreduce (sum) of all gradients packed in one float32 buffer (Horovod's tensor fusion
  does the same), divided by the number of ranks, then an SGD update;
- throughput is measured as Horovod's script does: ``--iters`` timed iterations of
  ``--batches-per-iter`` steps after ``--warmup`` untimed steps; per-rank samples/sec of each
  iteration, mean +- 1.96 x standard deviation; total = ranks x mean.

At the end the ranks compare a checksum of their parameters (they must still be identical:
every rank applied the same averaged gradients) and report the loss of the first and last
step (it falls: the model really learns its batch). Rank 0 prints Horovod-like lines, with
samples/sec and CPU ranks named as such, then one JSON object on the last line. Needs only
mpi4py and numpy. Set OMP_NUM_THREADS/OPENBLAS_NUM_THREADS=1 so ranks do not oversubscribe.
"""

import argparse
import json
import socket
import sys
import time

import numpy as np
from mpi4py import MPI


def build(sizes, seed):
    """Parameters in one flat float32 buffer, and (weight, bias) views into it per layer."""
    shapes = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        shapes += [(fan_in, fan_out), (fan_out,)]
    total = sum(int(np.prod(s)) for s in shapes)
    flat = np.empty(total, dtype=np.float32)
    views, offset = [], 0
    rng = np.random.default_rng(seed)
    for shape in shapes:
        n = int(np.prod(shape))
        view = flat[offset:offset + n].reshape(shape)
        if len(shape) == 2:  # He initialisation for ReLU layers
            view[...] = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / shape[0]))
        else:
            view[...] = 0.0
        views.append(view)
        offset += n
    return flat, [(views[i], views[i + 1]) for i in range(0, len(views), 2)]


def grad_views(flat_grad, layers):
    out, offset = [], 0
    for w, b in layers:
        gw = flat_grad[offset:offset + w.size].reshape(w.shape)
        offset += w.size
        gb = flat_grad[offset:offset + b.size].reshape(b.shape)
        offset += b.size
        out.append((gw, gb))
    return out


def step(x, y, layers, grads, flat_grad, flat_params, comm, lr):
    """One data-parallel step; returns this rank's loss before the update."""
    acts, pre = [x], []
    h = x
    for i, (w, b) in enumerate(layers):
        z = h @ w + b
        pre.append(z)
        h = np.maximum(z, 0) if i < len(layers) - 1 else z
        acts.append(h)
    logits = acts[-1]
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    batch = x.shape[0]
    loss = float(-np.log(p[np.arange(batch), y] + 1e-12).mean())
    d = p
    d[np.arange(batch), y] -= 1.0
    d /= batch
    for i in range(len(layers) - 1, -1, -1):
        w, _ = layers[i]
        gw, gb = grads[i]
        np.matmul(acts[i].T, d, out=gw)
        gb[...] = d.sum(axis=0)
        if i:
            d = (d @ w.T) * (pre[i - 1] > 0)
    comm.Allreduce(MPI.IN_PLACE, flat_grad, op=MPI.SUM)
    flat_params -= np.float32(lr / comm.Get_size()) * flat_grad
    return loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2, help="hidden layers")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps")
    ap.add_argument("--iters", type=int, default=5, help="timed iterations")
    ap.add_argument("--batches-per-iter", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args(argv)

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    hosts = comm.gather(socket.gethostname(), root=0)
    sizes = [args.input] + [args.hidden] * args.layers + [args.classes]
    flat_params, layers = build(sizes, seed=1234)
    flat_grad = np.zeros_like(flat_params)
    grads = grad_views(flat_grad, layers)
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((args.batch_size, args.input), dtype=np.float32)
    y = rng.integers(0, args.classes, size=args.batch_size)
    model = "mlp-" + "-".join(str(s) for s in sizes)

    def log(text):
        if rank == 0:
            print(text, flush=True)

    log(f"Model: {model} (numpy float32, {flat_params.size} parameters)")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of CPU ranks: {n} (CPU data-parallel benchmark, not a GPU result)")
    log("Running warmup...")
    losses = [step(x, y, layers, grads, flat_grad, flat_params, comm, args.lr) for _ in range(args.warmup)]
    log("Running benchmark...")
    rates = []
    for i in range(args.iters):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.batches_per_iter):
            losses.append(step(x, y, layers, grads, flat_grad, flat_params, comm, args.lr))
        rate = args.batch_size * args.batches_per_iter / (time.perf_counter() - t0)
        rates.append(rate)
        log(f"Iter #{i}: {rate:.1f} samples/sec per CPU rank")
    mean, conf = float(np.mean(rates)), float(1.96 * np.std(rates))
    checksum = float(np.sum(flat_params, dtype=np.float64))
    sums = comm.allgather(checksum)
    in_sync = max(sums) - min(sums) <= 1e-5 * max(1.0, abs(checksum))
    loss_first = comm.allreduce(losses[0], op=MPI.SUM) / n
    loss_last = comm.allreduce(losses[-1], op=MPI.SUM) / n
    log(f"Samples/sec per CPU rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total samples/sec on {n} CPU rank(s): {n * mean:.1f} +-{n * conf:.1f}")
    if rank == 0:
        json.dump({
            "benchmark": "cpu-data-parallel-mlp", "device": "cpu", "unit": "samples/sec",
            "ranks": n, "hosts": hosts, "model": model, "batch_size": args.batch_size,
            "parameters": int(flat_params.size), "gradient_bytes": int(flat_grad.nbytes),
            "iterations": rates, "per_rank": mean, "per_rank_ci": conf,
            "total": n * mean, "total_ci": n * conf,
            "loss_first": loss_first, "loss_last": loss_last, "params_in_sync": bool(in_sync),
        }, sys.stdout)
        sys.stdout.write("\n")
    return 0 if in_sync else 1


if __name__ == "__main__":
    sys.exit(main())
