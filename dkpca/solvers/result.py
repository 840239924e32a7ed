"""What every solver returns (:class:`EigResult`) and reports after each pass (:class:`PassReport`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["EigResult", "PassReport", "Callback", "report", "DEFAULT_MAX_PASSES"]

#: the pass budget of an iterative solve when the caller gives none: the one default of ``max_passes``
#: (the solvers', :func:`~dkpca.solvers.fraction.solve_fraction`'s and ``dkpca.fit``'s, via
#: :mod:`dkpca.request`)
DEFAULT_MAX_PASSES = 60


@dataclass
class EigResult:
    """Top eigenpairs of K~ and how they were obtained.

    Solvers return the pairs in their own order; :func:`dkpca.solvers.postprocess`
    turns them into the published spectrum (ranked by value, signed, checked).

    Attributes
    ----------
    eigenvalues : ndarray of shape (k,)
    eigenvectors : ndarray of shape (n, k)
        Orthonormal columns.
    passes : int
        Products with K~ (passes over K; Nystroem: passes over X).
    residuals : ndarray of shape (k,)
        ``||K~ u - lambda u||`` per eigenpair (or a bound, see the solver).
    converged : bool
    solver : str
    history : list of float
        Largest relative residual after each pass (iterative solvers); NaN for
        a pass whose residual was not computed (block Lanczos leaves out the
        Ritz pairs of passes predicted not to converge; the last is always computed).
    info : dict
        Solver-specific figures (subspace width, restarts, landmarks, ...).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    passes: int
    residuals: np.ndarray
    converged: bool
    solver: str
    history: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PassReport:
    """Progress of a solver after one pass, handed to its ``callback``.

    Attributes
    ----------
    pass_number : int
        Passes made so far by this solve (a resumed solve counts the saved ones).
    max_relative_residual : float
        ``max_i ||K~ u_i - theta_i u_i|| / theta_1`` over the wanted pairs
        (NaN where the solver has no estimate yet, or did not compute it this pass).
    seconds : float
        Wall time of this pass: the product with K~ and the solver's own work on it.
    """

    pass_number: int
    max_relative_residual: float
    seconds: float


#: what solvers call after each pass (printing, logging, a notebook widget: the caller's choice)
Callback = Callable[[PassReport], None]


def report(callback: Callback | None, pass_number: int, max_relative_residual: float, seconds: float) -> None:
    """Hand one :class:`PassReport` to ``callback`` (nothing when it is None)."""
    if callback is not None:
        callback(PassReport(int(pass_number), float(max_relative_residual), float(seconds)))
