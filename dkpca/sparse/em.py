"""The weight re-estimation of sparse kernel PCA on one candidate set (pure numpy, m x m).

Notation as in Tipping (2000), seed ``sparse-kpca-tipping-2000.md``.  On the
candidates A (m = |A|), with ``S = W_A^(1/2)`` and ``B = I + sigma^-2 S K_AA S``::

    Sigma         = (W_A^-1 + sigma^-2 K_AA)^-1 = S B^-1 S                 (eq. 11)
    sum_n mu_ni^2 = sigma^-4 [Sigma G Sigma]_ii,  G = K_{:,A}^T K_{:,A}    (eq. 12)
    L = -1/2 [ n log|B| + sigma^-2 sum_n k_nn - sigma^-4 tr(Sigma G) ]   (eqs. 5-8)
    w_i <- sum_n mu_ni^2 / n + Sigma_ii                                   (eq. 13, "em")
    w_i <- sum_n mu_ni^2 / (n gamma_i),  gamma_i = 1 - Sigma_ii / w_i     (eq. 14, "fast")

``L`` omits ``-n D log(sigma^2) / 2`` and the ``2 pi`` term, constant for a
fixed ``sigma^2`` (and infinite for an rbf kernel, whose D is); ``log|B|``
comes from a Cholesky factor of B, whose eigenvalues are >= 1, so tiny
weights never make the factorisation ill-conditioned.

One weight at a time.  With the other weights fixed, ``s_i = phi_i^T
C_-i^-1 phi_i`` and ``Q_i = sum_n (phi_n^T C_-i^-1 phi_i)^2`` (C without i's
term), the likelihood as a function of ``w_i`` alone is

    l_i(w) = -1/2 [ n log(1 + w s_i) - Q_i w / (1 + w s_i) ] + const,

whose derivative has the sign of ``Q_i / (1 + w s_i) - n s_i``: it has a
single maximum, at ``w = (rho_i - 1) / s_i`` with ``rho_i = Q_i / (n s_i)``
if ``rho_i > 1``, and at ``w = 0`` otherwise.  In terms of the current
posterior (``Sigma_ii = w_i / (1 + w_i s_i)``, ``gamma_i = w_i s_i / (1 +
w_i s_i)``, ``sum_n mu_ni^2 = w_i^2 Q_i / (1 + w_i s_i)^2``) the test
``rho_i <= 1`` reads ``sum_n mu_ni^2 <= n gamma_i Sigma_ii``.

Pruning.  The paper states only that the maximum-likelihood estimates of many
``w_i`` are zero (section 3) and that the representing kernels are those with
non-zero weight (section 3.3, Fig. 3); it gives no numerical threshold.  EM
(13) never reaches zero: near it ``w_i`` shrinks like ``1 / t``.  So a weight
is removed (set to zero, for good) while iterating when

* its conditional optimum is zero (``rho_i <= 1``): removing it alone can
  only raise ``L``, and
* it has fallen below ``prune`` times the largest weight -- early on every
  weight has ``rho_i <= 1`` (the uniform start explains more variance than
  the data hold), and removing them all would not be an ascent;

and, whatever the test says, when it is below ``ZERO`` times the largest
(zero to working precision).  Several removals at once are accepted only if
``L`` does not fall; otherwise only the smallest candidate is removed, which
alone never lowers ``L``.  So with ``update="em"`` the recorded likelihood is
non-decreasing, pruning included.

Stopping.  The likelihood has settled when nothing was pruned and it can no
longer improve by more than ``tol`` nats per training point::

    max(|L_t - L_(t-1)|,  sum_i w_i |dL/dw_i|) <= tol * n.

The second term is the first-order gain still available (eq. 10:
``w_i |dL/dw_i| = |sum_n mu_ni^2 - n w_i gamma_i| / (2 w_i)``); for a weight
heading to zero it is, to first order, the gain of removing it.  A test on
the step alone is not enough for EM: EM moves slowly, so its step is small
long before it is near the optimum (on the paper's toy data it falls below
``1e-3 |L|`` at iteration 33, 35 nats short of the optimum).  The scale is
``n``, not ``|L|``: L is defined only up to the omitted constant, so ``|L|``
is no scale at all.  Once L has settled, every weight still heading to zero
(``rho_i <= 1``, whatever its size) is removed -- its maximum-likelihood
value given the others is zero, and EM would need of the order of ``1 /
tol`` more iterations to bring it there -- and the iteration goes on.  Both
updates have converged when L has settled and no such weight is left: every
kept weight then has a positive maximum-likelihood value given the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from ..execution import StopRequested, stopping

__all__ = ["UPDATES", "ZERO", "Posterior", "covariance", "posterior", "update_weights", "likelihood_gap",
           "zero_optimum", "prunable", "run_em"]

UPDATES = ("fast", "em")
#: weights below this fraction of the largest are zero to working precision
ZERO = 1e-12
#: round-off allowed when checking that a removal did not lower L (relative to |L|)
_ROUNDOFF = 1e-13


@dataclass(frozen=True)
class Posterior:
    """Log-likelihood and posterior statistics at weights ``w`` (all > 0).

    Attributes
    ----------
    log_likelihood : float
        Eqs. 5-8 up to the constant.
    mu2 : ndarray of shape (m,)
        ``sum_n mu_ni^2`` (eq. 12).
    sigma : ndarray of shape (m,)
        ``Sigma_ii`` (eq. 11).
    gamma : ndarray of shape (m,)
        ``1 - Sigma_ii / w_i``, computed as ``sigma^-2 [B^-1 S K S]_ii / w_i``,
        which keeps its relative accuracy when ``w_i`` is tiny.
    """

    log_likelihood: float
    mu2: np.ndarray
    sigma: np.ndarray
    gamma: np.ndarray


def covariance(K: np.ndarray, w: np.ndarray, sigma2: float) -> tuple[np.ndarray, np.ndarray, float]:
    """``(Sigma, B^-1, log|B|)`` at weights ``w`` for the kernel matrix ``K`` of the candidates (eq. 11)."""
    m = w.shape[0]
    s = np.sqrt(w)
    B = s[:, None] * K * s[None, :]
    B /= sigma2
    B[np.diag_indices(m)] += 1.0
    try:
        L = scipy.linalg.cholesky(B, lower=True, check_finite=False)
    except np.linalg.LinAlgError:  # B >= I exactly; in rounding, entries ~1e15 leave it indefinite
        raise ValueError(
            f"sparse kernel PCA: B = I + W^1/2 K W^1/2 / noise_variance lost its positive definiteness to rounding "
            f"(its largest entry {float(np.abs(B).max()):.3g}): the kernel's values are too large against "
            f"noise_variance={sigma2:g} for double precision (data far from the origin under a linear or "
            "polynomial kernel); centre or scale the data (subtract its column means), or raise "
            "noise_variance.") from None
    logdet = 2.0 * float(np.sum(np.log(np.diag(L))))
    # B^-1 from the factor (LAPACK potri fills one triangle): half the work of solving against I
    Binv, info = scipy.linalg.lapack.dpotri(L, lower=1)
    if info != 0:  # pragma: no cover - B's eigenvalues are >= 1
        raise np.linalg.LinAlgError(f"inverting B failed (LAPACK dpotri info={info}).")
    Binv = np.tril(Binv)
    Binv += np.tril(Binv, -1).T
    return s[:, None] * Binv * s[None, :], Binv, logdet


def posterior(K: np.ndarray, G: np.ndarray, diag_sum: float, n: int, sigma2: float, w: np.ndarray) -> Posterior:
    """:class:`Posterior` at ``w`` from ``K = K_AA``, ``G = K_{:,A}^T K_{:,A}`` and ``diag_sum = sum_n k_nn``."""
    if w.shape[0] == 0:
        empty = np.zeros(0)
        return Posterior(-0.5 * diag_sum / sigma2, empty, empty, empty)
    Sigma, Binv, logdet = covariance(K, w, sigma2)
    SG = Sigma @ G
    ll = -0.5 * (n * logdet + diag_sum / sigma2 - np.trace(SG) / sigma2**2)
    mu2 = np.einsum("ij,ji->i", SG, Sigma) / sigma2**2
    s = np.sqrt(w)
    gamma = np.einsum("ij,ji->i", Binv * s[None, :], K) * (s / sigma2)
    return Posterior(float(ll), mu2, np.diag(Sigma).copy(), gamma)


def update_weights(post: Posterior, w: np.ndarray, n: int, update: str) -> np.ndarray:
    """New weights by eq. 13 (``"em"``) or eq. 14 (``"fast"``)."""
    if update == "em":
        return post.mu2 / n + post.sigma
    if update == "fast":
        return post.mu2 / (n * np.maximum(post.gamma, np.finfo(float).tiny))
    raise ValueError(f"update={update!r} is invalid; choose one of {UPDATES}.")


def likelihood_gap(post: Posterior, w: np.ndarray, n: int) -> float:
    """``sum_i w_i |dL/dw_i|``: the first-order gain of L still available (eq. 10)."""
    if w.shape[0] == 0:
        return 0.0
    # sum_n mu_ni^2 + n Sigma_ii - n w_i == sum_n mu_ni^2 - n w_i gamma_i, without the cancellation
    return float(np.sum(np.abs(post.mu2 - n * w * post.gamma) / (2.0 * w)))


def zero_optimum(post: Posterior, n: int) -> np.ndarray:
    """Weights whose maximum-likelihood value given the others is zero (``rho_i <= 1``; module docstring)."""
    return post.mu2 <= n * post.gamma * post.sigma


def prunable(post: Posterior, w: np.ndarray, n: int, prune: float) -> np.ndarray:
    """Weights to remove while iterating (module docstring): zero conditional optimum, below ``prune * max(w)``."""
    if w.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    top = w.max()
    return (zero_optimum(post, n) & (w < prune * top)) | (w <= ZERO * top)


def run_em(K: np.ndarray, G: np.ndarray, diag_sum: float, n: int, sigma2: float, w0: np.ndarray,
           update: str, max_iter: int, tol: float, prune: float) -> dict[str, Any]:
    """Re-estimate the weights of one candidate set (module docstring for the rules).

    Parameters
    ----------
    K, G : ndarray of shape (m, m)
        ``K_BB`` and ``K_{:,B}^T K_{:,B}`` (over all n rows) for the candidates B.
    diag_sum : float
        ``sum_n k(x_n, x_n)`` over all n rows.
    n : int
        Training points.
    sigma2 : float
        Noise variance.
    w0 : ndarray of shape (m,)
        Starting weights, all > 0.
    update : {"fast", "em"}
    max_iter : int
        Weight updates at most.
    tol : float
        Likelihood tolerance, nats per training point.
    prune : float
        Pruning threshold relative to the largest weight.

    Returns
    -------
    dict
        ``active`` (kept local indices, ascending), ``weights``,
        ``log_likelihood`` (at the start and after each of the ``n_iter``
        steps, the last at the result; removals count with the update that
        follows them), ``n_iter``, ``converged``, ``pruned_at`` (the steps
        that began with removals).
    """
    act = np.arange(w0.shape[0])
    w = np.asarray(w0, dtype=np.float64).copy()
    Ka, Ga = K, G  # K and G on the active set, sliced again only when it shrinks
    post = posterior(Ka, Ga, diag_sum, n, sigma2, w)
    history = [post.log_likelihood]
    pruned_at: list[int] = []
    converged = False
    it = 0
    while it < max_iter:
        if stopping():  # Ctrl-C: a set's EM runs for minutes, and its fit waits for it before it ends
            raise StopRequested("interrupted")
        drop = prunable(post, w, n, prune)
        if not drop.any() and it > 0 and max(abs(history[-1] - history[-2]), likelihood_gap(post, w, n)) <= tol * n:
            # L has settled: what is left to remove is every weight still heading to zero
            drop = zero_optimum(post, n)
            if not drop.any():
                converged = True
                break
        if drop.any():
            keep = np.flatnonzero(~drop)
            trial = posterior(Ka[np.ix_(keep, keep)], Ga[np.ix_(keep, keep)], diag_sum, n, sigma2, w[keep])
            if drop.sum() > 1 and trial.log_likelihood < post.log_likelihood - _ROUNDOFF * abs(post.log_likelihood):
                # removals that each raise L can lower it together: take the smallest alone
                smallest = np.flatnonzero(drop)[np.argmin(w[drop])]
                keep = np.delete(np.arange(w.size), smallest)
                trial = posterior(Ka[np.ix_(keep, keep)], Ga[np.ix_(keep, keep)], diag_sum, n, sigma2, w[keep])
            act, w, post = act[keep], w[keep], trial
            Ka, Ga = Ka[np.ix_(keep, keep)], Ga[np.ix_(keep, keep)]
            pruned_at.append(it)
        if act.size == 0:  # every weight removed: that is the last step, and its result
            if pruned_at and pruned_at[-1] == it:
                it += 1
                history.append(post.log_likelihood)
            converged = True
            break
        it += 1
        w = update_weights(post, w, n, update)
        post = posterior(Ka, Ga, diag_sum, n, sigma2, w)
        history.append(post.log_likelihood)
    return {"active": act, "weights": w, "log_likelihood": history, "n_iter": it, "converged": converged,
            "pruned_at": pruned_at}
