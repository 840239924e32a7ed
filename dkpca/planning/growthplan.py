"""What ``dkpca.plan`` says of a fit on grown data: that it would update the store's fit, and its cost.

The same question :func:`dkpca.fit` asks (:func:`~dkpca.storage.growth.find_growth`,
attributes only): an update keeps the stored tile, so the plan is made for it.
"""

from __future__ import annotations

from dataclasses import replace

from ..machine import memory_available
from ..request import FitRequest
from ..solvers import spec_of
from ..storage.gramstore import GramStore
from ..storage.growth import Growth, find_growth, stored_entries, stored_tile, update_blocks
from .auto import solver_rule
from .precision import Precision, choose_precision

__all__ = ["growth_request", "plan_update", "update_modes"]


def growth_request(req: FitRequest, chunk_size: int | None, dtype: str | None,
                   measure: bool = True) -> tuple[FitRequest, Growth | None, Precision | None]:
    """Whether a fit of ``req`` updates the store's (:func:`~dkpca.storage.growth.find_growth`), and ``req`` at the
    tile it keeps: an update's stored tile, or a refit's without ``chunk_size`` (the fingerprint is per row chunk).

    ``dkpca.fit`` (:func:`dkpca.growth.find_update`) and ``dkpca.plan`` ask it alike; ``dtype`` None: ``auto``.
    The third value: the precision ``auto`` chose for an update of a float32 K (:func:`_update_precision`; None
    where none was measured), which the fit's decision takes rather than measuring it again.  ``measure=False``
    (a plan of sizes only) reads nothing of X: the update is then planned in the store's precision.
    """
    growth = find_growth(req.store, req.n, req.d, str(req.X.dtype), req.kernel.to_dict(), dtype, chunk_size)
    edge = growth.block if growth is not None else (
        stored_tile(req.store, req.n, req.d) if chunk_size is None else None)
    if edge is not None and edge != req.tile:
        req = replace(req, X=req.X.rechunk((edge, req.d)), tile=edge)
    precision = None
    if measure and growth is not None and (growth.gram or growth.retiled is not None) and dtype is None:
        precision = _update_precision(req)  # X in the fit's chunks: the sample its own decision takes
    if precision is not None and precision.dtype == "float64":
        growth = replace(growth, gram_rows=None, retyped="float32")  # K built anew in float64, as a fresh fit's
    return req, growth, precision


def _update_precision(req: FitRequest) -> Precision | None:
    """Where the store's K is float32, the precision ``dtype="auto"`` holds the grown data's K in (measured on a
    sample of the grown rows); None for another store's K.  float64 where float32 puts more than tol into its
    eigenvalues: the old fit's sample said otherwise (another, smaller sample, or a looser tol), and an update
    keeping float32 would answer less accurately than a fresh fit, so it builds K anew, still starting from the
    old model."""
    if GramStore(req.store).recorded_dtype() != "float32":
        return None
    # no store's K named: a refit's reuse of its float32 K under a tighter tol is no fresh fit's answer
    return choose_precision("auto", req.X, req.kernel, int(req.n_components), tol=req.tol)


def update_modes(req: FitRequest, growth: Growth | None) -> tuple[str, str, dict[str, str]]:
    """The solver and Gram mode to ask :func:`~dkpca.planning.auto.choose` for, and the reasons of those an update
    decides itself (keys ``solver``, ``gram``): ``req``'s own where it is no update or names them.

    An update is not a fresh fit, which ``auto`` weighs.  Where the store holds K, storing it computes only
    the blocks that touch new rows, where recomputing would evaluate all of K every pass.  Where the old
    model starts the solver, block Lanczos keeps that start in its Krylov space: measured at 40,000 -> 44,000
    rows (2-core machine, 2026-11-27), subspace iteration, which ``auto`` weighed faster for a fresh fit,
    took 4 passes from the start (residuals 3.4e-3, 7.2e-5, 3.1e-6, 1.4e-7; its solve 6.8 s).
    """
    solver, gram, why = req.solver, req.gram, {}
    if growth is None or req.fraction is not None:
        return solver, gram, why
    spec = spec_of(solver)  # None: auto
    if growth.gram and gram == "auto" and not (spec is not None and spec.in_memory_only):
        # (an in-memory solver, ARPACK, is never run over the stored K: each of its steps would be a pass over it)
        gram, why["gram"] = "store", (f"an update of the store's K ({growth.gram_rows} rows): only the blocks that "
                                      "touch its new rows are computed")
    if growth.model_rows == growth.n_old and solver == "auto":
        rule, _ = solver_rule(req.n, req.n_components, "auto", memory=False,
                              memory_bytes=memory_available(), fraction=False)
        if rule == "lanczos":
            solver, why["solver"] = "lanczos", ("an update: block Lanczos keeps the start from the old fit's "
                                                "eigenvectors in its Krylov space (fewer passes than subspace "
                                                "iteration from it)")
    return solver, gram, why


def plan_update(req: FitRequest, chunk_size: int | None, dtype: str,
                measure: bool = True) -> tuple[FitRequest, str, Growth | None, Precision | None]:
    """``req`` at the stored tile, the plan's sentence, the growth and the precision measured for it
    (:func:`growth_request`) when a fit would update the store's; else ``(req, "", None, None)``.

    Raises ``ValueError`` where the fit would refuse the update (another kernel, dtype or tile: named).
    """
    if req.overwrite or req.store is None:
        return req, "", None, None
    req, growth, precision = growth_request(req, chunk_size, None if dtype == "auto" else dtype, measure)
    if growth is None:
        return req, "", None, None
    reused, computed, entries = growth.gram_blocks()
    total = stored_entries(growth.n_new, growth.block)  # a fresh fit's
    note = (f"would update the store's fit of {growth.n_old} rows to {growth.n_new} (if the input's first "
            f"{growth.n_old} rows are the stored ones, checked by digest): "
            + (f"{computed} Gram blocks computed ({entries:,} kernel entries, about {entries / total:.0%} of a fresh "
               f"fit's), {reused} reused; " if growth.gram else "")
            + (f"K built anew in tiles of {growth.block} ({computed} blocks; in the store's tiles of "
               f"{growth.retiled} it would be {update_blocks(0, growth.n_new, growth.retiled)[1]:,}); "
               if growth.retiled is not None else "")
            + (f"K built anew in float64 ({computed} blocks: float32, the store's, puts more than tol into the "
               "grown data's eigenvalues); " if growth.retyped is not None else "")
            + ("the solver starts from the old eigenvectors extended to the new rows"
               if growth.model_rows == growth.n_old else "no model of the old rows to start the solver from"))
    return req, note, growth, precision
