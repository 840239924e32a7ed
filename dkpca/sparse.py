"""Sparse kernel PCA (Tipping 2000) by blocked EM over the training rows.

The feature vectors are modelled as ``phi ~ N(0, C)`` with (seed, eq. 4)

    C = sigma^2 I + Phi^T W Phi,        W = diag(w_1 .. w_n),

``sigma^2`` fixed and the weights ``w_i`` fitted by maximum likelihood; most
``w_i`` go to zero, and the principal axes of C are spanned by the few
"representing" feature vectors with ``w_i > 0``.  On the active set A
(m = |A|, ``S = W_A^(1/2)``, ``B = I + sigma^-2 S K_AA S``)::

    Sigma        = (W_A^-1 + sigma^-2 K_AA)^-1 = S B^-1 S              (eq. 11)
    sum_n mu_ni^2 = sigma^-4 [Sigma G Sigma]_ii,  G = K_{:,A}^T K_{:,A}  (eq. 12)
    L = -1/2 [ n log|B| + sigma^-2 sum_n k_nn - sigma^-4 tr(Sigma G) ]  (eqs. 5-8)
    w_i <- sum_n mu_ni^2 / n + Sigma_ii                                  (eq. 13, "em")
    w_i <- sum_n mu_ni^2 / (n (1 - Sigma_ii / w_i))                     (eq. 14, "fast")

``L`` omits only ``-n D log(sigma^2) / 2`` (and the ``2 pi`` term), constant
for fixed ``sigma^2``.  ``log|B| = log|W^-1 + sigma^-2 K| + log|W|`` (eq. 6-7)
is taken from a Cholesky factor of B, whose eigenvalues are >= 1, so tiny
weights never make the factorisation ill-conditioned.

``G`` is the only quantity that touches all n rows.  It is a sum over row
blocks R of ``K_RA^T K_RA``, each evaluated from X on a dask worker with
:meth:`dkpca.kernels.Kernel.block` (matrix-free, never n x n), summed in a
tree inside the graph and run through :func:`dkpca._compute.compute`.

Blocked scheme (n > ``block_size``): candidates are split into blocks of
``block_size``; each block is fitted on its own against all n rows (one G
per block, all blocks in one pass over X) and its pruned weights dropped; the
survivors are pooled, re-split if still too many, and finally re-estimated
together.  The pooled optimum is then checked against every discarded
candidate: for ``w_i = 0`` the likelihood as a function of ``w_i`` alone is

    l_i(w) = -1/2 [ n log(1 + w s_i) - Q_i w / (1 + w s_i) ],
    s_i = phi_i^T C^-1 phi_i,   Q_i = sum_n (phi_n^T C^-1 phi_i)^2,

which increases from ``w = 0`` iff ``Q_i > n s_i`` (its maximiser is
``w_i = (Q_i / (n s_i) - 1) / s_i``).  Such candidates are added back with
that weight and the pool re-estimated, until none is left: the active set is
then stable (no single discarded kernel would raise the likelihood).

Pruning: a weight is removed when it is below ``prune_threshold`` times the
largest weight *and* the same one-weight analysis says its conditional
optimum is zero (``Q_i^- <= n s_i^-`` with i's own term removed, which in
terms of the current posterior reads ``sum_n mu_ni^2 <= n gamma_i Sigma_ii``,
``gamma_i = 1 - Sigma_ii / w_i``), so a removal never lowers the likelihood
on its own.  Without that test the EM update (13) lets an irrelevant weight
decay only like 1/t.

Principal axes (eqs. 15-17): eigenvectors ``U~``, eigenvalues ``Lambda~`` of
``S K_AA S``; projection matrix ``P = S U~ Lambda~^(-1/2)`` (m x m), component
scores ``z(x) = k_A(x)^T P``, eigenvalues of C ``Lambda~ + sigma^2``.
Reconstruction error (eq. 18) ``k(x, x) - k_A(x)^T K_AA^-1 k_A(x)``, which
equals ``k(x, x) - sum_j z_j(x)^2`` over all m components.

Centring (``center=True``; the paper does not centre, footnote 1) replaces K
by ``K~ = K - 1 r^T - r 1^T + c 1 1^T`` (DESIGN.md).  The centring statistics
need one matrix-free pass (``MatrixFreeKernelOperator``), and projecting a new
point then needs ``mean_j k(x, x_j)`` over all training points: the components
remain sparse but evaluating them is no longer.
"""

from __future__ import annotations

import math
import numbers
import os
import time
import warnings
from typing import Any

import dask
import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from . import store as _store
from ._compute import compute
from .gram import block_bounds
from .io import default_block_size
from .kernels import Kernel, from_dict, make_kernel
from .solvers import EigResult, finalize

__all__ = ["SparseKernelPCA", "fit_sparse", "choose_noise_variance", "load_sparse"]

