"""``KernelPCA.partial_fit`` in batches against one ``fit`` on all the rows (issue 38, second measure).

    python benchmarks/partial_fit.py                       # 10 batches of 2,000 rows (the issue's size)
    python benchmarks/partial_fit.py --batches 4 --batch-rows 500      # a quick check
    python benchmarks/partial_fit.py --cold                # also the same batches without the warm start
    python benchmarks/partial_fit.py --write               # also write the table into benchmarks/RESULTS.md

Clustered data (``_common.clustered``, cast to ``--dtype``: float64 by
default, so K is float64 as in the exactness claim), d = 50, rbf gamma = 1/50,
10 components, the estimator's defaults otherwise (``eigen_solver="auto"``:
ARPACK for 10 components, tol = machine precision).  In one process, after a
warm-up of both (imports, the thread pool, BLAS): the batches through
``partial_fit`` (each call timed; memory warmed before the sequence,
``_common.start_timing``), then one ``fit`` on all the rows (timed).
Reported: both totals, the time and solver passes of each call, and the
largest eigenvalue difference, relative to each eigenvalue (goal 1e-6).
``--cold`` runs the batches once more with the warm start replaced by the
solver's own start, to show what the Nystroem extension saves.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import _results
import numpy as np
from _common import clustered, machine, start_timing, warm_bytes

import dkpca.incremental
from dkpca import KernelPCA

D, K = 50, 10


class Passes(logging.Handler):
    """The solver passes of each ``partial_fit`` call, from its log record (``dkpca.incremental``)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.passes: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("partial_fit:"):
            self.passes.append(int(record.args[-1]))


def estimator() -> KernelPCA:
    return KernelPCA(K, kernel="rbf", gamma=1.0 / D, random_state=0)


def grow(batches: list[np.ndarray], passes: Passes) -> tuple[KernelPCA, list[float]]:
    est, times = estimator(), []
    passes.passes.clear()
    for b in batches:
        t0 = time.perf_counter()
        est.partial_fit(b)
        times.append(time.perf_counter() - t0)
    return est, times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=10, help="number of batches (default 10)")
    ap.add_argument("--batch-rows", type=int, default=2000, help="rows per batch (default 2000)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="X's (and K's) precision")
    ap.add_argument("--cold", action="store_true", help="also run the batches without the warm start")
    ap.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    a = ap.parse_args()
    if a.batches < 1 or a.batch_rows < 2:
        ap.error("--batches must be >= 1 and --batch-rows >= 2")
    n = a.batches * a.batch_rows
    X = clustered(n, D).astype(a.dtype)
    batches = np.array_split(X, a.batches)
    logger = logging.getLogger("dkpca")
    logger.setLevel(logging.INFO)
    passes = Passes()
    logger.addHandler(passes)
    warm = clustered(1200, D, seed=99).astype(a.dtype)  # imports, the thread pool, BLAS: untimed
    grow(np.array_split(warm, 3), passes)
    estimator().fit(warm)
    os.environ.setdefault("DKPCA_BENCH_WARM_BYTES", str(warm_bytes(n, per_entry=2 * X.itemsize)))

    start_timing({})
    est, times = grow(batches, passes)
    warm_passes = list(passes.passes)
    vars(est).pop(dkpca.incremental.KEPT, None)  # its kept K (8 n^2 bytes) is not the fit's to carry
    start_timing({})
    t0 = time.perf_counter()
    ref = estimator().fit(X)
    t_fit = time.perf_counter() - t0
    rel = float(np.max(np.abs(est.eigenvalues_ - ref.eigenvalues_) / ref.eigenvalues_))
    rows = [f"| partial_fit, {a.batches} x {a.batch_rows:,} rows (warm start) | {sum(times):.2f} s | "
            f"{' / '.join(f'{t:.2f}' for t in times)} | {' / '.join(['-', *map(str, warm_passes)])} |"]
    if a.cold:
        cold_start = dkpca.incremental.warm_start
        dkpca.incremental.warm_start = lambda *args, **kw: None  # the solver's own start, as fit's
        try:
            start_timing({})
            cold, cold_times = grow(batches, passes)
            del cold
        finally:
            dkpca.incremental.warm_start = cold_start
        rows.append(f"| partial_fit, same batches, cold start | {sum(cold_times):.2f} s | "
                    f"{' / '.join(f'{t:.2f}' for t in cold_times)} | {' / '.join(['-', *map(str, passes.passes)])} |")
    rows.append(f"| fit on all {n:,} rows ({ref.eigen_solver_}) | {t_fit:.2f} s | | |")
    out = (f"n = {n:,}, d = {D}, rbf gamma = 1/{D}, {K} components, {a.dtype}; max |lambda_partial - lambda_fit| / "
           f"lambda_fit = {rel:.1e} (goal <= 1e-6)\n\n"
           "| run | total | per call (s) | solver passes per call (the first call is a fit) |\n"
           "|---|---|---|---|\n" + "\n".join(rows) + "\n")
    print(out)
    if a.write:
        _results.update_section("partial_fit", f"{machine()}\n\n{out}", command="python benchmarks/partial_fit.py")
    if rel > 1e-6:
        raise SystemExit(f"eigenvalues differ by {rel:.1e} relative, above 1e-6")


if __name__ == "__main__":
    main()
