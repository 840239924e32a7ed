"""The Nystroem approximation's two passes over X, in one task graph (:func:`two_passes`).

The landmarks' rows, both passes and the small eigenproblem between them are
one graph: one round trip to a cluster, not three, and X's row blocks are read
once.  Each pass is one task of equal rows per worker thread (placed: the
scheduler would follow the data and leave threads idle); the first sums the
m x m statistics of the kernel slice ``K(X_b, L)`` (a SYRK, transformed once
between the passes), the second makes the eigenvectors and the row means in
one product.  The notation is :mod:`dkpca.solvers.nystrom`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
from dask.task_spec import TaskRef

from ..execution import compute, local_thread_count, n_workers_threads, placed, placement
from ..kernels import Kernel
from ..linalg import TaskGraph

__all__ = ["landmark_rows", "nystrom_features", "two_passes"]


def two_passes(X: da.Array, kernel: Kernel, idx: np.ndarray, k: int,
               local: bool = False) -> tuple[dict[str, Any], np.ndarray]:
    """Both passes over X from landmarks ``idx``: :func:`_spectrum`'s dict, and ``[U | row means]`` (n x (k + 1)).

    ``local``: on this process's threads even beside a cluster (:func:`dkpca.execution.compute`).
    """
    n = X.shape[0]
    rows = X.to_delayed().ravel()
    edges = np.cumsum((0,) + X.chunks[0]).tolist()
    shares = _row_shares(n, edges, local)
    graph = TaskGraph("dkpca-nystrom", rows[:1])
    ordered = np.sort(idx)
    cut = np.searchsorted(ordered, edges)
    pieces = [graph.task(np.take, graph.ref(rows[i]), ordered[cut[i]:cut[i + 1]] - edges[i], 0)
              for i in range(len(rows)) if cut[i + 1] > cut[i]]
    parts = [_share_task(graph, rows, edges, share, _gram_share, kernel, idx, pieces) for share in shares]
    spec = graph.task(_spectrum, n, k, kernel, idx, pieces, *parts)
    vectors = [_share_task(graph, rows, edges, share, _vector_share, kernel, idx, pieces, spec) for share in shares]
    spec, *outs = compute(*graph.outputs([spec, *vectors]), label="", local=local)
    return spec, np.concatenate(outs, axis=0)


def landmark_rows(idx: np.ndarray, pieces: list[np.ndarray]) -> np.ndarray:
    """The landmarks' rows ``XL`` in the order of ``idx`` (``pieces`` hold them sorted)."""
    return np.ascontiguousarray(np.concatenate(pieces)[np.argsort(np.argsort(idx))], dtype=np.float64)