UPDATES = ("fast", "em")
#: candidates per block when ``block_size=None``: G and the EM temporaries are
#: a few m x m float64 arrays (~50 MiB at 1000) and the first EM iterations,
#: O(m^3) each, take ~0.1 s on one core.
DEFAULT_BLOCK_SIZE = 1000
#: columns per task in the add-back pass (R x 1024 float64 blocks, ~32 MiB)
_ADD_COLS = 1024
#: a discarded kernel is added back when Q_i / (n s_i) exceeds this; the
#: likelihood gain is n/2 (rho - 1 - log rho) ~ n (rho - 1)^2 / 4, i.e. < 3e-5 n below it
_ADD_RATIO = 1.01
_MAX_ADD_ROUNDS = 10
_MAX_BLOCK_ROUNDS = 20
#: weights below this fraction of the largest are zero to working precision
_ZERO = 1e-12


# -- kernel blocks -------------------------------------------------------------


def _kblock(spec: dict, XR: np.ndarray, XC: np.ndarray, cstats: tuple | None, same: bool = False) -> np.ndarray:
    """``K[R, C]`` in float64, centred when ``cstats = (r_R, r_C, c)`` is given."""
    kernel = from_dict(spec)
    K = kernel.block(XR, None if same else XC, np.float64)
    if cstats is not None:
        rR, rC, c = cstats
        K -= rR[:, None]
        K -= rC[None, :]
        K += c
    return K


def _gram_partial(XR: np.ndarray, rR: np.ndarray | None, XB: np.ndarray, rB: np.ndarray | None,
                  spec: dict, c: float) -> np.ndarray:
    """``K_RB^T K_RB`` for one row block R and candidate block B."""
    KRB = _kblock(spec, XR, XB, None if rR is None else (rR, rB, c))
    return KRB.T @ KRB


def _add(*parts: np.ndarray) -> np.ndarray:
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def _tree_sum(parts: list, fan_in: int = 8) -> Any:
    """Lazy sum of delayed arrays in a tree, so partial sums are freed early."""
    while len(parts) > 1:
        parts = [dask.delayed(_add, pure=True)(*parts[i:i + fan_in]) for i in range(0, len(parts), fan_in)]
    return parts[0]


# -- the EM iteration (local, m x m) -------------------------------------------


def _posterior(K: np.ndarray, G: np.ndarray, diag_sum: float, n: int, sigma2: float, w: np.ndarray):
    """Log-likelihood and posterior statistics at weights ``w`` (all > 0).

    Returns
    -------
    ll : float
        Eqs. 5-8 up to the constant.
    mu2 : ndarray (m,)
        ``sum_n mu_ni^2``.
    sig : ndarray (m,)
        ``Sigma_ii``.
    gamma : ndarray (m,)
        ``1 - Sigma_ii / w_i``, computed as ``sigma^-2 [B^-1 S K S]_ii / w_i``
        which keeps its relative accuracy when ``w_i`` is tiny.
    """
    m = w.shape[0]
    if m == 0:
        return -0.5 * diag_sum / sigma2, np.zeros(0), np.zeros(0), np.zeros(0)
    s = np.sqrt(w)
    B = s[:, None] * K * s[None, :]
    B /= sigma2
    B[np.diag_indices(m)] += 1.0
    cf = scipy.linalg.cho_factor(B, lower=True, check_finite=False)
    logdet = 2.0 * float(np.sum(np.log(np.diag(cf[0]))))
    Binv = scipy.linalg.cho_solve(cf, np.eye(m), check_finite=False)
    Sigma = s[:, None] * Binv * s[None, :]
    SG = Sigma @ G
    ll = -0.5 * (n * logdet + diag_sum / sigma2 - np.trace(SG) / sigma2**2)
    mu2 = np.einsum("ij,ji->i", SG, Sigma) / sigma2**2
    gamma = np.einsum("ij,ji->i", Binv * s[None, :], K) * (s / sigma2)
    return float(ll), mu2, np.diag(Sigma).copy(), gamma


def _run_em(K: np.ndarray, G: np.ndarray, diag_sum: float, n: int, sigma2: float, w0: np.ndarray,
            update: str, max_iter: int, tol: float, prune: float) -> dict:
    """Re-estimate the weights on one candidate set; returns kept local indices.

    ``K`` is ``K_BB`` and ``G`` is ``K_{:,B}^T K_{:,B}`` for the candidates B.
    Stops when nothing was pruned and ``max |log(w_new / w)| < tol``.
    """
    act = np.arange(w0.shape[0])
    w = np.asarray(w0, dtype=np.float64).copy()
    history: list[float] = []
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - it is reported
        Ka, Ga = K[np.ix_(act, act)], G[np.ix_(act, act)]
        ll, mu2, sig, gamma = _posterior(Ka, Ga, diag_sum, n, sigma2, w)
        history.append(ll)
        if act.size == 0:
            converged = True
            break
        if update == "em":
            w_new = mu2 / n + sig
        else:
            w_new = mu2 / (n * np.maximum(gamma, np.finfo(float).tiny))
        # conditional optimum of w_i is zero (module docstring) and w_i is small
        drop = (w < prune * w.max()) & (mu2 <= n * gamma * sig)
        drop |= w_new <= _ZERO * w_new.max()
        keep = ~drop
        change = float(np.max(np.abs(np.log(w_new[keep] / w[keep])))) if keep.any() else 0.0
        act, w = act[keep], w_new[keep]
        if not drop.any() and change < tol:
            converged = True
            break
    ll, *_ = _posterior(K[np.ix_(act, act)], G[np.ix_(act, act)], diag_sum, n, sigma2, w)
    history.append(ll)
    return {"active": act, "weights": w, "log_likelihood": history, "n_iter": it, "converged": converged}


