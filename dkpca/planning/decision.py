"""The fit's decisions as one typed, frozen value (:class:`FitPlan`), made by one function (:func:`decide`).

``dkpca.plan`` and ``dkpca.fit`` both call :func:`decide` on their
validated request, and the fit executes the plan it returns -- nothing after
it re-decides -- so what a plan names is what a fit runs.  Strings users pass
(``solver="lanczos"``, ``gram="store"``) become :class:`~dkpca.solvers.Solver`
and :class:`~dkpca.grammode.GramMode` here, at the boundary; above it nothing compares names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..grammode import NO_GRAM, GramMode
from ..request import FitRequest
from ..solvers import Solver, SolverSpec, nystrom, subspace_width
from ..solvers.fraction import working_k
from ..storage import GramStore
from ..storage.growth import Growth
from .auto import choose
from .growthplan import update_modes
from .precision import Precision

__all__ = ["FitPlan", "GramMode", "decide", "instead_of_arpack", "start_policy", "StartPolicy",
           "SERIAL_ALGEBRA_MAX_WIDTH"]


#: widest start block whose solver algebra (between passes) runs on one BLAS thread.  Measured at
#: n = 20,000 from a Zarr path (Lanczos, 2 cores; the solver's time outside its passes, one BLAS thread
#: vs two): block 20: 0.37 s vs 0.78 s; block 60: 13.0 / 12.9 s vs 13.3 / 14.5 s; block 110:
#: 24.9 / 27.2 s vs 20.7 / 21.0 s; block 210: 47.2 / 47.0 s vs 34.8 / 34.5 s.  Narrow blocks are
#: tall-skinny products that two threads run slower (and whose idle BLAS threads spin on the cores a
#: pass needs); wide ones are GEMMs and eigenproblems that two threads run faster.  The same holds for
#: the algebra of a Nystroem start block (200 landmarks, block 20; median of 8, one BLAS thread vs two):
#: 0.30 s vs 0.41 s at n = 20,000, 0.51 s vs 0.61 s at n = 40,000.
SERIAL_ALGEBRA_MAX_WIDTH = 64


@dataclass(frozen=True)
class StartPolicy:
    """An iterative solver's start block: its width, Nystroem landmarks (None: random) and BLAS threads.

    ``serial``: the block's algebra (a Nystroem start's, and the solver's between passes) on one BLAS
    thread -- for blocks up to :data:`SERIAL_ALGEBRA_MAX_WIDTH` columns.
    """

    width: int
    landmarks: int | None
    serial: bool
    reason: str


def start_policy(solver: Solver, n: int, k: int) -> StartPolicy:
    """The start block of ``solver`` for n samples and k components (the fit's and the estimator's rule).

    Where the Nystroem start pays is :func:`~dkpca.solvers.nystrom.start_landmarks`' rule (large n,
    wide blocks).
    """
    width = subspace_width(solver, n, k)
    landmarks = nystrom.start_landmarks(n, width)
    serial = width <= SERIAL_ALGEBRA_MAX_WIDTH
    why = (f"{width} columns from the top eigenvectors of a {landmarks}-landmark Nystroem approximation"
           if landmarks is not None else f"{width} random columns")
    blas = (f"one BLAS thread for its algebra ({width} <= {SERIAL_ALGEBRA_MAX_WIDTH} columns)" if serial else
            f"BLAS as configured for its algebra ({width} > {SERIAL_ALGEBRA_MAX_WIDTH} columns: GEMMs)")
    return StartPolicy(width, landmarks, serial, f"{why}; {blas}")


@dataclass(frozen=True)
class FitPlan:
    """Every decision of a fit, with the reason for each: what ``dkpca.plan`` names and ``dkpca.fit`` runs.

    Attributes
    ----------
    solver : Solver
        Its capabilities: :attr:`spec`.
    gram : GramMode
    tile : int
        The Gram tile edge (square tiles of K; the row chunks of X); ``"block"`` in :meth:`to_dict`.
    width : int
        The subspace width: columns of the block of vectors a pass multiplies (k for the dense solver;
        :func:`~dkpca.solvers.subspace_width`); ``"subspace"`` in :meth:`to_dict`.
    precision : Precision
        The precision K is held in and why.
    start : StartPolicy or None
        The iterative solvers' start block and BLAS threads (None: no start block -- the dense and
        ARPACK solvers, Nystroem, or K in memory).
    compiled_exp : bool
        Evaluate the kernel's exp compiled (:func:`~dkpca.planning.auto.use_compiled_exp`).
    n, k : int
        Samples and components (for a fraction, the first round's k: n for the dense solver).
    fraction : float or None
        ``n_components`` as a fraction of explained variance.
    reasons : dict
        One sentence per decision: ``solver``, ``gram``, ``dtype``, ``start``, ``exp``.
    details : dict
        The figures the decisions used (JSON-safe).
    """

    solver: Solver
    gram: GramMode
    tile: int
    width: int
    precision: Precision
    start: StartPolicy | None
    compiled_exp: bool
    n: int
    k: int
    fraction: float | None
    reasons: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> SolverSpec:
        """The solver's declared capabilities (:class:`~dkpca.solvers.SolverSpec`): what the fit reads."""
        return self.solver.spec

    @property
    def dtype(self) -> np.dtype:
        """K's precision."""
        return np.dtype(self.precision.dtype)

    @property
    def reason(self) -> str:
        """The solver's and the Gram mode's reasons in one line (the plan's and report's ``solver_reason``)."""
        return f"solver={self.solver}: {self.reasons['solver']}; gram={self.gram_label}: {self.reasons['gram']}"

    @property
    def formed_gram(self) -> GramMode | None:
        """Where the fit's K lives; None where the solver never forms K (Nystroem evaluates n x m slices only)."""
        return self.gram if self.spec.forms_kernel else None

    @property
    def gram_label(self) -> str:
        """The Gram mode as the plan and the report name it (:data:`~dkpca.grammode.NO_GRAM`: no K formed)."""
        return NO_GRAM if self.formed_gram is None else self.formed_gram.value

    def to_dict(self) -> dict[str, Any]:
        """The decisions as JSON types (``model.report["plan"]``)."""
        return {"solver": self.solver.value, "gram": self.gram_label, "block": self.tile, "subspace": self.width,
                "dtype": self.dtype.name, "start": None if self.start is None else {
                    "width": self.start.width, "landmarks": self.start.landmarks, "serial_blas": self.start.serial},
                "compiled_exp": self.compiled_exp, "reasons": dict(self.reasons)}


def decide(req: FitRequest, *, measure: bool = True, store_path: str | None = None,
           growth: Growth | None = None, precision: Precision | None = None) -> FitPlan:
    """The plan of the fit ``req`` asks for: the one call ``dkpca.plan`` and ``dkpca.fit`` both make.

    ``measure=False`` (a plan of sizes only) reads nothing of X: the
    precision is then not measured (``dtype="auto"`` says float32, and that a
    fit decides from a sample), and where measured block costs would decide the
    Gram mode (K over 1 GiB, ``gram="auto"``) K is stored.  ``store_path``:
    where a store would be, for a plan of in-memory input (which creates no
    temporary store).  A store that already holds K
    (not overwritten) keeps its precision where ``dtype="auto"``.  ``growth``: the fit updates the store's
    (:func:`~dkpca.planning.growthplan.update_modes` decides what ``auto`` leaves to an update); ``precision``:
    the one :func:`~dkpca.planning.growthplan.growth_request` measured for it, taken rather than measured again.
    """
    store = req.store.path if req.store is not None else store_path
    stored = None if req.overwrite or req.store is None else GramStore(req.store).recorded_dtype()
    asked_solver, asked_gram, update_why = update_modes(req, growth)
    c = choose(req.n, req.n_components, asked_solver, asked_gram, X=req.X if measure else None, kernel=req.kernel,
               dtype=req.dtype, block=req.tile, store=store, tol=req.tol,
               max_passes=req.max_passes if req.max_passes_given else None,
               temporary=req.store is None or req.temporary is not None, fraction=req.fraction is not None,
               stored_dtype=stored, precision=precision)
    solver, gram = Solver.parse(c.solver), GramMode(c.gram)
    # a fraction's first round: all n for the dense solver (one eigh), else the request's working k
    k = working_k(req.n, solver) if req.fraction is not None else req.n_components
    start = start_policy(solver, req.n, k) if solver.spec.takes_start and gram is not GramMode.MEMORY else None
    precision = c.precision
    reasons = {"solver": update_why.get("solver", c.reasons[0]), "gram": update_why.get("gram", c.reasons[1]),
               "dtype": precision.reason,
               "start": _start_reason(start, growth), "exp": c.details.get("exp", "")}
    return FitPlan(solver=solver, gram=gram, tile=req.tile, width=subspace_width(solver, req.n, k),
                   precision=precision, start=start, compiled_exp=c.compiled_exp, n=req.n, k=k, fraction=req.fraction,
                   reasons=reasons, details=c.details)


def _start_reason(start: StartPolicy | None, growth: Growth | None) -> str:
    """Why the solver starts where it does: an update's old model first (when it has one), else the policy's block."""
    if start is None:
        return "no start block"
    if growth is not None and growth.model_rows == growth.n_old:
        return ("an update: the old fit's Ritz vectors or eigenvectors extended to the new rows (the report's "
                f"update.warm_start says which); any further columns: {start.reason}")
    return start.reason


def instead_of_arpack(plan: FitPlan, requested: str, why: str) -> FitPlan | None:
    """The plan block Lanczos runs where ARPACK, which ``solver="auto"`` chose, did not converge (``why``: its
    error); None where ARPACK was asked for by name (its error stands, as scikit-learn's does).

    ARPACK's tolerance is relative to each Ritz value (and at least ``eps**(2/3)``), so wanted eigenvalues that are
    numerically zero -- K~ of a lower rank than k, in rounding -- never meet it (measured: a sigmoid kernel on
    338 points, 7 of 9 converged in 3,381 iterations); block Lanczos's is relative to the largest, and the
    spectrum policy then drops such eigenvalues as zero.
    """
    if requested != "auto" or plan.solver is not Solver.ARPACK:
        return None
    reason = (f"{plan.reasons.get('solver', '')}; but ARPACK did not converge ({why}; its tolerance is relative to "
              "each eigenvalue, which near-zero ones never meet): block Lanczos, whose tolerance is relative to the "
              "largest")
    return replace(plan, solver=Solver.LANCZOS, width=subspace_width(Solver.LANCZOS, plan.n, plan.k),
                   reasons={**plan.reasons, "solver": reason})
