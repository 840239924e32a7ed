"""The blocked Dask driver of sparse kernel PCA: which candidates are fitted together, against all n rows.

``G = K_{:,A}^T K_{:,A}`` is the only quantity of the EM (:mod:`.em`) that
touches all n rows.  It is a sum over row blocks R of ``K_RA^T K_RA``, each
evaluated from X on a dask worker (matrix-free, never n x n), summed in a tree
inside the graph and run through :func:`dkpca.execution.compute`.

Exact scheme (n <= ``candidate_set_size``): one EM over all n candidates.

Blocked scheme (n > ``candidate_set_size``): the candidates, in random order,
are split into candidate sets of ``candidate_set_size`` ("sets": a block is a
tile of K, here of the rows R); each set is fitted on its own against all n
rows (one G per set, all sets in one pass over X) and its pruned
weights dropped; the survivors are pooled, re-split if still too many, and
finally re-estimated together.  The pooled optimum is then checked against
every discarded candidate j: with ``s_j = phi_j^T C^-1 phi_j`` and ``Q_j =
sum_n (phi_n^T C^-1 phi_j)^2`` at the pooled weights, the likelihood as a
function of ``w_j`` alone rises from ``w_j = 0`` iff ``Q_j > n s_j``, and is
largest at ``w_j = (Q_j / (n s_j) - 1) / s_j`` (:mod:`.em`).  Such candidates
are added back with that weight and the pool re-estimated, until none is
left: no single discarded kernel would then raise the likelihood.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import dask
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..execution import compute
from ..io import as_dask
from ..kernels import Kernel
from ..linalg import block_bounds, default_block_size, tree_sum
from ..operator import MatrixFreeKernelOperator
from .blocks import center, kernel_block
from .em import covariance, run_em

__all__ = ["DEFAULT_CANDIDATE_SET_SIZE", "EMOptions", "WeightFit", "BlockedFit", "fit_weights"]

#: candidates per set when ``candidate_set_size=None``: G and the EM temporaries are
#: a few m x m float64 arrays (~50 MiB at 1000) and the first EM iterations,
#: O(m^3) each, take ~0.1 s on one core.
DEFAULT_CANDIDATE_SET_SIZE = 1000
#: columns per task in the add-back pass (R x 1024 float64 blocks, ~32 MiB)
ADD_COLS = 1024
#: a discarded kernel is added back when Q_j / (n s_j) exceeds this; the
#: likelihood gain is n/2 (rho - 1 - log rho) ~ n (rho - 1)^2 / 4, i.e. < 3e-5 n below it
ADD_RATIO = 1.01
MAX_ADD_ROUNDS = 10
MAX_SET_ROUNDS = 20


@dataclass(frozen=True)
class EMOptions:
    """How :func:`dkpca.sparse.em.run_em` is run on every candidate set."""

    update: str
    max_iter: int
    tol: float
    prune: float


@dataclass
class WeightFit:
    """What :func:`fit_weights` found.

    Attributes
    ----------
    active : ndarray of shape (m,)
        Training rows with non-zero weight, ascending.
    weights : ndarray of shape (m,)
    em : dict
        The final :func:`~dkpca.sparse.em.run_em` result (likelihood history, iterations, converged).
    row_means, grand_mean
        Centring statistics of K over all n rows (``None``, 0.0 without centring).
    report : dict
        Mode (exact/blocked), rounds, add-back rounds, passes over X (stored names: ``block_size`` is the
        candidate set size, a round's ``blocks`` its candidate sets).
    """

    active: np.ndarray
    weights: np.ndarray
    em: dict
    row_means: np.ndarray | None
    grand_mean: float
    report: dict = field(default_factory=dict)


def gram_partial(XR: np.ndarray, rR: np.ndarray | None, XB: np.ndarray, rB: np.ndarray | None,
                 kernel: Kernel, c: float) -> np.ndarray:
    """``K_RB^T K_RB`` for one row block R and candidate set B."""
    KRB = kernel_block(kernel, XR, XB, None if rR is None else (rR, rB, c))
    return KRB.T @ KRB


def set_em(G: np.ndarray, XB: np.ndarray, rB: np.ndarray | None, kernel: Kernel, c: float, diag_sum: float,
           n: int, sigma2: float, w0: np.ndarray, opts: EMOptions) -> dict:
    """EM for one candidate set (a dask task: G arrives from the row reduction)."""
    K = kernel_block(kernel, XB, XB, None if rB is None else (rB, rB, c), same=True)
    return run_em(K, G, diag_sum, n, sigma2, w0, opts.update, opts.max_iter, opts.tol, opts.prune)


def addback_q(XR: np.ndarray, rR: np.ndarray | None, XJ: np.ndarray, rJ: np.ndarray | None, XA: np.ndarray,
              rA: np.ndarray | None, kernel: Kernel, c: float, Sigma: np.ndarray, sigma2: float) -> np.ndarray:
    """``sum_{n in R} (phi_n^T C^-1 phi_j)^2`` for the columns j in J."""
    centred = rR is not None
    KRJ = kernel_block(kernel, XR, XJ, (rR, rJ, c) if centred else None)
    KRA = kernel_block(kernel, XR, XA, (rR, rA, c) if centred else None)
    KAJ = kernel_block(kernel, XA, XJ, (rA, rJ, c) if centred else None)
    M = KRJ / sigma2
    M -= KRA @ (Sigma @ KAJ) / sigma2**2
    return np.einsum("ij,ij->j", M, M)


def addback_s(XJ: np.ndarray, rJ: np.ndarray | None, dJ: np.ndarray, XA: np.ndarray, rA: np.ndarray | None,
              kernel: Kernel, c: float, Sigma: np.ndarray, sigma2: float) -> np.ndarray:
    """``phi_j^T C^-1 phi_j`` for the columns j in J (eq. 8)."""
    KAJ = kernel_block(kernel, XA, XJ, None if rJ is None else (rA, rJ, c))
    return dJ / sigma2 - np.einsum("ij,ij->j", KAJ, Sigma @ KAJ) / sigma2**2


class BlockedFit:
    """Training data, centring statistics and the dask graphs of one fit."""

    def __init__(self, X: np.ndarray, r: np.ndarray | None, c: float, kernel: Kernel, sigma2: float,
                 diag: np.ndarray, row_block: int) -> None:
        self.X, self.r, self.c, self.kernel, self.sigma2 = X, r, c, kernel, sigma2
        self.n = X.shape[0]
        self.diag, self.diag_sum = diag, float(diag.sum())
        self.bounds = block_bounds(self.n, row_block)
        self.rows = [dask.delayed(X[a:b], pure=True) for a, b in self.bounds]
        self.rrows = [None if r is None else dask.delayed(r[a:b], pure=True) for a, b in self.bounds]

    def subset(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows ``idx`` of X and their row means (None without centring)."""
        return self.X[idx], (None if self.r is None else self.r[idx])

    def run_sets(self, sets: list[np.ndarray], opts: EMOptions, w0: list | None = None) -> list[dict]:
        """EM on each candidate set against all n rows, in one graph (one pass over X)."""
        tasks = []
        for i, cand in enumerate(sets):
            XB, rB = self.subset(cand)
            XBd, rBd = dask.delayed(XB, pure=True), dask.delayed(rB, pure=True)
            parts = [dask.delayed(gram_partial, pure=True)(XR, rR, XBd, rBd, self.kernel, self.c)
                     for XR, rR in zip(self.rows, self.rrows, strict=True)]
            w_init = np.full(cand.size, 1.0 / self.n) if w0 is None else w0[i]
            tasks.append(dask.delayed(set_em, pure=True)(
                tree_sum(parts), XBd, rBd, self.kernel, self.c, self.diag_sum, self.n, self.sigma2, w_init, opts))
        return list(compute(*tasks, label="sparse KPCA: EM over candidate sets"))

    def add_back(self, active: np.ndarray, weights: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Discarded candidates whose single-weight likelihood rises from zero (module docstring).

        Returns their indices (at most ``limit - |active|``, largest ratio
        first), their starting weights and the largest ratio ``Q_j / (n s_j)``.
        """
        n, sigma2 = self.n, self.sigma2
        XA, rA = self.subset(active)
        K = kernel_block(self.kernel, XA, XA, None if rA is None else (rA, rA, self.c), same=True)
        Sigma = covariance(K, weights, sigma2)[0]
        XAd, rAd, Sd = (dask.delayed(v, pure=True) for v in (XA, rA, Sigma))
        cols = block_bounds(n, ADD_COLS)
        q_tasks, s_tasks = [], []
        for j0, j1 in cols:
            XJ = dask.delayed(self.X[j0:j1], pure=True)
            rJ = None if self.r is None else dask.delayed(self.r[j0:j1], pure=True)
            parts = [dask.delayed(addback_q, pure=True)(XR, rR, XJ, rJ, XAd, rAd, self.kernel, self.c, Sd, sigma2)
                     for XR, rR in zip(self.rows, self.rrows, strict=True)]
            q_tasks.append(tree_sum(parts))
            s_tasks.append(dask.delayed(addback_s, pure=True)(XJ, rJ, self.diag[j0:j1], XAd, rAd, self.kernel,
                                                              self.c, Sd, sigma2))
        out = compute(*q_tasks, *s_tasks, label="sparse KPCA: checking discarded candidates")
        Q = np.concatenate(out[: len(cols)])
        sv = np.concatenate(out[len(cols):])
        ratio = np.where(sv > 0, Q / (n * np.maximum(sv, np.finfo(float).tiny)), 0.0)
        ratio[active] = 0.0
        rho_max = float(ratio.max()) if ratio.size else 0.0
        cand = np.flatnonzero(ratio > ADD_RATIO)
        room = max(limit - active.size, 0)
        if cand.size > room:
            cand = cand[np.argsort(ratio[cand])[::-1][:room]]
        return cand, (ratio[cand] - 1.0) / sv[cand], rho_max


def _shrink(ctx: BlockedFit, pool: np.ndarray, size: int, opts: EMOptions, rng: np.random.RandomState,
            report: dict) -> np.ndarray:
    """Rounds over candidate sets until the pool fits in one set; returns the pool, ascending."""
    for _ in range(MAX_SET_ROUNDS):
        if pool.size <= size:
            return np.sort(pool)
        sets = np.array_split(pool, -(-pool.size // size))
        results = ctx.run_sets(sets, opts)
        report["passes"] += 1
        survivors = np.concatenate([cand[res["active"]] for cand, res in zip(sets, results, strict=True)])
        report["rounds"].append({"candidates": int(pool.size), "blocks": len(sets),
                                 "survivors": int(survivors.size)})
        if survivors.size >= pool.size:
            fix = ("increase candidate_set_size (above the number of representing kernels you expect) or "
                   f"noise_variance={ctx.sigma2} (fewer kernels).")
            stopped = sum(not res["converged"] for res in results)
            if stopped:  # an EM stopped by max_iter may not yet have let its weights fall to zero
                fix = (f"the EM of {stopped} of {len(sets)} sets stopped at max_iter={opts.max_iter} before it "
                       f"settled: increase max_iter, or {fix}")
            raise ValueError(f"blocked sparse KPCA cannot shrink the candidate set: all {pool.size} candidates "
                             f"survive in candidate sets of {size}; {fix}")
        pool = rng.permutation(survivors)
    raise ValueError("blocked sparse KPCA did not reduce the candidates to one set; "  # pragma: no cover
                     "increase candidate_set_size or noise_variance.")


def fit_weights(X: np.ndarray, kernel: Kernel, sigma2: float, opts: EMOptions, set_size: int,
                rng: np.random.RandomState, center_kernel: bool) -> WeightFit:
    """The weights of sparse kernel PCA on ``X`` (float64, validated), exact or blocked (module docstring)."""
    n = X.shape[0]
    report: dict[str, Any] = {"n_samples": n, "block_size": set_size, "passes": 0, "rounds": [], "add_back": []}
    diag = kernel.diag(X, np.float64)
    if center_kernel:
        # the centring statistics cost one matrix-free pass over X
        op = MatrixFreeKernelOperator(as_dask(X), kernel, np.float64)
        r, c = np.asarray(op.row_means, dtype=np.float64), float(op.grand_mean)
        diag = center(diag, (r, r, c), diagonal=True)
        report["passes"] += 1
    else:
        r, c = None, 0.0
    ctx = BlockedFit(X, r, c, kernel, sigma2, diag, default_block_size(n))

    if n <= set_size:
        report["mode"] = "exact"
        pool = np.arange(n)
    else:
        report["mode"] = "blocked"
        pool = _shrink(ctx, rng.permutation(n), set_size, opts, rng, report)
    res = ctx.run_sets([pool], opts, w0=[np.full(pool.size, 1.0 / n)])[0]
    report["passes"] += 1
    active, weights = pool[res["active"]], res["weights"]
    if report["mode"] == "blocked":
        for _ in range(MAX_ADD_ROUNDS):
            add, w_add, rho_max = ctx.add_back(active, weights, set_size)
            report["passes"] += 1
            report["add_back"].append({"active": int(active.size), "added": int(add.size), "max_ratio": rho_max})
            if add.size == 0:
                break
            pool = np.concatenate([active, add])
            order = np.argsort(pool)
            pool, w0 = pool[order], np.concatenate([weights, w_add])[order]
            res = ctx.run_sets([pool], opts, w0=[w0])[0]
            report["passes"] += 1
            active, weights = pool[res["active"]], res["weights"]
        else:
            warnings.warn(
                f"the active set was still changing after {MAX_ADD_ROUNDS} add-back rounds; "
                "increase candidate_set_size so that more candidates are fitted together.",
                ConvergenceWarning, stacklevel=3)
    return WeightFit(active, weights, res, r, c, report)