def _block_em(G: np.ndarray, XB: np.ndarray, rB: np.ndarray | None, spec: dict, c: float, diag_sum: float,
              n: int, sigma2: float, w0: np.ndarray, update: str, max_iter: int, tol: float,
              prune: float) -> dict:
    """EM for one candidate block (a dask task: G arrives from the row reduction)."""
    K = _kblock(spec, XB, XB, None if rB is None else (rB, rB, c), same=True)
    return _run_em(K, G, diag_sum, n, sigma2, w0, update, max_iter, tol, prune)


def _addback_q(XR, rR, XJ, rJ, XA, rA, spec, c, Sigma, sigma2) -> np.ndarray:
    """``sum_{n in R} (phi_n^T C^-1 phi_j)^2`` for the columns j in J."""
    cs = (lambda a, b: None) if rR is None else (lambda a, b: (a, b, c))
    KRJ = _kblock(spec, XR, XJ, cs(rR, rJ))
    KRA = _kblock(spec, XR, XA, cs(rR, rA))
    KAJ = _kblock(spec, XA, XJ, cs(rA, rJ))
    M = KRJ / sigma2
    M -= KRA @ (Sigma @ KAJ) / sigma2**2
    return np.einsum("ij,ij->j", M, M)


def _addback_s(XJ, rJ, dJ, XA, rA, spec, c, Sigma, sigma2) -> np.ndarray:
    """``phi_j^T C^-1 phi_j`` for the columns j in J (eq. 8)."""
    KAJ = _kblock(spec, XA, XJ, None if rJ is None else (rA, rJ, c))
    return dJ / sigma2 - np.einsum("ij,ij->j", KAJ, Sigma @ KAJ) / sigma2**2


# -- the estimator ---------------------------------------------------------------


class SparseKernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Sparse kernel PCA (Tipping 2000): components built from a few training kernels.

    Parameters
    ----------
    n_components : int or None, default=None
        Components returned by :meth:`transform`; ``None`` keeps every
        component of the sparse model (one per representing kernel).  The
        number of representing kernels is set by ``noise_variance``, not by
        this parameter.
    kernel : str, Kernel or dict, default="rbf"
        As in :func:`dkpca.fit`; must be positive semi-definite.
    gamma, degree, coef0, kernel_params
        Kernel parameters as in :func:`dkpca.fit` (``gamma=None``: 1/n_features).
        The paper's ``exp(-|x - x'|^2 / r^2)`` is ``gamma = 1 / r^2``.
    noise_variance : float, default=0.1
        sigma^2, the per-coordinate feature-space variance left to isotropic
        noise.  Directions of the feature covariance ``Phi^T Phi / n`` with
        eigenvalue below sigma^2 are not represented (PPCA); for an rbf kernel
        the eigenvalues of ``K / n`` sum to 1.  Larger -> fewer kernels; see
        :func:`choose_noise_variance`.
    update : {"fast", "em"}, default="fast"
        Weight re-estimation: eq. 14 (fast) or eq. 13 (EM, likelihood
        guaranteed non-decreasing, converges slowly).
    max_iter : int, default=3000
        EM iterations per candidate set.
    tol : float, default=1e-4
        Stop when no weight was pruned and ``max |log(w_new / w)| < tol``.
    prune_threshold : float, default=1e-3
        A weight below ``prune_threshold * max(w)`` whose conditional optimum
        is zero is set to zero.
    block_size : int or None, default=None
        Candidates fitted together.  ``n <= block_size``: exact EM over all n
        kernels; otherwise the blocked scheme (module docstring).  ``None``
        means 1000.  Memory per task is O(block_size^2).
    center : bool, default=False
        Centre in feature space (the paper does not; footnote 1).  Projecting
        then evaluates the kernel against all training points.
    random_state : int, RandomState instance or None, default=None
        Order in which candidates are split into blocks (blocked scheme only).

    Attributes
    ----------
    representing_indices_ : ndarray of shape (m,)
        Training rows with non-zero weight, ascending.
    representing_points_ : ndarray of shape (m, n_features)
    weights_ : ndarray of shape (m,)
        Their weights ``w_i``.
    eigenvalues_ : ndarray of shape (n_components_,)
        Eigenvalues of C, ``Lambda~ + sigma^2``, descending.
    projection_ : ndarray of shape (m, n_components_)
        P (eq. 17): ``transform(X) = k_A(X) @ projection_``.
    n_components_ : int
    log_likelihood_ : ndarray of shape (n_iter_ + 1,)
        Eqs. 5-8 (up to the constant) before each iteration of the final EM
        run and at its result.
    n_iter_ : int
        Iterations of the final EM run.
    converged_ : bool
    kernel_ : Kernel
        Resolved kernel.
    fit_report_ : dict
        Mode (exact/blocked), rounds, add-back rounds, passes over X, timings.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names.
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        kernel: str | Kernel | dict = "rbf",
        gamma: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        kernel_params: dict | None = None,
        noise_variance: float = 0.1,
        update: str = "fast",
        max_iter: int = 3000,
        tol: float = 1e-4,
        prune_threshold: float = 1e-3,
        block_size: int | None = None,
        center: bool = False,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.noise_variance = noise_variance
        self.update = update
        self.max_iter = max_iter
        self.tol = tol
        self.prune_threshold = prune_threshold
        self.block_size = block_size
        self.center = center
        self.random_state = random_state

    # -- validation ------------------------------------------------------------
    def _check_params(self) -> None:
        def positive_int(name, v, low=1):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name}={v!r} is invalid; it must be an integer >= {low}.")

        if self.n_components is not None:
            positive_int("n_components", self.n_components)
        s2 = self.noise_variance
        if not isinstance(s2, numbers.Real) or isinstance(s2, bool) or not math.isfinite(s2) or s2 <= 0:
            raise ValueError(
                f"noise_variance={s2!r} is invalid; it must be a finite number > 0 (sigma^2 in feature space, "
                "e.g. 0.1 for an rbf kernel; see dkpca.sparse.choose_noise_variance)."
            )
        if self.update not in UPDATES:
            raise ValueError(f"update={self.update!r} is invalid; choose 'fast' (eq. 14) or 'em' (eq. 13).")
        positive_int("max_iter", self.max_iter)
        if not isinstance(self.tol, numbers.Real) or isinstance(self.tol, bool) or not self.tol >= 0:
            raise ValueError(f"tol={self.tol!r} is invalid; it must be a number >= 0, e.g. 1e-5.")
        p = self.prune_threshold
        if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0 < p < 1:
            raise ValueError(f"prune_threshold={p!r} is invalid; it must be a number in (0, 1), e.g. 1e-3.")
        if self.block_size is not None:
            positive_int("block_size", self.block_size, low=2)
        if not isinstance(self.center, (bool, np.bool_)):
            raise ValueError(f"center={self.center!r} is invalid; it must be True or False.")

    def _make_kernel(self, n_features: int) -> Kernel:
        k = make_kernel(self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                        kernel_params=self.kernel_params).resolve(n_features)
        k.validate()
        if not k.positive_definite:
            raise ValueError(
                f"kernel {k.to_dict()} is not positive semi-definite; sparse kernel PCA needs a PSD kernel "
                "(its covariance model sigma^2 I + Phi^T W Phi must be a covariance). Use rbf, laplacian, "
                "linear, cosine, or poly with coef0 >= 0."
            )
        return k

    # -- fitting ---------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> SparseKernelPCA:
        """Fit the weights by (blocked) EM and build the sparse components.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        self._check_params()
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        rng = check_random_state(self.random_state)
        t_start = time.perf_counter()
        n, d = X.shape
        kernel = self._make_kernel(d)
        spec = kernel.to_dict()
        sigma2 = float(self.noise_variance)
        b = DEFAULT_BLOCK_SIZE if self.block_size is None else int(self.block_size)
        report: dict[str, Any] = {"n_samples": n, "block_size": b, "passes": 0, "rounds": [], "add_back": []}

        # centring statistics (one matrix-free pass) and the diagonal of K (or K~)
        if self.center:
            from .io import as_dask
            from .operator import MatrixFreeKernelOperator

            op = MatrixFreeKernelOperator(as_dask(X), kernel, np.float64)
            r, c = op.row_means, float(op.grand_mean)
            diag = kernel.diag(X, np.float64) - 2.0 * r + c
            report["passes"] += 1
        else:
            r, c = None, 0.0
            diag = kernel.diag(X, np.float64)
        diag_sum = float(diag.sum())
        ctx = _FitContext(X, r, c, spec, sigma2, n, diag_sum, default_block_size(n))
        opts = {"update": self.update, "max_iter": self.max_iter, "tol": float(self.tol),
                "prune": float(self.prune_threshold)}

        if n <= b:
            report["mode"] = "exact"
            pool = np.arange(n)
            w0 = np.full(n, 1.0 / n)
        else:
            report["mode"] = "blocked"
            pool = rng.permutation(n)
            for _ in range(_MAX_BLOCK_ROUNDS):
                if pool.size <= b:
                    break
                blocks = np.array_split(pool, -(-pool.size // b))
                results = ctx.run_blocks(blocks, opts)
                report["passes"] += 1
                survivors = np.concatenate([blk[res["active"]] for blk, res in zip(blocks, results, strict=True)])
                report["rounds"].append({"candidates": int(pool.size), "blocks": len(blocks),
                                         "survivors": int(survivors.size)})
                if survivors.size >= pool.size:
                    raise ValueError(
                        f"blocked sparse KPCA cannot shrink the candidate set: all {pool.size} candidates "
                        f"survive in blocks of {b}. Increase block_size (above the number of representing "
                        f"kernels you expect) or noise_variance={sigma2} (fewer kernels)."
                    )
                pool = rng.permutation(survivors)
            else:  # pragma: no cover - each round strictly shrinks the pool
                raise ValueError("blocked sparse KPCA did not reduce the candidates to one block; "
                                 "increase block_size or noise_variance.")
            pool = np.sort(pool)
            w0 = np.full(pool.size, 1.0 / n)

        res = ctx.run_blocks([pool], opts)[0]
        report["passes"] += 1
        active, weights = pool[res["active"]], res["weights"]
        if report["mode"] == "blocked":
            for _ in range(_MAX_ADD_ROUNDS):
                add, w_add, rho_max = ctx.add_back(active, weights, b)
                report["passes"] += 1
                report["add_back"].append({"active": int(active.size), "added": int(add.size),
                                           "max_ratio": rho_max})
                if add.size == 0:
                    break
                pool = np.concatenate([active, add])
                order = np.argsort(pool)
                pool, w0 = pool[order], np.concatenate([weights, w_add])[order]
                res = ctx.run_blocks([pool], opts, w0=[w0])[0]
                report["passes"] += 1
                active, weights = pool[res["active"]], res["weights"]
            else:
                warnings.warn(
                    f"the active set was still changing after {_MAX_ADD_ROUNDS} add-back rounds; "
                    "increase block_size so that more candidates are fitted together.",
                    ConvergenceWarning, stacklevel=2)
        if not res["converged"]:
            warnings.warn(
                f"sparse KPCA EM stopped at max_iter={self.max_iter} before tol={self.tol} was reached; "
                "increase max_iter" + (" (or use update='fast')." if self.update == "em" else
                                       ", or loosen tol: the weights still drift along a flat likelihood ridge."),
                ConvergenceWarning, stacklevel=2)
        if active.size == 0:
            raise ValueError(
                f"noise_variance={sigma2} explains all the data: every weight went to zero. Choose a smaller "
                f"noise_variance (below the largest eigenvalue of K/n), e.g. with "
                "dkpca.sparse.choose_noise_variance."
            )

        self.kernel_ = kernel
        self.representing_indices_ = active
        self.representing_points_ = X[active].copy()
        self.weights_ = weights
        self.log_likelihood_ = np.asarray(res["log_likelihood"])
        self.n_iter_ = int(res["n_iter"])
        self.converged_ = bool(res["converged"])
        self._set_centering(X, r, c)
        self._build_components()
        report["seconds"] = time.perf_counter() - t_start
        report["n_representing"] = int(active.size)
        self.fit_report_ = report
        return self

    def _set_centering(self, X: np.ndarray, r: np.ndarray | None, c: float) -> None:
        if self.center:
            self.X_fit_ = X.copy()
            self.row_means_ = r[self.representing_indices_].copy()
            self.grand_mean_ = float(c)

    def _build_components(self) -> None:
        """Eigen-decompose ``S K_AA S`` -> eigenvalues, projection matrix (eqs. 15-17)."""
        K = self._rep_kernel()
        s = np.sqrt(self.weights_)
        lam, U = scipy.linalg.eigh(s[:, None] * K * s[None, :])
        res = finalize(EigResult(lam, U, 0, np.zeros(lam.size), True, "eigh"), positive_definite=True)
        lam, U = res.eigenvalues, res.eigenvectors
        # components with Lambda~ = 0 (duplicate representing points) carry no variance
        keep = lam > 1e-12 * max(lam[0], 0.0)
        lam, U = lam[keep], U[:, keep]
        k = lam.size if self.n_components is None else int(self.n_components)
        if k > lam.size:
            raise ValueError(
                f"n_components={k} exceeds the {lam.size} components of the fitted sparse model (one per "
                f"representing kernel, set by noise_variance={self.noise_variance}); lower n_components or "
                "lower noise_variance to keep more kernels."
            )
        self._lam_all = lam
        self._proj_all = s[:, None] * U / np.sqrt(lam)[None, :]
        self.n_components_ = k
        self.eigenvalues_ = lam[:k] + float(self.noise_variance)
        self.projection_ = self._proj_all[:, :k]

    def _rep_kernel(self) -> np.ndarray:
        R = self.representing_points_
        cs = (self.row_means_, self.row_means_, self.grand_mean_) if self.center else None
        return _kblock(self.kernel_.to_dict(), R, R, cs, same=True)

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    # -- out of sample -----------------------------------------------------------
    def _kernels(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(k_A(x), k(x, x))`` for new points, centred when fitted so."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        R = self.representing_points_
        KA = self.kernel_.block(X, R, np.float64) if X.shape[0] else np.zeros((0, R.shape[0]))
        kxx = self.kernel_.diag(X, np.float64)
        if self.center:
            # mean_j k(x, x_j) over all training points, block by block
            n = self.X_fit_.shape[0]
            mean_k = np.zeros(X.shape[0])
            for j0, j1 in block_bounds(n, default_block_size(n)):
                if X.shape[0]:
                    mean_k += self.kernel_.block(X, self.X_fit_[j0:j1], np.float64).sum(axis=1)
            mean_k /= n
            KA = KA - self.row_means_[None, :] - mean_k[:, None] + self.grand_mean_
            kxx = kxx - 2.0 * mean_k + self.grand_mean_
        return KA, kxx

    def transform(self, X: Any) -> np.ndarray:
        """Component scores (eq. 17), evaluating only the m representing kernels.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components_)
        """
        KA, _ = self._kernels(X)
        return KA @ self.projection_

    def reconstruction_error(self, X: Any, n_components: int | None = None) -> np.ndarray:
        """Squared feature-space reconstruction error.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        n_components : int, optional
            Components used.  ``None``: all components of the sparse model,
            i.e. eq. 18, ``k(x, x) - k_A(x)^T K_AA^-1 k_A(x)``.

        Returns
        -------
        err : ndarray of shape (n_samples,)
        """
        KA, kxx = self._kernels(X)
        P = self._proj_all
        if n_components is not None:
            if not isinstance(n_components, numbers.Integral) or not 1 <= n_components <= P.shape[1]:
                raise ValueError(
                    f"n_components={n_components!r} is invalid; it must be an integer between 1 and "
                    f"{P.shape[1]} (the components of the fitted model)."
                )
            P = P[:, :n_components]
        Z = KA @ P
        return kxx - np.einsum("ij,ij->i", Z, Z)

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-density of ``phi(x)`` under ``N(0, C)`` up to the constant (novelty score).

        ``-1/2 [log|B| + sigma^-2 k(x, x) - sigma^-4 k_A(x)^T Sigma k_A(x)]``
        (eqs. 6-8 per sample); higher is more typical, and the sum over the
        training data is the final ``log_likelihood_``.

        Returns
        -------
        scores : ndarray of shape (n_samples,)
        """
        KA, kxx = self._kernels(X)
        sigma2 = float(self.noise_variance)
        s = np.sqrt(self.weights_)
        m = s.size
        B = s[:, None] * self._rep_kernel() * s[None, :] / sigma2 + np.eye(m)
        cf = scipy.linalg.cho_factor(B, lower=True)
        logdet = 2.0 * float(np.sum(np.log(np.diag(cf[0]))))
        Sigma = s[:, None] * scipy.linalg.cho_solve(cf, np.eye(m)) * s[None, :]
        quad = np.einsum("ij,ij->i", KA @ Sigma, KA)
        return -0.5 * (logdet + kxx / sigma2 - quad / sigma2**2)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean of :meth:`score_samples`."""
        return float(np.mean(self.score_samples(X)))

    # -- persistence -------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write the fitted model to ``<path>/sparse_model`` (Zarr v3 + JSON attrs).

        An existing ``sparse_model`` group in that dkpca store is replaced.
        """
        check_is_fitted(self)
        path = os.fspath(path)
        root = _store.create_or_open(path)
        _store.remove_member(root, "sparse_model")
        g = root.create_group("sparse_model")
        arrays = {
            "representing_indices": self.representing_indices_.astype(np.int64),
            "representing_points": self.representing_points_,
            "weights": self.weights_,
            "log_likelihood": self.log_likelihood_,
        }
        if self.center:
            arrays.update(X_fit=self.X_fit_, row_means=self.row_means_)
        for name, a in arrays.items():
            g.create_array(name, data=np.ascontiguousarray(a))
        params = self.get_params()
        kp = params["kernel"]
        params["kernel"] = {"__dkpca_kernel__": kp.to_dict()} if isinstance(kp, Kernel) else kp
        rs = params["random_state"]
        if rs is not None and not isinstance(rs, numbers.Integral):
            params["random_state"] = None  # a RandomState instance has no JSON form; fitting is done
        attrs = {
            "params": params,
            "kernel": self.kernel_.to_dict(),
            "n_features_in": self.n_features_in_,
            "n_iter": self.n_iter_,
            "converged": self.converged_,
            "fit_report": self.fit_report_,
            "dkpca_version": _store.version(),
            "complete": True,
        }
        if self.center:
            attrs["grand_mean"] = self.grand_mean_
        if hasattr(self, "feature_names_in_"):
            attrs["feature_names_in"] = [str(f) for f in self.feature_names_in_]
        g.attrs.update(_store.json_safe(attrs))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> SparseKernelPCA:
        """Read a model written by :meth:`save` (no pickle involved)."""
        path = os.fspath(path)
        root = _store.open_existing(path)
        if "sparse_model" not in root or not root["sparse_model"].attrs.get("complete"):
            raise ValueError(f"store {path!r} holds no complete sparse model; fit one and call .save({path!r}).")
        g = root["sparse_model"]
        a = dict(g.attrs)
        params = dict(a["params"])
        if isinstance(params["kernel"], dict) and "__dkpca_kernel__" in params["kernel"]:
            params["kernel"] = from_dict(params["kernel"]["__dkpca_kernel__"])
        est = cls(**params)
        est.kernel_ = from_dict(a["kernel"])
        est.representing_indices_ = g["representing_indices"][:]
        est.representing_points_ = g["representing_points"][:]
        est.weights_ = g["weights"][:]
        est.log_likelihood_ = g["log_likelihood"][:]
        est.n_features_in_ = int(a["n_features_in"])
        est.n_iter_ = int(a["n_iter"])
        est.converged_ = bool(a["converged"])
        est.fit_report_ = a.get("fit_report", {})
        if "feature_names_in" in a:
            est.feature_names_in_ = np.asarray(a["feature_names_in"], dtype=object)
        if est.center:
            est.X_fit_ = g["X_fit"][:]
            est.row_means_ = g["row_means"][:]
            est.grand_mean_ = float(a["grand_mean"])
        est._build_components()
        return est

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # fit rejects NaN/inf (validate_data): the kernel of a NaN row is undefined
        tags.input_tags.allow_nan = False
        return tags


