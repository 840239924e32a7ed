"""Eigensolvers over a :class:`~dkpca.operator.CenteredKernelOperator`.

Every solver is a function with one signature::

    solve(operator, k, *, tol, max_passes, rng, callback=None, **solver_specific) -> EigResult

returning the ``k`` largest eigenpairs of K~ *by value* (dense, randomized,
lanczos, nystrom, arpack; :func:`get_solver` by name).  ``callback``, if
given, receives a :class:`PassReport` after each pass; solvers never print.
What every result needs afterwards -- ranking by value, deterministic signs,
scikit-learn's checks of a PSD spectrum, dropping zero components -- is
written once, in :func:`postprocess` (:mod:`dkpca.solvers.spectrum`), and
used by every path.  An iterative solver that stops at ``max_passes`` before
``tol`` returns ``converged=False``; callers warn with
:class:`ConvergenceWarning`, which is scikit-learn's own class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from sklearn.exceptions import ConvergenceWarning

from . import arpack, dense, lanczos, nystrom, randomized
from .result import Callback, EigResult, PassReport
from .spectrum import check_eigenvalues, flip_signs, postprocess

__all__ = ["EigResult", "PassReport", "Callback", "ConvergenceWarning", "postprocess", "check_eigenvalues",
           "flip_signs", "get_solver", "SOLVERS", "SOLVER_NAMES"]

#: Solvers ``dkpca.fit`` accepts (``auto``: resolved by :func:`dkpca.planning.choose`).
#: ARPACK is not among them: out of core each of its single-vector steps would be a pass over K.
SOLVERS = ("auto", "dense", "randomized", "lanczos", "nystrom")

_TABLE: Mapping[str, Callable[..., EigResult]] = MappingProxyType({
    "dense": dense.solve,
    "randomized": randomized.solve,
    "lanczos": lanczos.solve,
    "nystrom": nystrom.solve,
    "arpack": arpack.solve,
})

#: every solver :func:`get_solver` knows
SOLVER_NAMES = tuple(_TABLE)


def get_solver(name: str) -> Callable[..., EigResult]:
    """The ``solve`` function of solver ``name`` (not ``auto``: see :func:`dkpca.planning.choose`).

    Raises
    ------
    ValueError
        Unknown name; the message lists the known ones.
    """
    try:
        return _TABLE[name]
    except KeyError:
        raise ValueError(f"solver={name!r} is unknown; choose one of {', '.join(_TABLE)}.") from None
