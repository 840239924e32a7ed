"""Eigensolvers over a :class:`~dkpca.operator.CenteredKernelOperator`.

Every solver is a function with one signature::

    solve(operator, k, *, tol, max_passes, rng, callback=None, **solver_specific) -> EigResult

returning the ``k`` largest eigenpairs of K~ *by value* (dense, randomized,
lanczos, nystrom, arpack; :func:`get_solver` by name).  Each is registered
with a :class:`SolverSpec` that declares what it can do (:data:`SOLVER_SPECS`,
``Solver.spec``): the planner, the solve path and the estimators read those
facts there instead of comparing names.  ``callback``, if
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
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .result import DEFAULT_MAX_PASSES, Callback, EigResult, PassReport
from .spectrum import check_eigenvalues, flip_signs, postprocess

if TYPE_CHECKING:
    from sklearn.exceptions import ConvergenceWarning

__all__ = ["EigResult", "PassReport", "Callback", "ConvergenceWarning", "postprocess", "check_eigenvalues",
           "flip_signs", "get_solver", "subspace_width", "block_width", "Solver", "SOLVERS", "SOLVER_NAMES",
           "SolverSpec", "SOLVER_SPECS", "DEFAULT_MAX_PASSES", "spec_of"]


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
    def spec(self) -> SolverSpec:
        """What this solver can do (:data:`SOLVER_SPECS`)."""
        return SOLVER_SPECS[self]

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


@dataclass(frozen=True)
class SolverSpec:
    """A registered solver and the capabilities it declares: what every layer above reads instead of its name.

    ``tests/test_plan_specs.py`` checks each declaration against the solver's behaviour.

    Attributes
    ----------
    name : Solver
    in_memory_only : bool
        Needs K held in memory (``gram="memory"``): out of core each of its steps would be a pass over K.
    exact : bool
        Eigenpairs of K~ itself, to ``tol`` (False: of an approximation of K~, which it never forms).
    iterative : bool
        Stops at ``tol`` or its iteration budget, and may stop short (``converged=False``: callers warn).
    takes_start : bool
        Multiplies a block of vectors each pass, from a start block it accepts (``start=``): the plan's
        start policy and the fit's fused first product apply.
    checkpoints : bool
        Saves its state after every pass and resumes from it (``checkpoint=``).
    fraction : bool
        Supports ``n_components`` as a fraction of explained variance (rounds of growing k).
    float32_products : bool
        Multiplies a float32 K in float32 throughout (ARPACK in memory): that arithmetic's error counts
        in the choice of K's precision.
    float32_early_passes : bool
        Its early products may run in float32, corrected by later passes: so may the fused first product.
    float32_late_passes : bool
        Its later products may run in float32 once its residual is small, under the operator's bound on a
        float32 product's error (``operator.single_error``), which the residuals it reports then include
        (``relaxed=False``: none).
    pass_budget : bool
        Makes at most ``max_passes`` products with K (a direct solver's one sweep is within any budget).  False:
        ARPACK, whose limit counts restarts of many one-vector products (scikit-learn's ``max_iter``):
        ``dkpca.fit`` refuses ``max_passes`` for it, and ``auto`` does not pick it when one is given.
    ritz : bool
        Returns its leading Ritz pairs with their exact products with K~ when asked (``ritz=p``:
        ``info["ritz"] = (theta, U, K~ U)``, no extra pass): the record a later update starts from.
    """

    name: Solver
    in_memory_only: bool
    exact: bool
    iterative: bool
    takes_start: bool
    checkpoints: bool
    fraction: bool
    float32_products: bool = False
    float32_early_passes: bool = False
    float32_late_passes: bool = False
    ritz: bool = False
    pass_budget: bool = True

    @property
    def forms_kernel(self) -> bool:
        """Works on K (stored, recomputed or in memory); an approximate solver evaluates only slices of it."""
        return self.exact


#: every solver's declared capabilities
SOLVER_SPECS: Mapping[Solver, SolverSpec] = MappingProxyType({spec.name: spec for spec in (
    SolverSpec(Solver.DENSE, in_memory_only=False, exact=True, iterative=False, takes_start=False,
               checkpoints=False, fraction=True),
    SolverSpec(Solver.RANDOMIZED, in_memory_only=False, exact=True, iterative=True, takes_start=True,
               checkpoints=True, fraction=True, float32_early_passes=True, ritz=True),
    SolverSpec(Solver.LANCZOS, in_memory_only=False, exact=True, iterative=True, takes_start=True,
               checkpoints=True, fraction=True, float32_late_passes=True, ritz=True),
    SolverSpec(Solver.NYSTROM, in_memory_only=False, exact=False, iterative=False, takes_start=False,
               checkpoints=False, fraction=False),
    SolverSpec(Solver.ARPACK, in_memory_only=True, exact=True, iterative=True, takes_start=False,
               checkpoints=False, fraction=False, float32_products=True, pass_budget=False),
)})


def spec_of(name: str | Solver) -> SolverSpec | None:
    """The spec of solver ``name`` as a user passed it; None for ``auto`` (the planner's choice, not yet made).

    Raises
    ------
    ValueError
        Unknown name; the message lists the known ones.
    """
    return None if name == "auto" else Solver.parse(name).spec

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

    The dense solver: ``k``.  Block Lanczos: its panel, ``k + 10`` (``lanczos.default_width``); subspace
    iteration (randomized, and any other solver asked): ``k + max(10, k)`` (``randomized.iteration_width``).
    ("Width", not "block": a block is a tile of K, :func:`dkpca.linalg.block_bounds`.)
    """
    if name == Solver.DENSE:
        return k
    if name == Solver.LANCZOS:
        return importlib.import_module(".lanczos", __name__).default_width(n, k)
    return importlib.import_module(".randomized", __name__).iteration_width(n, k)


#: the former name of :func:`subspace_width` (``tests/test_solvers.py`` imports it)
block_width = subspace_width


def __getattr__(name: str) -> Any:
    if name == "ConvergenceWarning":
        return importlib.import_module("sklearn.exceptions").ConvergenceWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
