"""Pre-images: from component scores back to input space.

A point ``z`` in component space stands for the feature-space vector ``P phi(x) = phi_bar + sum_k z_k v_k``
(``v_k`` the unit principal axes, ``phi_bar`` the training mean), which in general is not the image of any input
``x``.  Three ways to find an approximate pre-image (seed ``kpca-preimage-blog.md``):

``ridge`` (Bakir, Weston & Schoelkopf 2004)
    Learn a map ``z -> x`` by kernel ridge regression of the training inputs on
    their scores, as scikit-learn's ``fit_inverse_transform``: the same kernel,
    evaluated between score vectors.  Any kernel (but not ``precomputed``).
    For large n it is fitted on m landmark points (subset of regressors, all n
    rows still enter ``K_nm^T K_nm``) instead of an n x n solve.
``kwok-tsang`` (Kwok & Tsang 2003)
    Feature-space squared distances from ``P phi(x)`` to the training points,
    ``||z||^2 - 2 z.e_i + K~_ii`` (``e_i`` the training scores), are turned into
    input-space distances through the kernel (rbf: ``d^2 = 2 - 2 exp(-g delta^2)``;
    linear: ``delta^2 = d^2``) and the pre-image is placed, in closed form, in the
    span of the nearest training points so as to respect those distances
    (classical multidimensional scaling; the blog's ``Revert``).  Nearest
    neighbours are found block by block over the training points.
``fixed-point`` (Mika et al. 1999)
    For the rbf kernel, maximise ``sum_i gamma_i k(x, x_i)`` by the iteration
    ``x <- sum_i gamma_i k(x, x_i) x_i / sum_i gamma_i k(x, x_i)`` with
    ``P phi(x) = sum_i gamma_i phi(x_i)``; started from Kwok-Tsang, stopped
    per point when the relative step is below ``tol``.

Training data may be a numpy array, a scipy sparse matrix or a dask array
(out of core); it is only ever read a row block at a time.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.linalg

from .kernels import RBF, Kernel, Linear
from .linalg import DEFAULT_BLOCK, Centering, as_dense, dense_rows

__all__ = [
    "METHODS",
    "fit_ridge",
    "ridge_preimage",
    "kwok_tsang_preimage",
    "fixed_point_preimage",
    "feature_sq_distances",
    "nearest_training_points",
]

METHODS = ("ridge", "kwok-tsang", "fixed-point")

#: query points per batch: with training row blocks of DEFAULT_BLOCK rows the
#: temporaries stay at a few 10 MB
_QUERY_BATCH = 512


# -- training data access ---------------------------------------------------------


def iter_row_blocks(X: Any, block: int = DEFAULT_BLOCK) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(start, stop, rows)`` over the training data, one row block in memory at a time."""
    n = X.shape[0]
    for s in range(0, n, block):
        e = min(s + block, n)
        yield s, e, dense_rows(X, s, e)


def take_rows(X: Any, idx: np.ndarray) -> np.ndarray:
    """``X[idx]`` (any shape of integer ``idx``) as dense float64 ``idx.shape + (d,)``.

    Each distinct row is read once, in increasing order (what Zarr and dask
    read fastest).
    """
    uniq, inv = np.unique(idx.ravel(), return_inverse=True)
    rows = as_dense(X[uniq])
    return rows[inv].reshape(idx.shape + (rows.shape[1],))


# -- ridge (Bakir 2004) ----------------------------------------------------------


