"""The one post-processing policy for computed spectra: scikit-learn's.

Every path -- the estimator in memory, ``dkpca.fit`` out of core, every
solver -- publishes eigenpairs through :func:`postprocess`, so that the same
kernel gives the same components whichever way it was solved.  The rules are
those of scikit-learn's ``KernelPCA`` (its eigenvalue check and its sign
flip), restated here rather than imported because they are private there:

* eigenvalues are ranked by value, largest first -- never by magnitude, which
  would promote large negative eigenvalues of an indefinite kernel above
  small positive ones -- and eigenvectors (and residuals) follow them;
* each eigenvector's sign makes its largest-magnitude entry positive
  (scikit-learn's ``svd_flip`` rule for ``u``), so repeated fits and
  different solvers give identical output;
* the eigenvalues of a centred kernel matrix must be those of a positive
  semi-definite matrix: all negative, or a negative one that is significant
  (below both ``-ratio * lambda_max`` and ``-floor``), is an error with
  scikit-learn's message; smaller negatives are round-off and become 0, as
  do positive eigenvalues below ``small * lambda_max`` (numerically zero);
* "numerically zero" is measured against the size of K, not only against
  the top eigenvalue: ``lambda < max(small * lambda_max, small_scale * n |c|)``,
  where ``n c = 1^T K 1 / n`` is the Rayleigh quotient of K at the constant
  vector -- the part of K that centring cancels.  Rounding K (and the products
  with it) leaves errors in every eigenvalue of K~ on that scale (Weyl;
  ``||K|| >= n |c|``), so a K~ that is rounding noise -- identical points,
  a kernel constant on the data -- has only zero components, where the ratio
  to its own (noise) top eigenvalue would keep them all (``small_scale``:
  :func:`zero_threshold`);
* components with a zero eigenvalue are dropped on request (scikit-learn:
  ``remove_zero_eig=True`` or ``n_components=None``; ``dkpca.fit``: always,
  their scores being rounding noise); when that drops every component, a
  ``UserWarning`` says so (scikit-learn keeps none either, silently);
* ``n_components`` given as a fraction f in (0, 1) keeps the smallest k whose
  cumulative explained-variance ratio ``sum_{i<=k} lambda_i / trace(K~)``
  reaches f (:func:`components_for_fraction`, :func:`keep_fraction`), as
  scikit-learn's ``PCA(n_components=f)`` -- against the exact trace of K~,
  which dkpca knows without computing every eigenvalue.

The thresholds depend on the precision the eigenvalues were computed in, as
in scikit-learn: ``(ratio, floor, small) = (1e-5, 1e-10, 1e-12)`` in double
precision, ``(5e-3, 1e-6, 2e-7)`` in single.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from .result import EigResult

__all__ = ["postprocess", "check_eigenvalues", "operator_zero_threshold", "check_magnitude_ranking", "flip_signs",
           "components_for_fraction", "keep_fraction", "NOT_PSD_HINT", "zero_threshold"]

#: unit roundoff of float64
_U64 = float(np.finfo(np.float64).eps) / 2

#: (significant negative ratio, significant negative value, numerically zero ratio) by precision
_THRESHOLDS = {
    np.dtype(np.float64): (1e-5, 1e-10, 1e-12),
    np.dtype(np.float32): (5e-3, 1e-6, 2e-7),
}

#: what dkpca adds to scikit-learn's message: what to do about it
NOT_PSD_HINT = (" The kernel is not positive semi-definite on this data (e.g. sigmoid): ask for fewer components, "
                "or use a positive semi-definite kernel (rbf, laplacian, poly with coef0 >= 0, linear, cosine).")


def flip_signs(U: np.ndarray) -> np.ndarray:
    """``U`` with each column's largest-magnitude entry made positive (a new array).

    scikit-learn's ``svd_flip(u, None)`` rule: the first entry of largest
    magnitude decides; a zero column is left as it is.
    """
    U = np.array(U, dtype=np.float64, copy=True)
    if U.size == 0:
        return U
    top = U[np.argmax(np.abs(U), axis=0), np.arange(U.shape[1])]
    U *= np.where(top < 0, -1.0, 1.0)
    return U


#: the rounding noise of K~'s eigenvalues where K~ vanishes (identical points), in units of ``u n |c|`` and per
#: sqrt(n): at most 1.33 measured (float64, 6 kernels x 4 solvers x K in memory, stored or recomputed, n = 10 to
#: 10,000: sums of n terms, whose rounding grows as sqrt(n)), 2.26 in a later sweep (~5,000 fits at n = 10 to
#: 3,000: a cubic on identical rows at 1e6, K recomputed in tiles of n/3; 2.17 at n = 3,000); 4 leaves 1.8x that.
#: 8 zeroed real components that every solver computes to 1e-5 of themselves: a linear kernel on 2,000 3-D
#: points at 1e6, whose third eigenvalue, 179 (0.004 off in every solver), lay under 8 u sqrt(n) n c = 236
SCALE_NOISE = 4.0


def zero_threshold(top: float, precision: Any = np.float64, scale: float | None = None,
                   n: int | None = None) -> float:
    """The bound below which an eigenvalue is numerically zero: ``max(small * top, small_scale * |scale|)``.

    ``top``: the largest computed eigenvalue; ``scale``: ``n c = 1^T K 1 / n``
    of the kernel matrix (None: scikit-learn's rule, relative to ``top``
    alone); ``small`` is scikit-learn's ratio for ``precision`` (1e-12 in
    double, 2e-7 in single: about 4,500 and 3.4 units of rounding).
    ``small_scale`` is ``small``, but in double precision of ``n`` rows no
    more than :data:`SCALE_NOISE` ``u sqrt(n)``: the rounding that products
    with K leave in K~'s eigenvalues, ~``u n |c| sqrt(n)``.  At 1e-12 it
    zeroed real components of data far from the origin -- a linear kernel
    on raw breast-cancer measurements, whose smallest component (4.0e-4,
    scikit-learn's and PCA's to 4 digits) is ~3,000 times that rounding.
    """
    dt = np.dtype(np.float32) if np.dtype(precision) == np.float32 else np.dtype(np.float64)
    small = _THRESHOLDS[dt][2]
    small_scale = small if n is None or dt == np.float32 else min(small, SCALE_NOISE * _U64 * np.sqrt(n))
    scale = abs(float(scale)) if scale is not None and np.isfinite(scale) else 0.0
    return max(small * float(top), small_scale * scale)


def operator_zero_threshold(operator: Any, top: float) -> float:
    """:func:`zero_threshold` for the eigenvalues of ``operator``'s K~: its K's precision, n, and its centring's
    ``n c`` where known (before it is, scikit-learn's rule)."""
    centering = getattr(operator, "centering", None)
    return zero_threshold(top, getattr(operator, "dtype", np.float64),
                          None if centering is None else centering.cancelled, operator.n)


def check_eigenvalues(eigenvalues: np.ndarray, precision: Any = None, scale: float | None = None,
                      n: int | None = None) -> np.ndarray:
    """The eigenvalues of a PSD matrix, validated and cleaned (a new float64 array).

    Parameters
    ----------
    eigenvalues : array-like of shape (k,)
        Computed eigenvalues, in any order.
    precision : dtype, optional
        Precision of the matrix they were computed from (float32 or float64);
        selects the thresholds.  Default: the eigenvalues' own dtype.
    scale : float, optional
        ``n c = 1^T K 1 / n`` of the uncentred kernel matrix: eigenvalues up
        to :func:`zero_threshold` of it are zero too.
    n : int, optional
        K's rows (:func:`zero_threshold`'s rounding of sums of n terms).

    Returns
    -------
    ndarray of shape (k,)
        Round-off negatives and numerically zero positives set to 0.

    Raises
    ------
    ValueError
        All eigenvalues negative, or significant negative eigenvalues
        (scikit-learn's messages, followed by :data:`NOT_PSD_HINT`).
    """
    lam = np.asarray(eigenvalues)
    dt = np.dtype(precision) if precision is not None else lam.dtype
    ratio, floor, _ = _THRESHOLDS[np.dtype(np.float32) if dt == np.float32 else np.dtype(np.float64)]
    lam = np.array(lam, dtype=np.float64, copy=True)
    if lam.size == 0:
        return lam
    top, low = lam.max(), lam.min()
    rounding = zero_threshold(max(top, 0.0), dt, scale, n)  # K~'s: what is under it either side is zero
    if top < 0 and low >= -rounding:  # all of them rounding: all zero, no refusal
        return np.zeros_like(lam)
    if top < 0:
        raise ValueError(
            f"All eigenvalues are negative (maximum is {top:g}). Either the matrix is not PSD, or there was an "
            "issue while computing the eigendecomposition of the matrix." + NOT_PSD_HINT
        )
    if low < -ratio * top and low < -floor and low < -rounding:
        rel = -low / top if top > 0 else np.inf
        raise ValueError(
            f"There are significant negative eigenvalues ({rel:g} of the maximum positive). Either the matrix is "
            "not PSD, or there was an issue while computing the eigendecomposition of the matrix." + NOT_PSD_HINT
        )
    lam[lam < 0] = 0.0
    lam[(lam > 0) & (lam < rounding)] = 0.0
    return lam


def check_magnitude_ranking(res: EigResult, precision: Any = None) -> None:
    """scikit-learn's error where its randomized KernelPCA, which ranks by magnitude, would keep a negative one.

    dkpca's subspace iteration returns the k largest eigenvalues by value;
    scikit-learn's keeps the k largest in magnitude, so on an indefinite
    kernel it picks up a negative eigenvalue of larger magnitude than the
    k-th positive one and raises :func:`check_eigenvalues`' error.  The
    estimator raises it too for a precomputed matrix -- one whose origin dkpca
    cannot know (an isomap matrix, say): there scikit-learn's outcome is kept
    (its test ``test_precomputed_kernel_not_psd``); a named indefinite kernel
    (sigmoid) gets the top eigenpairs by value.  Raised only where the solver
    saw such an eigenvalue: ``info["lowest_ritz"]``, a Ritz value, is never
    below the lowest eigenvalue, so it is a witness, never a guess.
    """
    low = res.info.get("lowest_ritz")
    lam = np.asarray(res.eigenvalues, dtype=np.float64)
    if low is not None and lam.size and -low > lam.min():
        check_eigenvalues(np.append(lam, low), precision)


def postprocess(res: EigResult, *, remove_zero: bool, precision: Any = None, scale: float | None = None) -> EigResult:
    """The published spectrum of a solver's result (a new :class:`EigResult`).

    Ranked by value (descending, ties kept in the solver's order), signed by
    :func:`flip_signs`, checked and cleaned by :func:`check_eigenvalues`;
    residuals follow their eigenpairs.

    Parameters
    ----------
    res : EigResult
        As returned by a solver (any order).
    remove_zero : bool
        Drop components whose eigenvalue is 0 after cleaning (scikit-learn's
        ``remove_zero_eig or n_components is None``; ``dkpca.fit`` passes True).
        ``info["zero_eigenvalues_removed"]`` says how many were.
    precision : dtype, optional
        Precision of the kernel matrix (float32 Gram stores get scikit-learn's
        single-precision thresholds); default: the eigenvalues' dtype.
    scale : float, optional
        ``n c = 1^T K 1 / n`` of the kernel matrix (``Centering.cancelled``):
        eigenvalues at its rounding level are zero (:func:`zero_threshold`).

    Returns
    -------
    EigResult

    Raises
    ------
    ValueError
        The spectrum is not that of a PSD matrix (see :func:`check_eigenvalues`).
    """
    raw = np.asarray(res.eigenvalues)
    n = np.asarray(res.eigenvectors).shape[0]  # K's rows
    lam = check_eigenvalues(raw, raw.dtype if precision is None else precision, scale, n)
    # Rank by the computed values, not the cleaned ones: cleaning maps several
    # of them to 0, and their order should stay the solver's, not the sort's.
    order = np.argsort(-raw.astype(np.float64), kind="stable")
    lam = lam[order]
    U = flip_signs(np.asarray(res.eigenvectors)[:, order])
    residuals = np.asarray(res.residuals, dtype=np.float64)[order]
    info = dict(res.info)
    if remove_zero:
        keep = lam > 0
        info["zero_eigenvalues_removed"] = int(keep.size - np.count_nonzero(keep))
        if keep.size and not keep.any():
            top = float(raw.max()) if raw.size else 0.0
            limit = zero_threshold(top, raw.dtype if precision is None else precision, scale, n)
            warnings.warn(
                f"all {keep.size} components are numerically zero (largest eigenvalue {top:.3g} <= {limit:.3g}, the "
                "rounding level of this kernel matrix): the centred kernel matrix vanishes on this data (identical "
                "points, or a kernel constant on them), so no component is kept, as scikit-learn's remove_zero_eig "
                "does. Check the data, or choose kernel parameters under which the points differ (e.g. a larger "
                "gamma).", UserWarning, stacklevel=3)
        lam, U, residuals = lam[keep], U[:, keep], residuals[keep]
    return replace(res, eigenvalues=lam, eigenvectors=np.ascontiguousarray(U), residuals=residuals, info=info)


def components_for_fraction(eigenvalues: np.ndarray, trace: float, fraction: float) -> int | None:
    """The smallest k with ``sum(eigenvalues[:k]) / trace >= fraction``, or None if all of them fall short.

    Parameters
    ----------
    eigenvalues : array-like of shape (m,)
        The m largest eigenvalues of K~ (any order; negatives count as 0).
    trace : float
        ``trace(K~)``, the sum of *all* n eigenvalues.
    fraction : float
        Wanted explained-variance ratio, in (0, 1).

    Returns
    -------
    int or None
        None when the m eigenvalues given explain less than ``fraction``
        (more are needed).  A zero ``trace`` (K~ = 0: nothing to explain)
        returns ``min(1, m)``.
    """
    lam = np.sort(np.maximum(np.asarray(eigenvalues, dtype=np.float64), 0.0))[::-1]
    if trace <= 0:
        return min(1, lam.size)
    # the ratio of the cumulative sum, as explained_variance_ratio_ sums up
    reached = np.flatnonzero(np.cumsum(lam / trace) >= fraction)
    return int(reached[0]) + 1 if reached.size else None


def keep_fraction(res: EigResult, trace: float, fraction: float) -> EigResult:
    """A published spectrum (after :func:`postprocess`) cut to the smallest k reaching ``fraction``.

    All components are kept when they do not reach it (the caller says why:
    a solver stopped short, or rounding in a complete spectrum).
    ``info["fraction"]`` gets ``target``, ``explained`` (the kept components'
    cumulative ratio) and ``reached``.
    """
    k = components_for_fraction(res.eigenvalues, trace, fraction)
    reached = k is not None
    k = res.eigenvalues.size if k is None else k
    lam = res.eigenvalues[:k]
    info = dict(res.info)
    info["fraction"] = {**dict(info.get("fraction") or {}), "target": float(fraction),
                        "explained": float(lam.sum() / trace) if trace > 0 else 0.0, "reached": reached}
    return replace(res, eigenvalues=lam, eigenvectors=np.ascontiguousarray(res.eigenvectors[:, :k]),
                   residuals=np.asarray(res.residuals)[:k], info=info)
