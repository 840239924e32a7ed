"""Eigensolvers over a :class:`~dkpca.operator.CenteredKernelOperator`.

Each solver is a function ``solve(operator, k, *, tol, max_passes, rng) ->
EigResult``.  What every solver needs afterwards -- descending order,
deterministic signs, clipping of tiny negative eigenvalues of a PSD kernel --
is done once, in :func:`finalize`.  :func:`choose_solver` resolves ``"auto"``
in one place and says why.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["EigResult", "finalize", "choose_solver", "get_solver", "SOLVERS", "ConvergenceWarning"]

#: n up to which ``auto`` solves densely: the dense K~ (n^2 float64) plus
#: eigh's workspace stay well under a GB and eigh beats repeated passes.
DENSE_MAX_N = 3000


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped at ``max_passes`` before reaching ``tol``."""


@dataclass
class EigResult:
    """Top eigenpairs of K~ and how they were obtained.

    Attributes
    ----------
    eigenvalues : ndarray of shape (k,)
        Descending.
    eigenvectors : ndarray of shape (n, k)
        Orthonormal columns.
    passes : int
        Products with K~ (passes over K).
    residuals : ndarray of shape (k,)
        ``||K~ u - lambda u||`` per eigenpair.
    converged : bool
    solver : str
    history : list of float
        Largest relative residual after each pass (iterative solvers).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    passes: int
    residuals: np.ndarray
    converged: bool
    solver: str
    history: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def report_pass(operator, rel_residual: float) -> None:
    """One line per solver pass when progress is on (CLI, Jupyter)."""
    from .._compute import progress_enabled

    if progress_enabled():
        t = operator.pass_seconds[-1] if operator.pass_seconds else float("nan")
        print(f"  pass {operator.passes:3d}: max relative residual {rel_residual:.2e} ({t:.2f}s)", flush=True)


def finalize(res: EigResult, positive_definite: bool = True) -> EigResult:
    """Sort descending, fix signs, clip round-off negatives of PSD kernels.

    Signs follow scikit-learn's ``svd_flip`` rule for eigenvectors: the entry
    of largest magnitude in each vector is made positive, so repeated fits
    (and different solvers) give identical output.
    """
    order = np.argsort(res.eigenvalues)[::-1]
    lam = res.eigenvalues[order].astype(np.float64)
    U = res.eigenvectors[:, order]
    idx = np.argmax(np.abs(U), axis=0)
    signs = np.sign(U[idx, np.arange(U.shape[1])])
    signs[signs == 0] = 1
    U = U * signs
    if positive_definite and lam.size:
        # A PSD kernel's centred matrix has eigenvalues >= 0; anything below is
        # round-off of size ~ eps * lambda_1.  Larger negatives are real (a
        # non-PSD kernel in disguise) and are reported, not hidden.
        floor = -1e-6 * max(lam[0], 0.0) if lam[0] > 0 else 0.0
        if np.any(lam < floor):
            warnings.warn(
                f"the centred kernel matrix has significantly negative eigenvalues (min {lam.min():.3g}); "
                "the kernel may not be positive semi-definite for this data.",
                RuntimeWarning,
                stacklevel=3,
            )
        lam = np.where((lam < 0) & (lam >= floor), 0.0, lam)
    res.eigenvalues = lam
    res.eigenvectors = np.ascontiguousarray(U)
    res.residuals = np.asarray(res.residuals)[order]
    return res


def choose_solver(n: int, k: int, requested: str) -> tuple[str, str]:
    """Resolve ``"auto"``; returns (solver, reason)."""
    if requested != "auto":
        return requested, "requested"
    if n <= DENSE_MAX_N:
        return "dense", f"n={n} <= {DENSE_MAX_N}: a dense eigh is cheaper than iterating"
    if k > n // 4:
        return "dense", f"n_components={k} > n/4: most of the spectrum is wanted"
    return "randomized", f"n={n} > {DENSE_MAX_N}, k={k}: iterative subspace method, cost = passes over K"


def get_solver(name: str):
    from . import dense, randomized

    table = {"dense": dense.solve, "randomized": randomized.solve}
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"solver={name!r} is unknown; choose one of {sorted(table) + ['auto']}.") from None


SOLVERS = ("auto", "dense", "randomized")
