"""Nystroem approximation: eigenpairs of ``H C W^+ C^T H`` from m landmarks.

With landmarks L (m rows of X), ``C = K(X, L)`` (n x m) and ``W = K(L, L)``,
the Nystroem approximation is ``K ~ C W^+ C^T = F F^T`` with the feature
matrix ``F = C Q Lambda^{-1/2}`` (``W = Q Lambda Q^T``, tiny eigenvalues of W
truncated -- the pseudo-inverse).  It is centred consistently, as a kernel
matrix in its own right: ``K~_nys = H F F^T H = F~ F~^T`` with
``F~ = F - 1 mu^T``, ``mu = F^T 1 / n``.  Its non-zero eigenpairs come from
the m x m matrix ``F~^T F~ = V Sigma^2 V^T``: eigenvalues ``Sigma^2`` and
eigenvectors ``U = F~ V Sigma^{-1}`` over all n training points, so the usual
:class:`~dkpca.model.KPCAModel` projects new points.  The centering
statistics of the approximation, ``r = F mu`` and ``c = |mu|^2``, are
returned in ``info["centering"]`` for the model (the pipeline uses them; no
pass over K is ever made).  The two passes over X, in one task graph, are
:mod:`dkpca.solvers.nystrompasses`; landmark selection, the solver's
interface and the iterative solvers' start block are here.

Cost: two passes over X, each evaluating the n x m block ``K(X, L)`` row
block by row block through :mod:`dkpca.kernels` (memory: one row block x m
per task, m x m in the client; never n x n), plus landmark selection:

* ``"uniform"``: m rows drawn without replacement;
* ``"rpcholesky"`` (default): block randomly pivoted Cholesky (Chen, Epperly,
  Tropp & Webber 2022): rounds of pivots sampled with probability
  proportional to the diagonal of the residual ``K - F F^T``; one pass over X
  per round (an n x b block), and an n x m float64 factor in the client;
* ``"greedy"``: the same with deterministic pivots (largest residual
  diagonal; classic pivoted Cholesky, sensitive to outliers).

Approximate by design: the reported residuals are the rigorous bound
``||K~ u - theta u|| <= ||K - K_nys||_2 <= trace(K - K_nys)`` (free: the
trace of the Nystroem error is ``sum_i k(x_i, x_i) - ||F||_F^2``), unless
``exact_residuals=True`` asks for one pass over K through the operator.

Data access: ``X`` and ``kernel`` are taken from the keyword arguments if
given, else from the operator: :class:`~dkpca.operator.MatrixFreeKernelOperator`
carries ``X`` and ``kernel``; a :class:`~dkpca.operator.StoredKernelOperator`
carries ``kernel``, and its Gram's store (``operator.gram.store``) holds the
training data at ``data/X`` (written by :func:`dkpca.fit`).
"""

from __future__ import annotations

import time

import dask
import dask.array as da
import numpy as np
import scipy.linalg

from ..execution import compute, for_the_client
from ..kernels import Kernel
from ..linalg import DEFAULT_BLOCK, cholesky_qr
from .nystrompasses import landmark_rows, nystrom_features, two_passes
from .result import Callback, EigResult, report

__all__ = ["solve", "start_block", "start_landmarks", "LANDMARK_METHODS", "START_LANDMARKS", "START_MIN_N",
           "START_MIN_BLOCK", "nystrom_features"]

LANDMARK_METHODS = ("rpcholesky", "greedy", "uniform")