def fit_ridge(
    Z: np.ndarray,
    X: Any,
    kernel: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
    alpha: float,
    n_landmarks: int | None = None,
    random_state: Any = None,
    block: int = DEFAULT_BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """Kernel ridge map from scores to inputs.

    Parameters
    ----------
    Z : ndarray of shape (n, k)
        Training scores.
    X : array-like of shape (n, d)
        Training inputs (numpy, dense-able sparse, or dask; read by row blocks
        when landmarks are used).
    kernel : callable
        ``kernel(A, B)`` -> float64 block ``k(A_i, B_j)``; ``kernel(A, None)``
        means ``B = A``.
    alpha : float
        Ridge penalty (``>= 0``).
    n_landmarks : int, optional
        Number m of landmark points.  ``None`` or ``>= n``: the exact solve
        ``(K + alpha I) A = X`` on all n points (scikit-learn's map).  Smaller:
        subset of regressors on m random points, ``(K_nm^T K_nm + alpha K_mm) A
        = K_nm^T X``, accumulated over row blocks of all n points (O(m^2 + m d)
        memory).  With m = n and K invertible both give the same map.
    random_state : int, Generator or None
        Choice of landmarks.
    block : int
        Training rows read at a time (landmark map).

    Returns
    -------
    landmarks : ndarray of shape (m,)
        Indices of the training points the map is expanded on.
    dual_coef : ndarray of shape (m, d)
        Pre-image of z: ``kernel(z, Z[landmarks]) @ dual_coef``.
    """
    n = Z.shape[0]
    if n_landmarks is None or n_landmarks >= n:
        K = kernel(Z, None)
        K.flat[:: n + 1] += alpha
        Xd = take_rows(X, np.arange(n)) if not isinstance(X, np.ndarray) else np.asarray(X, dtype=np.float64)
        # K + alpha I is symmetric positive definite for a PSD kernel and alpha > 0
        # (scikit-learn's assumption too); fall back to a general solve otherwise.
        try:
            dual = scipy.linalg.solve(K, Xd, assume_a="pos", overwrite_a=False)
        except np.linalg.LinAlgError:
            dual = _solve_indefinite(K, Xd, alpha)
        return np.arange(n), dual
    rng = np.random.default_rng(random_state)
    landmarks = np.sort(rng.choice(n, size=int(n_landmarks), replace=False))
    Zm = Z[landmarks]
    m = landmarks.size
    A = np.zeros((m, m))
    B = None
    for s, e, Xb in iter_row_blocks(X, block):
        Knm = kernel(Z[s:e], Zm)
        A += Knm.T @ Knm
        B = Knm.T @ Xb if B is None else B + Knm.T @ Xb
    A += alpha * kernel(Zm, None)
    # a small jitter keeps the normal equations solvable when alpha = 0
    A.flat[:: m + 1] += 1e-12 * max(np.trace(A) / m, np.finfo(float).tiny)
    dual = scipy.linalg.lstsq(A, B)[0] if alpha == 0 else scipy.linalg.solve(A, B, assume_a="sym")
    return landmarks, dual


def _solve_indefinite(K: np.ndarray, Xd: np.ndarray, alpha: float) -> np.ndarray:
    """``(K + alpha I)^-1 X`` where it is not positive definite (an indefinite kernel); refused where it is singular
    to working precision (alpha = 0: K of n scores in k << n dimensions), whose least-squares solution maps
    new scores to points far outside the data (scikit-learn raises there too)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", scipy.linalg.LinAlgWarning)  # ill-conditioned: singular to rounding
        try:
            return scipy.linalg.solve(K, Xd, assume_a="sym")
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgWarning):
            # a ridge that counts is one against K's own scale (the kernel on scores far from 0 is large)
            larger = max(1e-3, 10 * alpha, 1e-3 * float(np.abs(np.diag(K) - alpha).mean()))
            raise np.linalg.LinAlgError(
                f"the pre-image map's system K(scores, scores) + alpha I is singular with alpha={alpha!r}: pass a "
                f"larger alpha (e.g. {larger:.3g}) to fit_inverse_transform's ridge map, or use inverse_transform's "
                "method='kwok-tsang' or 'fixed-point'.") from None


def ridge_preimage(Z: np.ndarray, Z_landmarks: np.ndarray, dual_coef: np.ndarray,
                   kernel: Callable[[np.ndarray, np.ndarray | None], np.ndarray]) -> np.ndarray:
    """``kernel(Z, Z_landmarks) @ dual_coef``, shape (m, d)."""
    return kernel(Z, Z_landmarks) @ dual_coef


# -- Kwok & Tsang 2003 ------------------------------------------------------------


def _check_kernel(kernel: Any, method: str, allowed: tuple[type, ...]) -> Kernel:
    if not isinstance(kernel, allowed):
        names = " or ".join(c.name for c in allowed)
        got = getattr(kernel, "name", None) or ("precomputed" if kernel == "precomputed" else repr(kernel))
        raise ValueError(
            f"method={method!r} needs the {names} kernel (its input-space distances follow from kernel values); "
            f"this model uses kernel {got!r}. Use method='ridge' (fit_inverse_transform=True), which works "
            "for any kernel."
        )
    return kernel


def feature_sq_distances(Z: np.ndarray, E: np.ndarray, kdiag_centered: np.ndarray) -> np.ndarray:
    """``||P phi(x) - phi(x_i)||^2 = ||z||^2 - 2 z.e_i + K~_ii`` for a block of training points.

    Parameters
    ----------
    Z : ndarray of shape (m, k)
        Scores of the query points.
    E : ndarray of shape (b, k)
        Training scores ``U sqrt(lambda)`` of b training points.
    kdiag_centered : ndarray of shape (b,)
        ``K~_ii = k(x_i, x_i) - 2 r_i + c`` of those points.

    Returns
    -------
    D : ndarray of shape (m, b), clipped at 0 (round-off).
    """
    D = -2.0 * (Z @ E.T)
    D += np.einsum("ij,ij->i", Z, Z)[:, None]
    D += kdiag_centered[None, :]
    return np.maximum(D, 0.0, out=D)


def nearest_training_points(Z: np.ndarray, E: np.ndarray, kdiag_centered: np.ndarray,
                            n_neighbors: int, block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """The ``n_neighbors`` training points nearest (in feature space) to each query.

    Scans the training scores block by block, keeping a running top list, so
    memory is O(m (block + n_neighbors)).

    Returns
    -------
    idx : ndarray of shape (m, n_neighbors)
        Training indices, nearest first.
    d2 : ndarray of shape (m, n_neighbors)
        Their feature-space squared distances.
    """
    m, n = Z.shape[0], E.shape[0]
    nn = min(n_neighbors, n)
    best_d = np.full((m, 0), np.inf)
    best_i = np.zeros((m, 0), dtype=np.int64)
    rows = np.arange(m)[:, None]
    for s in range(0, n, block):
        e = min(s + block, n)
        D = feature_sq_distances(Z, E[s:e], kdiag_centered[s:e])
        cand_d = np.hstack([best_d, D])
        cand_i = np.hstack([best_i, np.broadcast_to(np.arange(s, e), D.shape)])
        if cand_d.shape[1] > nn:
            part = np.argpartition(cand_d, nn - 1, axis=1)[:, :nn]
            cand_d, cand_i = cand_d[rows, part], cand_i[rows, part]
        best_d, best_i = cand_d, cand_i
    order = np.argsort(best_d, axis=1, kind="stable")
    return best_i[rows, order], best_d[rows, order]


def _input_sq_distances(kernel: Kernel, d2: np.ndarray) -> np.ndarray:
    """Input-space squared distances implied by feature-space ones."""
    if isinstance(kernel, Linear):
        return d2
    # rbf: ||phi(x) - phi(y)||^2 = 2 - 2 exp(-g |x - y|^2).  P phi(x) is not a
    # unit vector, so d2 may reach 2 for far points: cap the log's argument.
    return -np.log(np.clip(1.0 - 0.5 * d2, 1e-300, 1.0)) / kernel.gamma


def kwok_tsang_preimage(Z: np.ndarray, X: Any, E: np.ndarray, kdiag_centered: np.ndarray, kernel: Any,
                        n_neighbors: int = 10) -> np.ndarray:
    """Closed-form pre-images of Kwok & Tsang (2003).

    Parameters
    ----------
    Z : ndarray of shape (m, k)
        Scores to invert.
    X : array-like of shape (n, d)
        Training inputs (numpy, scipy sparse or dask; only neighbour rows are read).
    E : ndarray of shape (n, k)
        Training scores.
    kdiag_centered : ndarray of shape (n,)
        Diagonal of the centred training kernel matrix.
    kernel : Kernel
        rbf or linear.
    n_neighbors : int
        Neighbours the pre-image is placed among (at least 2; rank of the
        local coordinate system is at most ``min(d, n_neighbors - 1)``).

    Returns
    -------
    X_pre : ndarray of shape (m, d)
    """
    kernel = _check_kernel(kernel, "kwok-tsang", (RBF, Linear))
    if not isinstance(n_neighbors, numbers.Integral) or isinstance(n_neighbors, bool) or n_neighbors < 2:
        raise ValueError(f"n_neighbors={n_neighbors!r} is invalid; it must be an integer >= 2 (e.g. 10).")
    out = np.empty((Z.shape[0], X.shape[1]))
    for s in range(0, Z.shape[0], _QUERY_BATCH):
        e = min(s + _QUERY_BATCH, Z.shape[0])
        idx, d2 = nearest_training_points(Z[s:e], E, kdiag_centered, n_neighbors)
        delta2 = _input_sq_distances(kernel, d2)
        Xn = take_rows(X, idx)  # (b, nn, d)
        xbar = Xn.mean(axis=1)
        C = Xn - xbar[:, None, :]
        # Neighbours in their own principal coordinates: C = u diag(s) vh, so neighbour j sits at u_j * s and the
        # least-squares position z satisfying |z - coord_j|^2 ~ delta_j^2 is z = -1/2 pinv(u s) (delta^2 - d0^2).
        u, sv, vh = np.linalg.svd(C, full_matrices=False)
        d0 = np.einsum("bjd,bjd->bj", C, C)
        # A direction counts only where the neighbours spread along it beyond rounding: that of their coordinates
        # (as numpy's matrix_rank counts it), and with s^2 beyond that of the squared distances (an error e moves
        # the coordinate by e / s).  Repeated rows spread by the mean's rounding alone (1 / s gave 1e13).
        terms = np.einsum("ij,ij->i", Z[s:e], Z[s:e])[:, None] + np.abs(kdiag_centered[idx])  # feature_sq_distances'
        noise = len(sv[0]) * (_input_sq_distances(kernel, d2 + np.finfo(E.dtype).eps * terms) - delta2).max(axis=1)
        floor = np.finfo(np.result_type(C.dtype, np.float32)).eps * max(C.shape[1:]) * np.abs(Xn).max(axis=(1, 2))
        cut = (sv > sv[:, :1] * 1e-10) & (sv > floor[:, None]) & (sv * sv > noise[:, None])
        inv_s = np.where(cut, 1.0 / np.where(cut, sv, 1.0), 0.0)
        coords = -0.5 * inv_s * np.einsum("bjr,bj->br", u, delta2 - d0)
        out[s:e] = xbar + np.einsum("br,brd->bd", coords, vh)
    return out


# -- Mika et al. 1999 --------------------------------------------------------------


def fixed_point_preimage(Z: np.ndarray, X: Any, W: np.ndarray, kernel: Any, x0: np.ndarray, *,
                         tol: float = 1e-6, max_iter: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point pre-images for the rbf kernel (Mika et al. 1999).

    ``P phi(x) = sum_i gamma_i phi(x_i)`` with ``gamma = w - (1^T w)/n + 1/n``,
    ``w = W z`` (``W = U / sqrt(lambda)``: centering folded in).  Each iteration
    is one pass over the training rows, all queries at once.

    Parameters
    ----------
    Z : ndarray of shape (m, k)
    X : array-like of shape (n, d)
        Training inputs.
    W : ndarray of shape (n, k)
        Projection weights ``U / sqrt(lambda)`` (zero columns for zero eigenvalues).
    kernel : RBF
    x0 : ndarray of shape (m, d)
        Starting points (Kwok-Tsang pre-images).
    tol : float
        A point stops when ``|x_new - x| <= tol * max(|x|, 1e-12)``.
    max_iter : int
        Passes at most.

    Returns
    -------
    X_pre : ndarray of shape (m, d)
    n_iter : ndarray of shape (m,)
        Iterations each point took (``max_iter`` where it did not converge).
    """
    kernel = _check_kernel(kernel, "fixed-point", (RBF,))
    if not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not tol >= 0:
        raise ValueError(f"tol={tol!r} is invalid; it must be a number >= 0 (e.g. 1e-6).")
    if not isinstance(max_iter, numbers.Integral) or isinstance(max_iter, bool) or max_iter < 1:
        raise ValueError(f"max_iter={max_iter!r} is invalid; it must be a positive integer.")
    n = W.shape[0]
    x = np.array(x0, dtype=np.float64, copy=True)
    m = x.shape[0]
    n_iter = np.full(m, max_iter)
    active = np.arange(m)
    # gamma_i = (W z)_i + (1 - 1^T W z) / n: the constant part per query
    const = (1.0 - Z @ W.sum(axis=0)) / n
    WZ = Z @ W.T if n * m <= 16_000_000 else None  # (m, n) weights if affordable
    for it in range(max_iter):
        if active.size == 0:
            break
        xa = x[active]
        num = np.zeros_like(xa)
        den = np.zeros(active.size)
        for s, e, Xb in iter_row_blocks(X):
            G = WZ[active, s:e] if WZ is not None else Z[active] @ W[s:e].T
            G = G + const[active, None]
            G *= kernel.block(xa, Xb, np.float64)
            num += G @ Xb
            den += G.sum(axis=1)
        # Mika's iteration breaks down where sum_i gamma_i k(x, x_i) -> 0 (x far
        # from every point the expansion weighs): keep the last iterate there.
        ok = np.abs(den) > 1e-12
        new = np.where(ok[:, None], num / np.where(ok, den, 1.0)[:, None], xa)
        step = np.linalg.norm(new - xa, axis=1)
        x[active] = new
        done = (~ok) | (step <= tol * np.maximum(np.linalg.norm(xa, axis=1), 1e-12))
        n_iter[active[done]] = it + 1
        active = active[~done]
    return x, n_iter


def inverse(method: str, Z: np.ndarray, *, X_fit: Any, kernel: Any, ridge_kernel: Callable, eigenvalues: np.ndarray,
            eigenvectors: np.ndarray, centering: Centering, kdiag_centered: np.ndarray,
            ridge: tuple[np.ndarray, np.ndarray] | None = None, n_neighbors: int = 10, tol: float = 1e-6,
            max_iter: int = 100) -> np.ndarray:
    """Pre-images of scores ``Z`` by ``method`` (see :meth:`dkpca.KernelPCA.inverse_transform`).

    ``ridge`` is ``(landmark scores, dual coefficients)`` of the map learned
    at fit; the other methods need the training data, the kernel and the
    model's spectrum and centring.
    """
    k = eigenvalues.shape[0]
    if Z.shape[1] != k:
        raise ValueError(f"X has {Z.shape[1]} columns but the model has {k} components; pass scores from transform.")
    if method == "ridge":
        return ridge_preimage(Z, ridge[0], ridge[1], ridge_kernel)
    if method == "fixed-point":  # refused as itself, not as the Kwok-Tsang start it would take first
        _check_kernel(kernel, method, (RBF,))
    E = eigenvectors * np.sqrt(eigenvalues)
    x0 = kwok_tsang_preimage(Z, X_fit, E, kdiag_centered, kernel, n_neighbors=n_neighbors)
    if method == "kwok-tsang":
        return x0
    W = centering.projection_weights(eigenvalues, eigenvectors).W
    return fixed_point_preimage(Z, X_fit, W, kernel, x0, tol=tol, max_iter=max_iter)[0]
