"""Centring in feature space, written once: the notation every module uses (r, c, K~, W).

With row means ``r = K 1 / n`` and grand mean ``c = 1^T K 1 / n^2``::

    K~   = K - 1 r^T - r 1^T + c 1 1^T                    (never materialised out of core)
    K~ V = K V - 1 (r^T V) - r (1^T V) + c 1 (1^T V)     (one pass over K per product)

A block between any rows R and columns C -- training rows, or new points whose
"row means" are ``mean(k(x))`` -- is centred by the same rank-one rule,
``K~_RC = K_RC - r_R 1^T - 1 r_C^T + c``, which gives the out-of-sample formula
``k~(x) = k(x) - r - mean(k(x)) 1 + c 1`` (Neal's notes).  Projections use
``W = U / sqrt(lambda)``; their centred form needs only ``r^T W`` and
``1^T W`` (:class:`ProjectionWeights`), so centring a new point costs O(k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Centering", "ProjectionWeights", "center_block", "center_diagonal", "center_precomputed"]


def center_block(blk: np.ndarray, r_rows: np.ndarray, r_cols: np.ndarray, c: float) -> np.ndarray:
    """``blk - r_rows 1^T - 1 r_cols^T + c`` in place: the one rank-one centring of a kernel block.

    For training rows/columns pass their slices of the row means; for new
    points as rows pass their ``mean(k(x))``: that is the out-of-sample
    centring.
    """
    blk -= np.asarray(r_rows)[:, None]
    blk -= np.asarray(r_cols)[None, :]
    blk += c
    return blk


def center_diagonal(kxx: np.ndarray, r_rows: np.ndarray, r_cols: np.ndarray, c: float) -> np.ndarray:
    """The diagonal of :func:`center_block`: ``k(x, x) - r_rows - r_cols + c`` (a new array)."""
    return np.asarray(kxx, dtype=np.float64) - r_rows - r_cols + c


@dataclass(frozen=True)
class ProjectionWeights:
    """``W = U / sqrt(lambda)`` with the sums that centre new points' scores.

    Attributes
    ----------
    W : ndarray of shape (n, k)
        Zero columns for components whose eigenvalue is not positive (their
        scores are 0, as in scikit-learn).
    rW : ndarray of shape (k,)
        ``r^T W``.
    sW : ndarray of shape (k,)
        ``1^T W``.
    """

    W: np.ndarray
    rW: np.ndarray
    sW: np.ndarray


@dataclass(frozen=True)
class Centering:
    """The centring statistics of a training kernel matrix and every formula using them.

    Attributes
    ----------
    row_means : ndarray of shape (n,)
        ``r = K 1 / n``.
    grand_mean : float
        ``c = 1^T K 1 / n^2``.
    diag_sum : float
        ``trace(K)``.
    """

    row_means: np.ndarray
    grand_mean: float
    diag_sum: float

    # -- construction ------------------------------------------------------
    @classmethod
    def from_row_sums(cls, row_sums: np.ndarray, diag_sum: float) -> Centering:
        """Statistics from ``K 1`` (float64) and ``trace(K)``."""
        row_sums = np.asarray(row_sums, dtype=np.float64)
        n = row_sums.shape[0]
        return cls(row_sums / n, float(row_sums.sum() / n**2), float(diag_sum))

    @classmethod
    def of_matrix(cls, K: np.ndarray) -> Centering:
        """Statistics of a kernel matrix held in memory (sums in float64)."""
        return cls.from_row_sums(K.sum(axis=1, dtype=np.float64), float(np.trace(K, dtype=np.float64)))

    @property
    def n(self) -> int:
        return int(self.row_means.shape[0])

    @property
    def trace(self) -> float:
        """``trace(K~) = trace(K) - n c``: exact, without any eigenvalue."""
        return float(self.diag_sum - self.cancelled)

    @property
    def cancelled(self) -> float:
        """``n c = 1^T K 1 / n = trace(K) - trace(K~)``: the part of K that centring removes.

        The Rayleigh quotient of K at the constant vector, so ``||K|| >= |n c|``:
        the scale of the rounding errors left in K~'s eigenvalues (the zero
        rule, :func:`dkpca.solvers.spectrum.zero_threshold`).
        """
        return float(self.n * self.grand_mean)

    # -- training-side formulas -------------------------------------------
    def _correction(self, V: np.ndarray) -> np.ndarray:
        """``K V - K~ V = 1 (r^T V) + r (1^T V) - c 1 (1^T V)``: what centring takes from a product."""
        sV = V.sum(axis=0)
        corr = np.outer(self.row_means, sV)
        corr += (self.row_means @ V - self.grand_mean * sV)[None, :]
        return corr

    def center_product(self, KV: np.ndarray, V: np.ndarray) -> np.ndarray:
        """``K~ V`` from ``K V`` by the rank-one corrections (``KV`` is overwritten)."""
        KV -= self._correction(V)
        return KV

    def uncenter_product(self, KtV: np.ndarray, V: np.ndarray) -> np.ndarray:
        """``K V`` from ``K~ V`` (``KtV`` is overwritten): an old fit's exact products, kept for an update."""
        KtV += self._correction(V)
        return KtV

    def center_block(self, blk: np.ndarray, r_rows: np.ndarray, r_cols: np.ndarray) -> np.ndarray:
        """:func:`center_block` with this matrix's grand mean (in place)."""
        return center_block(blk, r_rows, r_cols, self.grand_mean)

    def center_matrix(self, K: np.ndarray) -> np.ndarray:
        """``H K H`` of the training matrix itself, in place."""
        return self.center_block(K, self.row_means, self.row_means)

    def centered_diag(self, diag: np.ndarray) -> np.ndarray:
        """``K~_ii = k(x_i, x_i) - 2 r_i + c`` of the training points."""
        return center_diagonal(diag, self.row_means, self.row_means, self.grand_mean)

    # -- new points ----------------------------------------------------------
    def feature_norms(self, kxx: np.ndarray, mean_k: np.ndarray) -> np.ndarray:
        """``||phi~(x)||^2 = k(x, x) - 2 mean(k(x)) + c`` of new points."""
        return center_diagonal(kxx, mean_k, mean_k, self.grand_mean)

    def projection_weights(self, eigenvalues: np.ndarray, eigenvectors: np.ndarray) -> ProjectionWeights:
        """``W = U / sqrt(lambda)`` (zero columns where lambda <= 0), ``r^T W`` and ``1^T W``."""
        lam = np.asarray(eigenvalues, dtype=np.float64)
        inv = np.zeros_like(lam)
        nz = lam > 0
        inv[nz] = 1.0 / np.sqrt(lam[nz])
        W = eigenvectors * inv
        return ProjectionWeights(W, self.row_means @ W, W.sum(axis=0))

    def center_scores(self, KW: np.ndarray, mean_k: np.ndarray, weights: ProjectionWeights) -> np.ndarray:
        """Scores ``k~(x)^T W`` of new points from their uncentred ``k(x)^T W`` (``KW`` is overwritten)."""
        KW -= weights.rW[None, :]
        KW -= np.outer(mean_k, weights.sW)
        KW += self.grand_mean * weights.sW[None, :]
        return KW


def center_precomputed(K: np.ndarray) -> Centering | None:
    """Centre a non-symmetric precomputed kernel matrix in place, as scikit-learn's ``KernelCenterer``.

    ``K~ = K - r 1^T - 1 m^T + c`` with the row means ``r`` and the column
    means ``m`` apart (one vector serves both only for a symmetric K), so the
    fit then runs on K~ exactly -- as it would on K~ given already centred.
    Returns the statistics that centre new rows ``K(X_new, X_fit)`` as
    ``KernelCenterer.transform`` does (the column means in place of ``r``),
    or None for a symmetric K, which is left untouched.
    """
    if np.array_equal(K, K.T):
        return None
    cols = K.mean(axis=0, dtype=np.float64)
    rows = K.mean(axis=1, dtype=np.float64)
    stats = Centering(cols, float(cols.mean()), float(np.trace(K, dtype=np.float64)))
    center_block(K, rows, cols, stats.grand_mean)
    return stats