#: Landmarks of an iterative solver's starting block (:func:`start_block`).
#: Its cost grows as n m^2 (the features' Gram matrix); passes of block
#: Lanczos to tol = 1e-6 at n = 10,000 (d = 50, rbf, k = 10, l = 20) from m =
#: 0 (random), 50, 100, 200, 500 landmarks: 6, 6, 4, 4, 4, the block taking
#: 0.03, 0.11, 0.13, 0.37, 0.96 s; at n = 5,000: 6, 7, 5, 5, 4.
START_LANDMARKS = 200
#: From this n up the iterative solvers start from the Nystroem block: below,
#: a pass costs less than the block (n = 5,000: 0.07 s a pass, 0.2 s the block).
START_MIN_N = 10_000
#: ... and at any n from this block width up: a pass then multiplies so many
#: columns that the block (two landmarks a column) costs a fraction of one.
#: USPS (n = 7,291, poly-3, k = 256, block 266, K in memory): block Lanczos
#: from a random block 7 passes in 14.2 s, from 532 landmarks 5 in 10.3 s
#: (the block 1.2 s), from 1,000 5 in 12.1 s, from 2,000 5 in 20.6 s.
START_MIN_BLOCK = 100


def start_landmarks(n: int, ell: int) -> int | None:
    """Landmarks of an iterative solver's Nystroem start block of width ``ell``; None: start at random."""
    if n < START_MIN_N and ell < START_MIN_BLOCK:
        return None
    return max(START_LANDMARKS, 2 * ell)

def _data(operator, X, kernel):
    """Training data (dask, row-chunked) and kernel for the landmarks."""
    if kernel is None:
        kernel = getattr(operator, "kernel", None)
    if X is None and hasattr(operator, "training_data"):
        try:
            X = operator.training_data()
        except (FileNotFoundError, KeyError, NotImplementedError):
            X = None
    if X is None or kernel is None:
        raise ValueError(
            "the nystrom solver needs the training data and the kernel, not only K~ products; pass X=... and "
            "kernel=... or use an operator that has them (MatrixFreeKernelOperator, or a "
            "StoredKernelOperator whose store holds data/X as written by dkpca.fit)."
        )
    X = X if isinstance(X, da.Array) else da.from_array(np.asarray(X), chunks=(DEFAULT_BLOCK, -1))
    n = X.shape[0] if operator is None else operator.n
    if X.ndim != 2 or X.shape[0] != n:
        raise ValueError(f"X must have shape ({n}, d) to match the operator; got {X.shape}.")
    return X.rechunk({1: -1}), kernel


def _rows_of(X: da.Array, idx: np.ndarray) -> np.ndarray:
    return landmark_rows(idx, [compute(X[np.sort(idx)], label="")[0]])


def _columns(X: da.Array, kernel: Kernel, XL: np.ndarray) -> np.ndarray:
    """``K(X, L)`` (n x b), one task per row block of X."""
    parts = [dask.delayed(_column_block, pure=True)(b, kernel, XL) for b in X.to_delayed().ravel()]
    return np.concatenate(compute(*parts, label=""), axis=0)


def _column_block(Xb: np.ndarray, kernel: Kernel, XL: np.ndarray) -> np.ndarray:
    return kernel.block(Xb, XL, np.float64)


