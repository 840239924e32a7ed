"""What the distributed scheduler costs per task here: graphs shaped like one solver pass, with no-op tasks.

    python benchmarks/scheduler.py [--workers 2] [--tasks 100 1000 5000 20000]

Each graph is ``tasks`` independent no-op "block" tasks summed by a tree of
8-way additions (the shape of a pass: block products, then per-row-block
tree sums), run on a LocalCluster as dkpca starts it (TLS, one thread per
worker).  The tasks do nothing, so the time is the scheduler's, the
workers' task handling and the messages between them.  A groundwork for
issue 17 (the block sizes ``plan`` should pick for a cluster).
"""

from __future__ import annotations

import argparse
import time

import dask

from dkpca.cluster import connected
from dkpca.execution import compute


def noop(i: int) -> int:
    return i


def add(*parts: int) -> int:
    return 0


def pass_shaped_graph(n: int, fan_in: int = 8) -> tuple[object, int]:
    """``n`` no-op tasks and their tree sum; (the final task, the number of tasks)."""
    tasks = [dask.delayed(noop, pure=False)(i) for i in range(n)]
    count = n
    while len(tasks) > 1:
        tasks = [dask.delayed(add, pure=False)(*tasks[i:i + fan_in]) for i in range(0, len(tasks), fan_in)]
        count += len(tasks)
    return tasks[0], count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tasks", type=int, nargs="+", default=[100, 1000, 5000, 20000])
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    with connected({"dkpca": {"cluster": {"local": {"n_workers": a.workers}}}}):
        for n in a.tasks:
            best, count = float("inf"), 0
            for _ in range(a.repeats):
                final, count = pass_shaped_graph(n)
                t = time.perf_counter()
                compute(final)
                best = min(best, time.perf_counter() - t)
            print(f"{n} block tasks ({count} with the tree sums): best {best:.2f} s = "
                  f"{best / count * 1e3:.2f} ms per task", flush=True)


if __name__ == "__main__":
    main()
