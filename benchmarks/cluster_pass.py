"""One solver pass over a stored K on local threads and on LocalClusters: shares that carry V, or piece tasks.

    python benchmarks/cluster_pass.py                     # n = 16,000, block 2,000; 2 threads; 9 and 16 workers
    python benchmarks/cluster_pass.py --n 40000 --block 4000 --workers 16
    python benchmarks/cluster_pass.py --n 4000 --block 500 --workers 9 --passes 2    # a quick check

Fits clustered data once (``_common.clustered``: d = 50, rbf gamma = 1/50, float32
K stored at ``--block``), then times ``StoredKernelOperator.raw_matmat`` of
an n x 20 float64 block -- one pass, as a solver's -- ``--passes`` times
(the first is a warm-up, the median of the rest is shown): on ``--threads``
local threads, then on a LocalCluster of each ``--workers`` count of
single-thread worker processes, three times: as dkpca runs it (the shares carry
their pieces of V while ``dkpca.linalg.carried_pass`` allows, each share's
blocks a stretch of a Hilbert curve: ``dkpca.execution.gathered``), with the
shares' blocks where balancing alone puts them (same loads, more row blocks
a share: more of V carried, more partial sums returned), and with
``INLINE_PASS_BYTES`` at 0 (beyond ``FAN_IN`` shares: piece tasks and tree
sums).  Every product is checked against the threads' to 1e-10 relative.
On a machine with fewer cores than workers the processes share the cores:
compare the two strategies with each other, not with the threads.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import bench_workdir, clustered, machine

import dkpca
from dkpca.execution import assign
from dkpca.linalg import grid, touched_rows
from dkpca.operator import StoredKernelOperator
from dkpca.storage import FitStore, GramStore

WIDTH = 20


def passes(op: StoredKernelOperator, V: np.ndarray, count: int, ref: np.ndarray | None) -> tuple[float, np.ndarray]:
    """The median seconds of ``count - 1`` passes after a first one, and the product."""
    seconds, out = [], None
    for _ in range(count):
        t = time.perf_counter()
        out = op.raw_matmat(V)
        seconds.append(time.perf_counter() - t)
    if ref is not None:
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    return float(np.median(seconds[1:] or seconds)), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=16_000)
    ap.add_argument("--block", type=int, default=2_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, nargs="+", default=[9, 16])
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()

    import dask
    from distributed import Client, LocalCluster

    work = bench_workdir(a.workdir, "dkpca-cluster-pass-")
    X = clustered(a.n, 50, seed=0)
    dkpca.fit(X, store=work / "s", n_components=10, gamma=1 / 50, chunk_size=a.block, gram="store")
    op = StoredKernelOperator(GramStore(FitStore.at(work / "s")).open())
    V = np.random.default_rng(0).standard_normal((a.n, WIDTH))
    print(f"{machine()}; n = {a.n:,}, block {a.block} ({len(op.bounds)} row blocks), {WIDTH} columns; "
          f"median of {max(1, a.passes - 1)} passes after a first", flush=True)
    with dask.config.set(scheduler="threads", num_workers=a.threads):
        local, ref = passes(op, V, a.passes, None)
    print(f"{a.threads} local threads: {local:.3f} s a pass", flush=True)
    budget, gathered = grid.INLINE_PASS_BYTES, assign.gathered
    for w in a.workers:
        with (LocalCluster(n_workers=w, threads_per_worker=1, dashboard_address=None) as cluster,
              Client(cluster)):
            row = []
            for label, bytes_, gather in (("carried", budget, True), ("carried, blocks not gathered", budget, False),
                                          ("pieces", 0, True)):
                grid.INLINE_PASS_BYTES = bytes_
                assign.gathered = gathered if gather else (lambda slot, weights, pairs: list(slot))
                try:
                    row.append(f"{label} {passes(op, V, a.passes, ref)[0]:.3f} s")
                finally:
                    grid.INLINE_PASS_BYTES, assign.gathered = budget, gathered
            nb = len(op.bounds)
            carried = grid.carried_pass(min(w, nb * (nb + 1) // 2), n=a.n, width=WIDTH, cluster=True)
            print(f"LocalCluster {w} x 1: {', '.join(row)} a pass (dkpca carries V here: {carried}; the shares "
                  f"touch {touched(op.bounds, w, True)} row blocks in all, {touched(op.bounds, w, False)} not "
                  "gathered)", flush=True)


def touched(bounds: list[tuple[int, int]], slots: int, gather: bool) -> int:
    """The row blocks a pass's shares touch in all (the V pieces they carry, the partial sums they return)."""
    pairs = grid.upper_pairs(len(bounds))
    slot = assign.balance(grid.pair_weights(bounds, pairs), slots, pairs if gather else None)
    return sum(len(touched_rows([p for p, t in zip(pairs, slot, strict=True) if t == s])) for s in set(slot))


if __name__ == "__main__":
    main()
