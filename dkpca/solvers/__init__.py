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

The solver modules (Nystroem's uses Dask, ARPACK's scikit-learn) and
scikit-learn's warning class load on first use -- :func:`get_solver`, module
``__getattr__`` -- so that the command line reads :data:`SOLVERS` without
importing them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .result import Callback, EigResult, PassReport
from .spectrum import check_eigenvalues, flip_signs, postprocess

if TYPE_CHECKING:
    from sklearn.exceptions import ConvergenceWarning

__all__ = ["EigResult", "PassReport", "Callback", "ConvergenceWarning", "postprocess", "check_eigenvalues",
           "flip_signs", "get_solver", "block_width", "SOLVERS", "SOLVER_NAMES"]

#: Solvers ``dkpca.fit`` accepts (``auto``: resolved by :func:`dkpca.planning.choose`).
#: ARPACK only with K held in memory (``gram="memory"``): out of core each of its
#: single-vector steps would be a pass over K (``dkpca.request`` refuses it there).
SOLVERS = ("auto", "dense", "randomized", "lanczos", "nystrom", "arpack")

#: solver name -> the module whose ``solve`` it is
_TABLE: Mapping[str, str] = MappingProxyType({
    "dense": ".dense",
    "randomized": ".randomized",
    "lanczos": ".lanczos",
    "nystrom": ".nystrom",
    "arpack": ".arpack",
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
        module = _TABLE[name]
    except KeyError:
        raise ValueError(f"solver={name!r} is unknown; choose one of {', '.join(_TABLE)}.") from None
    return importlib.import_module(module, __name__).solve


def block_width(name: str, n: int, k: int) -> int:
    """Columns of the block an iterative solver multiplies each pass (its start block's width).

    Block Lanczos: ``k + 10`` (``lanczos.default_block``); subspace iteration
    (randomized, and any other solver asked): ``k + max(10, k)``
    (``randomized.block_size``).
    """
    if name == "lanczos":
        return importlib.import_module(".lanczos", __name__).default_block(n, k)
    return importlib.import_module(".randomized", __name__).block_size(n, k)


def __getattr__(name: str) -> Any:
    if name == "ConvergenceWarning":
        return importlib.import_module("sklearn.exceptions").ConvergenceWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