class _FitContext:
    """Training data, centring statistics and the dask graphs of one fit."""

    def __init__(self, X, r, c, spec, sigma2, n, diag_sum, row_block):
        self.X, self.r, self.c, self.spec = X, r, c, spec
        self.sigma2, self.n, self.diag_sum = sigma2, n, diag_sum
        self.bounds = block_bounds(n, row_block)
        self.rows = [dask.delayed(X[a:b], pure=True) for a, b in self.bounds]
        self.rrows = [None if r is None else dask.delayed(r[a:b], pure=True) for a, b in self.bounds]

    def _sub(self, idx: np.ndarray):
        return self.X[idx], (None if self.r is None else self.r[idx])

    def run_blocks(self, blocks: list[np.ndarray], opts: dict, w0: list | None = None) -> list[dict]:
        """EM on each candidate block against all n rows, in one graph (one pass over X)."""
        tasks = []
        for i, blk in enumerate(blocks):
            XB, rB = self._sub(blk)
            XBd, rBd = dask.delayed(XB, pure=True), dask.delayed(rB, pure=True)
            parts = [dask.delayed(_gram_partial, pure=True)(XR, rR, XBd, rBd, self.spec, self.c)
                     for XR, rR in zip(self.rows, self.rrows, strict=True)]
            G = _tree_sum(parts)
            w_init = np.full(blk.size, 1.0 / self.n) if w0 is None else w0[i]
            tasks.append(dask.delayed(_block_em, pure=True)(
                G, XBd, rBd, self.spec, self.c, self.diag_sum, self.n, self.sigma2, w_init,
                opts["update"], opts["max_iter"], opts["tol"], opts["prune"]))
        return list(compute(*tasks, label="sparse KPCA: EM over candidate blocks"))

    def add_back(self, active: np.ndarray, weights: np.ndarray, limit: int):
        """Discarded candidates whose single-weight likelihood rises from zero (module docstring)."""
        n, sigma2 = self.n, self.sigma2
        XA, rA = self._sub(active)
        K = _kblock(self.spec, XA, XA, None if rA is None else (rA, rA, self.c), same=True)
        s = np.sqrt(weights)
        B = s[:, None] * K * s[None, :] / sigma2 + np.eye(s.size)
        Sigma = s[:, None] * scipy.linalg.cho_solve(scipy.linalg.cho_factor(B, lower=True),
                                                   np.eye(s.size)) * s[None, :]
        XAd, rAd, Sd = (dask.delayed(v, pure=True) for v in (XA, rA, Sigma))
        kdiag = from_dict(self.spec).diag(self.X, np.float64)
        if self.r is not None:
            kdiag = kdiag - 2.0 * self.r + self.c
        cols = block_bounds(n, _ADD_COLS)
        q_tasks, s_tasks = [], []
        for j0, j1 in cols:
            XJ = dask.delayed(self.X[j0:j1], pure=True)
            rJ = None if self.r is None else dask.delayed(self.r[j0:j1], pure=True)
            parts = [dask.delayed(_addback_q, pure=True)(XR, rR, XJ, rJ, XAd, rAd, self.spec, self.c, Sd, sigma2)
                     for XR, rR in zip(self.rows, self.rrows, strict=True)]
            q_tasks.append(_tree_sum(parts))
            s_tasks.append(dask.delayed(_addback_s, pure=True)(XJ, rJ, kdiag[j0:j1], XAd, rAd, self.spec,
                                                               self.c, Sd, sigma2))
        out = compute(*q_tasks, *s_tasks, label="sparse KPCA: checking discarded candidates")
        Q = np.concatenate(out[: len(cols)])
        sv = np.concatenate(out[len(cols):])
        ratio = np.where(sv > 0, Q / (n * np.maximum(sv, np.finfo(float).tiny)), 0.0)
        ratio[active] = 0.0
        rho_max = float(ratio.max()) if ratio.size else 0.0
        cand = np.flatnonzero(ratio > _ADD_RATIO)
        room = max(limit - active.size, 0)
        if cand.size > room:
            cand = cand[np.argsort(ratio[cand])[::-1][:room]]
        w_add = (ratio[cand] - 1.0) / sv[cand]
        return cand, w_add, rho_max


