#!/usr/bin/env python3
"""MPI allreduce benchmark run inside the training containers by playbooks/validate.yml.

Every rank fills a float32 buffer of each size with (rank + 1) and runs MPI_Allreduce(SUM);
the expected sum is n(n+1)/2 in every element (exact in float32 for n < 2**12). For each
size it times ``iters`` allreduces after ``warmup`` untimed ones and reports the slowest
rank's mean time per allreduce (seconds), as nccl-tests does. Rank 0 prints one JSON
document; the controller turns times into algorithm and bus bandwidth
(``gpucluster.allreduce``). Needs only mpi4py and numpy, so it runs in any training image.
"""

import argparse
import json
import socket
import sys

import numpy as np
from mpi4py import MPI


def sizes(min_bytes, max_bytes, factor):
    s = min_bytes
    while s <= max_bytes:
        yield s
        s *= factor


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", type=int, default=1024)
    ap.add_argument("--max-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-bytes", type=int, default=256 * 1024 * 1024,
                    help="bytes moved per size at most; sets the iteration count (5..100)")
    args = ap.parse_args(argv)

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    hosts = comm.gather(socket.gethostname(), root=0)
    expected = n * (n + 1) / 2.0
    results = []
    for size in sizes(args.min_bytes, args.max_bytes, args.factor):
        count = size // 4
        send = np.full(count, rank + 1, dtype=np.float32)
        recv = np.empty_like(send)
        iters = max(5, min(100, args.budget_bytes // size))
        for _ in range(args.warmup):
            comm.Allreduce(send, recv, op=MPI.SUM)
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(iters):
            comm.Allreduce(send, recv, op=MPI.SUM)
        elapsed = (MPI.Wtime() - t0) / iters
        slowest = comm.allreduce(elapsed, op=MPI.MAX)
        wrong = int(np.count_nonzero(recv != expected))
        wrong_total = comm.allreduce(wrong, op=MPI.SUM)
        results.append({"bytes": size, "count": count, "dtype": "float32", "iters": iters,
                        "time_s": slowest, "wrong_elements": wrong_total})
    if rank == 0:
        json.dump({"ranks": n, "hosts": hosts, "op": "sum", "expected_value": expected,
                   "results": results}, sys.stdout)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
