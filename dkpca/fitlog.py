"""What a fit says through Python's logging: its plan in one line, then its stages (logger ``dkpca.fitlog``, INFO).

dkpca is a library: its ``dkpca`` logger has only a ``NullHandler``, so
nothing is printed unless the application asks (``logging.basicConfig(
level=logging.INFO)`` in a batch job; the ``dkpca`` command shows INFO on
stderr unless ``--quiet``).  The one plan line says only what the fit will
do -- the decisions of its :class:`~dkpca.planning.FitPlan`, the same
``dkpca.plan`` prints -- never an estimate: a fit does not measure what it
is about to run, and ``dkpca plan`` (passes, time) and ``model.report``
(every reason) say the rest.  Each solver pass is logged by
:func:`dkpca.eigensolve.log_pass`.
"""

from __future__ import annotations

import logging
from typing import Any

from .grammode import GramMode

__all__ = ["plan_line", "log_plan", "log_stage", "log_gram", "log_solved", "log_done"]

logger = logging.getLogger(__name__)


def _where_k(gram: GramMode | None, dtype: Any, tile: int, store: str | None) -> str:
    """Where K lives, as ``dkpca plan``'s ``Gram matrix:`` and ``chunk shape:`` lines say it (None: nowhere)."""
    if gram is None:
        return f"K not formed (n x m kernel slices only, {dtype})"
    if gram is GramMode.MEMORY:
        return f"K held in memory ({dtype})"
    blocks = f"{tile} x {tile} blocks"
    if gram is GramMode.STORE:
        return f"K stored in {store} ({dtype}, {blocks})"
    return f"K recomputed every pass ({dtype}, {blocks})"


def plan_line(n: int, d: int, k: int, kernel: str, solver: Any, gram: GramMode | None, dtype: Any, tile: int,
              store: str | None, fraction: float | None = None) -> str:
    """The plan of a fit in one line: sizes, solver, where K lives (the reasons and estimates: ``dkpca plan``)."""
    wanted = f"k={k}" if fraction is None else f"n_components={fraction} (first round k={k})"
    where = _where_k(gram, dtype, tile, store)
    return f"plan: n={n}, d={d}, {wanted}, kernel {kernel}: {solver}, {where}; why: dkpca plan"


def log_plan(req: Any, plan: Any) -> None:
    """The one plan line of a fit of request ``req`` under ``plan`` (a FitPlan) at INFO; the reasons at DEBUG."""
    if logger.isEnabledFor(logging.INFO):
        n, d = req.X.shape
        logger.info("%s", plan_line(n, d, plan.k, req.kernel.name, plan.solver,
                                    plan.formed_gram, plan.dtype, plan.tile, req.store.path, req.fraction))
    for decision, reason in plan.reasons.items():  # DEBUG (the CLI's -v): each reason, as the report keeps it
        logger.debug("why %s: %s", decision, reason)


def log_stage(what: str, seconds: float) -> None:
    """A stage of the fit done: ``what`` (a sentence) and how long it took."""
    logger.info("%s (%.2fs)", what, seconds)


def log_gram(gram_report: dict[str, Any], seconds: float) -> None:
    """K built (or found in the store), from the fit's Gram report."""
    if "computed_blocks" in gram_report:
        log_stage(f"Gram matrix: {gram_report['computed_blocks']} block(s) computed, "
                  f"{gram_report['reused_blocks']} reused from the store", seconds)
    elif "build_seconds" in gram_report:
        log_stage("Gram matrix: evaluated into memory", seconds)


def log_solved(solver: Any, passes: int, converged: bool, k: int, seconds: float) -> None:
    """The solver's outcome: passes, convergence, components kept."""
    log_stage(f"solved: {solver}, {passes} pass(es), {'converged' if converged else 'NOT converged'}, "
              f"{k} component(s)", seconds)


def log_done(store: str, saved: bool, seconds: float) -> None:
    """The fit is over: where its model is."""
    log_stage(f"fit done: model saved in {store}" if saved else
              "fit done: model in memory (its temporary store goes with it; model.save() keeps it)", seconds)
