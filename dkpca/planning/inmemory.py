"""The in-memory solver rule: which solver a K held in memory gets (``gram="memory"``, the estimator's fit).

One rule for :func:`dkpca.planning.choose` and the estimator's in-memory fit and ``partial_fit``
(:mod:`dkpca.sklearnparams`).
"""

from __future__ import annotations

__all__ = ["DENSE_MAX_N", "DENSE_K_SHARE", "LANCZOS_MIN_K", "WARM_SOLVER", "in_memory_solver"]

#: n up to which ``auto`` solves densely (scikit-learn's threshold too): the
#: eigh's O(n^3) beats iterating only for tiny n.  Measured on the 2-core
#: development machine (rbf, d=50, k=10, K in memory, 2026-11-23): eigh
#: (top k) 0.09 s at n=1000, 1.0 s at 2000, 2.9 s at 3000, 14 s at 5000,
#: against ARPACK's 0.09, 0.14, 0.47, 1.1 s and block Lanczos' 0.17, 0.58, 0.81, 1.7 s.
DENSE_MAX_N = 200

#: share of the spectrum (k / n) from which the dense eigh beats the
#: iterative solvers on a K held in memory: at n=2000, k=300 eigh took 1.4 s,
#: ARPACK 10.3 s and block Lanczos 11.0 s; at n=7291 (USPS), k=256 eigh took
#: 67 s and ARPACK 26 s (same machine and day).
DENSE_K_SHARE = 0.1

#: components from which a K held in memory is solved by block Lanczos rather than ARPACK
#: (:func:`in_memory_solver`).  Measured on the 2-core AMD EPYC (2026-11-24, dkpca.KernelPCA, tol=0,
#: one process, two rounds each, ARPACK / Lanczos): USPS (n = 7,291, poly-3, float64) k = 32: 1.84-2.69 /
#: 1.97-2.06 s, 64: 4.28-4.89 / 2.84-2.95, 128: 9.22-9.42 / 4.28-4.86, 256: 17.5-17.6 / 7.45-7.82;
#: clustered rbf (n = 5,000, d = 50, float32) k = 10: 0.29-0.48 / 0.60-0.74, 32: 0.59-1.11 / 3.99-4.89
#: (27 passes through a cluster of eigenvalues), 64: 3.61-4.18 / 5.27-5.87, 128: 7.25-7.45 / 7.46-7.72.
#: From 64 the choice is at most 1.5x the faster of the two on both, below it ARPACK.
LANCZOS_MIN_K = 64


#: A warm start (``partial_fit``'s extended eigenvectors) changes the in-memory rule below ARPACK's range: its
#: one start vector gains nothing from it (85-113 passes warm, 87-108 cold), while block Lanczos starts from all
#: k of them.  Measured, 10 batches of 2,000 rows to 20,000 (clustered rbf, d = 50, k = 10, float64, tol 1e-10,
#: ``benchmarks/partial_fit.py``): the ten calls 64 s with ARPACK (the last 19 s), 35.4 s with block Lanczos
#: (6-8 passes a call, the last call 9.4 s, about half of it copying K into the grown matrix).
WARM_SOLVER = "lanczos"


def in_memory_solver(n: int, k: int, fraction: bool = False, warm: bool = False,
                     budget: bool = False) -> tuple[str, str]:
    """``(solver, reason)`` for a K held in memory (``gram="memory"``, the estimator's in-memory fit).

    Dense for tiny n, for a fraction of explained variance (its sum up to an
    unknown k, which one eigh gives) and for a large share of the spectrum
    (``k >= DENSE_K_SHARE n``); block Lanczos from :data:`LANCZOS_MIN_K`
    components (each pass one GEMM with a block of k + 10, where ARPACK's
    one-vector products and its growing basis cost more) or from a ``warm``
    start (:data:`WARM_SOLVER`), or given a pass ``budget`` (``max_passes``: ARPACK's one-vector products do not
    count in it, its own limit is restarts); else ARPACK: with K
    in memory a product with one vector costs a seventh of one with a block of
    20 (memory bound), and ARPACK needs the fewest such products (see
    :data:`DENSE_MAX_N`).
    """
    if n <= DENSE_MAX_N:
        return "dense", f"n={n} <= {DENSE_MAX_N}: a dense eigh is cheaper than iterating"
    if fraction:
        return "dense", "a fraction of explained variance: one dense eigh gives the whole spectrum"
    if k >= DENSE_K_SHARE * n:
        return "dense", f"k={k} >= {DENSE_K_SHARE:g} n: for that share of the spectrum a dense eigh is cheaper"
    if k >= LANCZOS_MIN_K:
        return "lanczos", (f"K is in memory and {LANCZOS_MIN_K} <= k={k} < {DENSE_K_SHARE:g} n: block Lanczos (one "
                           "GEMM a pass) is cheaper than ARPACK's one-vector products")
    if warm:
        return WARM_SOLVER, (f"K is in memory, k={k}, and a warm start (the previous eigenvectors extended): "
                             "block Lanczos starts from all of them, ARPACK's one start vector gains nothing")
    if budget:
        return "lanczos", (f"K is in memory, k={k}, and max_passes is given: block Lanczos keeps a pass budget, "
                           "ARPACK (whose limit counts restarts of many one-vector products) does not")
    return "arpack", (f"K is in memory and k={k} < {min(LANCZOS_MIN_K, DENSE_K_SHARE * n):g}: ARPACK (one-vector "
                      "products, the fewest of them) is the cheapest")