def _landmarks(kernel: Kernel, idx: np.ndarray, pieces: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``XL``, ``W = K(L, L)`` and W's mean row, made where they are used: an m x m kernel costs less than a
    task of its own, whose results would travel between workers (4-8 ms a transfer in a task stream of a
    2-worker LocalCluster here)."""
    XL = landmark_rows(idx, pieces)
    W = kernel.block(XL, None, np.float64)
    return XL, W, W.mean(axis=0)


def _gram_share(kernel: Kernel, idx: np.ndarray, pieces: list[np.ndarray], start: int, stop: int,
                offsets: list[int], *blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Rows ``start:stop``: ``sum (C_b - s)^T (C_b - s)``, ``sum (C_b - s)``, ``sum k(x, x)`` (``C_b = K(X_b, L)``,
    ``s`` the mean row of ``W``: :func:`_landmarks`).

    The features' statistics are ``R^T`` (these) ``R``, formed once in
    :func:`_spectrum`: the m x m product is a SYRK of the kernel slice, where forming
    ``F_b = C_b R`` first would cost a full GEMM more (measured on a 4000 x 200
    block, one thread: 4.4 ms for this against 8.2 + 4.7 ms).
    """
    XL, _, shift = _landmarks(kernel, idx, pieces)
    m = XL.shape[0]
    G, col, diag = np.zeros((m, m)), np.zeros(m), 0.0
    for Xb in _slices(start, stop, offsets, blocks):
        Cs = kernel.block(Xb, XL, np.float64)
        Cs -= shift
        G += Cs.T @ Cs
        col += Cs.sum(axis=0)
        diag += float(kernel.diag(Xb, np.float64).sum())
    return G, col, diag


def _vector_share(kernel: Kernel, idx: np.ndarray, pieces: list[np.ndarray], spec: dict[str, Any], start: int,
                  stop: int, offsets: list[int], *blocks: np.ndarray) -> np.ndarray:
    """Rows ``start:stop`` of ``C B - offset`` (:func:`_spectrum`'s ``B = R [P | mu]`` and ``offset``: eigenvectors
    and row means in one product)."""
    XL, B, offset = landmark_rows(idx, pieces), spec["B"], spec["offset"]
    out = np.concatenate([kernel.block(Xb, XL, np.float64) @ B for Xb in _slices(start, stop, offsets, blocks)])
    out -= offset
    return out


def _slices(start: int, stop: int, offsets: Sequence[int], blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Rows ``start:stop`` as views into ``blocks`` (row blocks starting at global rows ``offsets``)."""
    return [blk[max(start, off) - off:min(stop, off + blk.shape[0]) - off] for off, blk in zip(offsets, blocks,
                                                                                              strict=True)]


def _row_shares(n: int, edges: list[int], local: bool = False) -> list[tuple[str | None, int, int, list[int]]]:
    """Equal row ranges, one per worker thread: ``(worker, start, stop, row blocks overlapped)``.

    ``edges``: the first row of each of X's row blocks, and n.  A pass over X
    is a few ms of work per row block; as one task per block, 5 blocks on 2
    workers ran as 4 and 1 (the scheduler follows the data), and a share of
    equal rows per thread keeps both busy (:func:`execution.placement` puts
    each where it was given).
    """
    threads = local_thread_count() if local else n_workers_threads()
    cuts = np.linspace(0, n, min(threads, n) + 1).astype(int).tolist()
    bounds = list(zip(cuts[:-1], cuts[1:], strict=True))
    workers = [None] * len(bounds) if local else placement([b - a for a, b in bounds])
    return [(worker, a, b, list(range(int(np.searchsorted(edges, a, side="right")) - 1,
                                      int(np.searchsorted(edges, b, side="left")))))
            for worker, (a, b) in zip(workers, bounds, strict=True)]


def _spectrum(n: int, k: int, kernel: Kernel, idx: np.ndarray, pieces: list[np.ndarray], *parts: tuple
              ) -> dict[str, Any]:
    """Between the two passes: the top-k eigenpairs of ``F~^T F~`` from the first pass's sums (:func:`_gram_share`).

    Returns ``lam``, ``mu`` (the features' mean), ``B`` and ``offset`` for the
    second pass (:func:`_vector_share`), ``rank``, ``diag_sum`` and
    ``trace_nys`` (``||F||_F^2``).  Where the approximation's rank is below k
    the other eigenvalues are 0 (with zero vectors).
    """
    _, W, s = _landmarks(kernel, idx, pieces)
    R = nystrom_features(W)
    Gs = sum(p[0] for p in parts)
    # Accumulated about the landmarks' own mean row s of W (close to the mean of C's rows): that avoids
    # cancellation in F~^T F~ = F^T F - n mu mu^T.  F = C R, so F - 1 (s R)^T = (C - 1 s^T) R.
    shift = s @ R
    delta = (sum(p[1] for p in parts) @ R) / n
    GR = Gs @ R
    fro2 = float(np.einsum("ij,ij->", R, GR))  # ||F - 1 shift^T||_F^2 = trace(R^T Gs R)
    Gc = R.T @ GR - n * np.outer(delta, delta)
    sig2, Vs = scipy.linalg.eigh(0.5 * (Gc + Gc.T), check_finite=False)
    sig2, Vs = sig2[::-1], Vs[:, ::-1]
    r = R.shape[1]
    if r < k:
        # fewer directions than k (low-rank data, or landmarks nearly duplicate): the rest are eigenvalue 0, which
        # the spectrum policy drops and reports, as it does for every other solver
        sig2, Vs = np.append(sig2, np.zeros(k - r)), np.hstack([Vs, np.zeros((r, k - r))])
    # F~^T F~ is PSD: a negative here is rounding, which the spectrum policy
    # (dkpca.solvers.spectrum) cleans like any other solver's -- no clamp of our own
    lam = sig2[:k].copy()
    inv = np.zeros(k)
    pos = lam > np.finfo(float).eps * max(lam[0], np.finfo(float).tiny) * n
    inv[pos] = 1.0 / np.sqrt(lam[pos])
    P = Vs[:, :k] * inv
    mu = shift + delta
    # ||F||_F^2 = ||F - s||^2 + 2 s.sum(F - s) + n |s|^2; trace(K - K_nys) >= 0 up to rounding.
    trace_nys = fro2 + 2.0 * shift @ (delta * n) + n * shift @ shift
    # U = (F - 1 mu^T) P and the row means F mu, both C times an m-row matrix: one product per block
    return {"lam": lam, "mu": mu, "B": R @ np.column_stack([P, mu]), "offset": np.append(mu @ P, 0.0),
            "rank": int(r), "diag_sum": float(sum(p[2] for p in parts)), "trace_nys": float(trace_nys)}


def _share_task(graph: TaskGraph, rows: list, edges: list[int], share: tuple, func: Callable,
                *args: Any) -> TaskRef:
    """``func(*args, start, stop, offsets, *row blocks)`` for one share of :func:`_row_shares`, on its worker."""
    worker, start, stop, blocks = share
    with placed(worker):
        return graph.task(func, *args, start, stop, [edges[i] for i in blocks], *[graph.ref(rows[i]) for i in blocks])


def nystrom_features(W: np.ndarray, rcond: float | None = None) -> np.ndarray:
    """``R = Q Lambda^{-1/2}`` over the well-determined spectrum of W (m x r).

    ``C R (C R)^T = C W^+_tau C^T`` with W's eigenvalues below
    ``tau = rcond * lambda_max`` dropped (default ``rcond = sqrt(eps)``).  The
    cut is for stability, not only for exact singularity: a kept eigenvalue
    lambda amplifies the rounding of C (``eps ||C||``) by ``1 / sqrt(lambda)``,
    so ``F F^T`` carries an error of about ``eps ||C||^2 / lambda``; near-duplicate
    landmarks or a smooth kernel make W's spectrum reach 1e-15 and that error
    O(1).  Dropping below ``sqrt(eps) lambda_max`` bounds it by about
    ``sqrt(eps) (n / m) lambda_max`` while changing the approximation only by
    directions of weight < tau.
    """
    lam, Q = scipy.linalg.eigh(0.5 * (W + W.T), check_finite=False)
    rcond = np.sqrt(np.finfo(float).eps) if rcond is None else rcond
    keep = lam > rcond * max(lam.max(initial=0.0), np.finfo(float).tiny)
    return Q[:, keep] / np.sqrt(lam[keep])