def fit_sparse(X: Any, n_components: int | None = None, **params: Any) -> SparseKernelPCA:
    """Fit :class:`SparseKernelPCA` (functional form).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    n_components : int or None
    **params
        Any :class:`SparseKernelPCA` parameter.

    Returns
    -------
    SparseKernelPCA
        Fitted.
    """
    return SparseKernelPCA(n_components=n_components, **params).fit(X)


def choose_noise_variance(
    X: Any,
    target_kernels: int,
    *,
    max_evals: int = 40,
    lower: float | None = None,
    upper: float | None = None,
    **params: Any,
) -> float:
    """sigma^2 giving ``target_kernels`` representing kernels, by bisection on log sigma^2.

    The number of representing kernels falls as sigma^2 grows (it is zero
    once sigma^2 exceeds the largest eigenvalue of ``K / n``), though not
    always strictly; the bisection keeps the evaluated sigma^2 whose count is
    closest to the target (exact when reached).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    target_kernels : int
        Wanted number of representing kernels (1 <= target <= n_samples).
    max_evals : int, default=40
        Fits at most.
    lower, upper : float, optional
        Initial bracket; default ``upper = mean k(x, x)`` (no kernel survives
        above it) and ``lower = upper * 1e-4`` (halved until enough survive).
    **params
        Other :class:`SparseKernelPCA` parameters (kernel, gamma, update, ...).

    Returns
    -------
    noise_variance : float
    """
    Xa = np.asarray(X, dtype=np.float64)
    if Xa.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {Xa.shape}.")
    n = Xa.shape[0]
    if not isinstance(target_kernels, numbers.Integral) or not 1 <= target_kernels <= n:
        raise ValueError(f"target_kernels={target_kernels!r} is invalid; it must be an integer in [1, {n}].")
    params = {k: v for k, v in params.items() if k != "noise_variance"}
    params.setdefault("n_components", None)
    est = SparseKernelPCA(**params)
    kernel = est.set_params(noise_variance=1.0)._make_kernel(Xa.shape[1])
    if upper is None:
        upper = float(np.mean(kernel.diag(Xa, np.float64)))
    if lower is None:
        lower = upper * 1e-4
    if not 0 < lower < upper:
        raise ValueError(f"need 0 < lower < upper; got lower={lower}, upper={upper}.")

    seen: dict[float, int] = {}

    def count(s2: float) -> int:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                m = int(SparseKernelPCA(**{**params, "noise_variance": s2}).fit(Xa).representing_indices_.size)
        except ValueError as exc:
            if "every weight went to zero" not in str(exc):
                raise
            m = 0
        seen[s2] = m
        return m

    lo, hi = float(lower), float(upper)
    evals = 0
    while count(lo) < target_kernels and evals < max_evals:
        hi, lo = lo, lo / 2.0
        evals += 1
    while evals < max_evals:
        mid = math.sqrt(lo * hi)
        m = count(mid)
        evals += 1
        if m == target_kernels or hi / lo < 1.0 + 1e-6:
            break
        if m > target_kernels:
            lo = mid
        else:
            hi = mid
    best = min(seen, key=lambda s2: (abs(seen[s2] - target_kernels), -s2))
    return float(best)


def load_sparse(path: str | os.PathLike) -> SparseKernelPCA:
    """Load a :class:`SparseKernelPCA` saved with :meth:`SparseKernelPCA.save`."""
    return SparseKernelPCA.load(path)
