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
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .result import Callback, EigResult, PassReport
from .spectrum import check_eigenvalues, flip_signs, postprocess

if TYPE_CHECKING:
    from sklearn.exceptions import ConvergenceWarning

__all__ = ["EigResult", "PassReport", "Callback", "ConvergenceWarning", "postprocess", "check_eigenvalues",
           "flip_signs", "get_solver", "subspace_width", "block_width", "Solver", "SOLVERS", "SOLVER_NAMES"]


class Solver(StrEnum):
    """A solver's name as a typed value: what every layer above compares (never the string).

    A ``StrEnum``: its value is the name users pass and the report records
    (``str(Solver.DENSE) == "dense"``); :meth:`parse` is the one conversion
    of a user's string (the CLI's and the Python API's) into it.
    """

    DENSE = "dense"
    RANDOMIZED = "randomized"
    LANCZOS = "lanczos"
    NYSTROM = "nystrom"
    ARPACK = "arpack"

    @property
    def iterative(self) -> bool:
        """Multiplies a block of vectors each pass from a start block (block Lanczos, subspace iteration)."""
        return self in (Solver.RANDOMIZED, Solver.LANCZOS)

    @classmethod
    def parse(cls, name: str | Solver) -> Solver:
        """``name`` as a :class:`Solver` (not ``auto``: :mod:`dkpca.planning` resolves it).

        Raises
        ------
        ValueError
            Unknown name; the message lists the known ones.
        """
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"solver={name!r} is unknown; choose one of {', '.join(cls)}.") from None

#: Solvers ``dkpca.fit`` accepts (``auto``: resolved by :func:`dkpca.planning.choose`).
#: ARPACK only with K held in memory (``gram="memory"``): out of core each of its
#: single-vector steps would be a pass over K (``dkpca.request`` refuses it there).
SOLVERS = ("auto", "dense", "randomized", "lanczos", "nystrom", "arpack")

#: solver -> the module whose ``solve`` it is
_TABLE: Mapping[Solver, str] = MappingProxyType({solver: f".{solver.value}" for solver in Solver})

#: every solver :func:`get_solver` knows
SOLVER_NAMES = tuple(solver.value for solver in Solver)


def get_solver(name: str | Solver) -> Callable[..., EigResult]:
    """The ``solve`` function of solver ``name`` (not ``auto``: see :func:`dkpca.planning.choose`).

    Raises
    ------
    ValueError
        Unknown name; the message lists the known ones.
    """
    return importlib.import_module(_TABLE[Solver.parse(name)], __name__).solve


def subspace_width(name: str | Solver, n: int, k: int) -> int:
    """The subspace width: columns of the block of vectors a solver multiplies each pass (an iterative
    solver's start block's width).

    The dense solver: ``k``.  Block Lanczos: ``k + 10`` (``lanczos.default_block``); subspace iteration
    (randomized, and any other solver asked): ``k + max(10, k)`` (``randomized.block_size``).
    ("Width", not "block": a block is a tile of K, :func:`dkpca.linalg.block_bounds`.)
    """
    if name == Solver.DENSE:
        return k
    if name == Solver.LANCZOS:
        return importlib.import_module(".lanczos", __name__).default_block(n, k)
    return importlib.import_module(".randomized", __name__).block_size(n, k)


#: the former name of :func:`subspace_width` (``tests/test_solvers.py`` imports it)
block_width = subspace_width


def __getattr__(name: str) -> Any:
    if name == "ConvergenceWarning":
        return importlib.import_module("sklearn.exceptions").ConvergenceWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