def select_landmarks(X: da.Array, kernel, m: int, method: str, rng, rounds: int = 8) -> tuple[np.ndarray, int]:
    """Indices of m landmarks and the passes over X spent choosing them."""
    n = X.shape[0]
    if method == "uniform" or m >= n:
        return np.sort(rng.choice(n, size=m, replace=False)), 0
    diag = np.concatenate(compute(*[dask.delayed(_diag_block)(b, kernel) for b in X.to_delayed().ravel()],
                                  label=""))
    resid = diag.copy()
    F = np.empty((n, 0))
    chosen: list[int] = []
    b = max(1, -(-m // rounds))
    passes = 0
    while len(chosen) < m:
        want = min(b, m - len(chosen))
        avail = resid.copy()
        avail[chosen] = 0.0
        avail = np.maximum(avail, 0.0)
        total = avail.sum()
        if total <= 1e-14 * diag.sum():
            # K is (numerically) reproduced by the landmarks so far: pad uniformly
            rest = np.setdiff1d(np.arange(n), chosen)
            chosen.extend(rng.choice(rest, size=m - len(chosen), replace=False).tolist())
            break
        nz = int(np.count_nonzero(avail))
        want = min(want, nz)
        if method == "greedy":
            S = np.argsort(avail)[::-1][:want]
        else:
            S = rng.choice(n, size=want, replace=False, p=avail / total)
        G = _columns(X, kernel, _rows_of(X, S)) - F @ F[S].T
        passes += 1
        # Cholesky of the pivot block through eigh: it may be (nearly) singular.
        lam, Q = scipy.linalg.eigh(0.5 * (G[S] + G[S].T), check_finite=False)
        ok = lam > 1e-12 * max(lam.max(initial=0.0), np.finfo(float).tiny)
        Fn = G @ (Q[:, ok] / np.sqrt(lam[ok]))
        F = np.hstack([F, Fn])
        resid -= np.einsum("ij,ij->i", Fn, Fn)
        chosen.extend(int(i) for i in S)
    return np.sort(np.asarray(chosen[:m])), passes


def _diag_block(Xb: np.ndarray, kernel: Kernel) -> np.ndarray:
    return kernel.diag(Xb, np.float64)


def start_block(X: da.Array | np.ndarray, kernel: Kernel, ell: int, rng,
                n_landmarks: int = START_LANDMARKS) -> np.ndarray | None:
    """An orthonormal n x ``ell`` starting block for an iterative solver: the top Nystroem eigenvectors.

    ``n_landmarks`` uniform landmarks, two passes over X (:func:`solve`).
    A random block is about as far from the wanted eigenvectors as it can
    be; this one is close to them, so block Lanczos meets its tolerance in
    fewer passes over K.  Measured at n = 10,000 (d = 50, rbf, k = 10, l = 20,
    tol = 1e-6): 6 passes from a random block (first residual 4.6), 4 from
    this one with 500 landmarks (first residual 8e-2); 1,000 or 2,000
    landmarks also gave 4.  None when the approximation's rank is below
    ``ell`` (nearly duplicate landmarks): the caller keeps a random block.

    A small ``X`` (:func:`~dkpca.execution.for_the_client`) makes both passes
    on the client's threads even beside a cluster, as its scan does: the
    passes are light (``n x m`` kernel entries) and a cluster adds a round
    trip per step of the graph.  Measured at n = 20,000 on a LocalCluster of
    2 workers here: 0.20 s on the workers against 0.065 s on 2 threads.
    """
    n = X.shape[0]
    m = min(n, max(int(n_landmarks), ell))
    res = solve(None, ell, rng=rng, n_landmarks=m, landmarks="uniform", X=X, kernel=kernel,
                local=for_the_client(X.nbytes))
    if res.info["rank"] < ell:  # fewer directions than the block: its other columns would be zero
        return None
    U = res.eigenvectors
    try:  # the Nystroem eigenvectors are orthonormal but for rounding
        return cholesky_qr(U)
    except np.linalg.LinAlgError:
        return np.linalg.qr(U)[0]


def solve(operator, k: int, *, tol: float = 0.0, max_passes: int | None = None, rng=None,
          callback: Callback | None = None, n_landmarks: int | None = None, landmarks: str = "rpcholesky",
          X=None, kernel=None, exact_residuals: bool = False, local: bool = False) -> EigResult:
    """Top-``k`` eigenpairs of the centred Nystroem approximation of K~.

    Parameters
    ----------
    operator : CenteredKernelOperator or None
        Gives ``n`` and, unless passed here, the data and kernel (see module
        docstring).  No product with K~ is made unless ``exact_residuals``.
        None: ``X`` and ``kernel`` are required (and ``exact_residuals`` is
        not available).
    k : int
        Number of eigenpairs (``k <= n_landmarks``).
    tol, max_passes
        Accepted for the common solver interface; Nystroem is not iterative.
    rng : numpy.random.Generator or int, optional
        Source of the landmark choice.
    callback : callable, optional
        Called once, with a :class:`~dkpca.solvers.PassReport` of the whole
        solve (its passes over X, the residual bound, the wall time): the
        residual is known only at the end.
    n_landmarks : int, optional
        m (default ``min(n, max(10 k, 500))``).
    landmarks : {"rpcholesky", "greedy", "uniform"} or array of int, default="rpcholesky"
        How landmarks are chosen (module docstring), or their row indices
        (then ``n_landmarks`` is ignored).
    X : array-like or dask array of shape (n, d), optional
        Training data (default: from the operator).
    kernel : Kernel, optional
        Resolved kernel (default: the operator's).
    exact_residuals : bool, default=False
        Compute ``||K~ u - theta u||`` against the exact operator (one pass
        over K); otherwise report the free upper bound ``trace(K - K_nys)``.
    local : bool, default=False
        Both passes on this process's threads even beside a cluster (:func:`two_passes`): the start
        block of a small input, whose passes are light.

    Returns
    -------
    EigResult
        ``passes`` counts passes over X (each an n x m or n x b kernel
        slice, not n x n); ``info`` has ``n_landmarks``, ``landmarks``,
        ``landmark_passes``, ``rank``, ``trace_error`` (``trace(K - K_nys)``),
        ``relative_trace_error`` and ``centering`` (the approximation's
        ``row_means``, ``grand_mean``, ``diag_sum``: arrays, for the model, not
        for the JSON report).
    """
    t_start = time.perf_counter()
    n = operator.n if operator is not None else X.shape[0]
    given = None
    if not isinstance(landmarks, str):
        given = np.unique(np.asarray(landmarks))
        if given.dtype.kind not in "iu" or given.size < k or given[0] < 0 or given[-1] >= n:
            raise ValueError(f"landmarks must be a method name ({', '.join(LANDMARK_METHODS)}) or at least k={k} "
                             f"distinct row indices in [0, {n}).")
        n_landmarks = given.size
    elif landmarks not in LANDMARK_METHODS:
        raise ValueError(f"landmarks={landmarks!r} is unknown; choose one of {', '.join(LANDMARK_METHODS)}.")
    m = min(n, max(10 * k, 500)) if n_landmarks is None else int(n_landmarks)
    if not k <= m <= n:
        raise ValueError(f"n_landmarks={n_landmarks!r} is invalid; it must be between k={k} and n={n}.")
    rng = np.random.default_rng(rng)
    X, kernel = _data(operator, X, kernel)
    t0 = time.perf_counter()
    idx, sel_passes = (given, 0) if given is not None else select_landmarks(X, kernel, m, landmarks, rng)
    t_select = time.perf_counter() - t0
    t0 = time.perf_counter()
    spec, out = two_passes(X, kernel, idx, k, local=local)
    U, row_means = out[:, :k], out[:, k]
    lam, mu, diag_sum = spec["lam"], spec["mu"], spec["diag_sum"]
    # one graph makes both passes: its time is split evenly between them
    pass_seconds = [t_select / max(sel_passes, 1)] * sel_passes + [(time.perf_counter() - t0) / 2] * 2
    trace_err = max(diag_sum - spec["trace_nys"], 0.0)
    passes = sel_passes + 2
    if exact_residuals:
        KU = operator.matmat(U)
        res = np.linalg.norm(KU - U * lam, axis=0)
        passes_note = "exact: one product with K~"
    else:
        res = np.full(k, trace_err)
        passes_note = "bound: trace(K - K_nys)"
    scale = max(lam[0], np.finfo(float).tiny)
    report(callback, passes, res.max() / scale, time.perf_counter() - t_start)
    info = {
        "n_landmarks": m, "landmarks": landmarks if given is None else "given", "landmark_passes": sel_passes,
        "rank": spec["rank"],
        "trace_error": trace_err, "relative_trace_error": trace_err / diag_sum if diag_sum > 0 else 0.0,
        "residuals": passes_note, "passes_are": "passes over X (n x m kernel slices), not over K",
        "pass_seconds": pass_seconds,
        "centering": {"row_means": row_means, "grand_mean": float(mu @ mu), "diag_sum": diag_sum},
    }
    return EigResult(lam, U, passes=passes, residuals=res, converged=True, solver="nystrom",
                     history=[float(res.max() / scale)], info=info)
