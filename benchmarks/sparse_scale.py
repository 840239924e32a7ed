"""Sparse kernel PCA at scale: blocked EM on n = 20,000 points, never an n x n array.

Synthetic clustered data (benchmarks/_common.clustered, d = 10), rbf kernel.
Candidates are fitted in blocks of ``--block-size`` (each block's G = K_{:,B}^T
K_{:,B} reduced over row blocks of X on dask), survivors pooled, discarded
candidates re-checked against all n rows.  The largest arrays are
(row block x candidate set) kernel blocks and candidate_set_size^2 matrices.

Reports wall time, peak RSS (psutil sampling every 50 ms, and getrusage's
ru_maxrss), and the number of representing kernels.  The peak is compared with
what a single n x n float64 array would need.

Usage::

    python benchmarks/sparse_scale.py [--n 20000] [--d 10] [--noise-variance 0.02] [--update em]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import clustered, machine  # noqa: E402

from dkpca.sparse import SparseKernelPCA  # noqa: E402


class PeakRSS:
    """Sample this process's RSS in a thread; ``peak`` in bytes."""

    def __init__(self, every: float = 0.05) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self._proc = psutil.Process()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(self.every)

    def __enter__(self) -> PeakRSS:
        self.peak = self._proc.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--gamma", type=float, default=0.05)
    ap.add_argument("--noise-variance", type=float, default=0.02)
    ap.add_argument("--block-size", type=int, default=1000)
    ap.add_argument("--update", choices=("fast", "em"), default="fast", help="weight update: eq. 14 or eq. 13")
    args = ap.parse_args(argv)

    X = clustered(args.n, args.d).astype(np.float64)
    base = psutil.Process().memory_info().rss
    est = SparseKernelPCA(gamma=args.gamma, noise_variance=args.noise_variance, candidate_set_size=args.block_size,
                          update=args.update, random_state=0)
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        est.fit(X)
        fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    Z = est.transform(X)
    transform_s = time.perf_counter() - t0
    rep = est.fit_report_
    result = {
        "n": args.n, "d": args.d, "gamma": args.gamma, "noise_variance": args.noise_variance,
        "block_size": args.block_size, "update": args.update,
        "n_representing": int(est.representing_indices_.size),
        "n_components": int(Z.shape[1]),
        "fit_s": round(fit_s, 1),
        "transform_all_s": round(transform_s, 2),
        "peak_rss_mb": round(mem.peak / 2**20, 1),
        "rss_before_fit_mb": round(base / 2**20, 1),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "n_by_n_float64_mb": round(args.n**2 * 8 / 2**20, 1),
        "passes_over_X": rep["passes"],
        "rounds": rep["rounds"],
        "add_back": rep["add_back"],
        "final_em_iterations": est.n_iter_,
        "converged": est.converged_,
        "log_likelihood": float(est.log_likelihood_[-1]),
        "machine": machine(),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
