"""A solver's algebra between passes: one call per product (serial) against row blocks on the kept pool.

    python benchmarks/algebra.py [--n 100000] [--k 10] [--rounds 5]

Under ``execution.serial_blas`` (as a fit runs blocks up to
``SERIAL_ALGEBRA_MAX_WIDTH`` columns), each solver solves a cheap low-rank
operator (``U diag(lam) U^T + 1e-3 I``, rank 30) twice in turn, with its
tall-skinny products in one call and split by rows over the process's threads
(``dkpca.execution.row_blocks``); the time outside the operator's products is
the algebra.  Prints the medians; ``dkpca.linalg.rowblocks.MIN_PART_FLOPS``
is the threshold below which a product stays one call.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dkpca.solvers.lanczos as lanczos
import dkpca.solvers.randomized as randomized
from dkpca import solvers
from dkpca.execution import row_blocks, serial_blas
from dkpca.linalg import RowBlocks


class LowRank:
    def __init__(self, n: int, rank: int = 30) -> None:
        rng = np.random.default_rng(0)
        self.U = np.linalg.qr(rng.standard_normal((n, rank)))[0]
        self.lam = np.geomspace(100, 0.1, rank)
        self.n, self.passes, self.seconds = n, 0, 0.0

    def matmat(self, V, single=False):
        t = time.perf_counter()
        self.passes += 1
        out = self.U @ (self.lam[:, None] * (self.U.T @ V)) + 1e-3 * V
        self.seconds += time.perf_counter() - t
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with serial_blas():
        threads = row_blocks()
        for name, module in (("lanczos", lanczos), ("randomized", randomized)):
            times: dict[str, list[float]] = {"one call": [], "row blocks": []}
            for _ in range(a.rounds):
                for label, rows in (("one call", RowBlocks()), ("row blocks", threads)):
                    module.row_blocks = lambda rows=rows: rows
                    op = LowRank(a.n)
                    t = time.perf_counter()
                    res = solvers.get_solver(name)(op, a.k, tol=1e-9, max_passes=60, rng=1)
                    times[label].append(time.perf_counter() - t - op.seconds)
            one, split = (float(np.median(v)) for v in times.values())
            print(f"{name}: n={a.n:,}, k={a.k}, {res.passes} passes, {threads.threads} threads: algebra "
                  f"{one:.3f} s in one call a product, {split:.3f} s in row blocks ({one / split:.2f}x)")


if __name__ == "__main__":
    main()
