"""What ``dkpca.plan`` says of a fit on grown data: that it would update the store's fit, and its cost.

The same question :func:`dkpca.fit` asks (:func:`~dkpca.storage.growth.find_growth`,
attributes only): an update keeps the stored tile, so the plan is made for it.
"""

from __future__ import annotations

from dataclasses import replace

from ..request import FitRequest
from ..storage.growth import Growth, find_growth, stored_tile, update_blocks

__all__ = ["growth_request", "plan_update"]


def growth_request(req: FitRequest, chunk_size: int | None, dtype: str | None) -> tuple[FitRequest, Growth | None]:
    """Whether a fit of ``req`` updates the store's (:func:`~dkpca.storage.growth.find_growth`), and ``req`` at the
    tile it keeps: an update's stored tile, or a refit's without ``chunk_size`` (the fingerprint is per row chunk).

    ``dkpca.fit`` (:func:`dkpca.growth.find_update`) and ``dkpca.plan`` ask it alike; ``dtype`` None: ``auto``.
    """
    growth = find_growth(req.store, req.n, req.d, str(req.X.dtype), req.kernel.to_dict(), dtype, chunk_size)
    edge = growth.block if growth is not None else (
        stored_tile(req.store, req.n, req.d) if chunk_size is None else None)
    if edge is not None and edge != req.tile:
        req = replace(req, X=req.X.rechunk((edge, req.d)), tile=edge)
    return req, growth


def plan_update(req: FitRequest, chunk_size: int | None, dtype: str) -> tuple[FitRequest, str]:
    """``req`` at the stored tile and the plan's sentence when a fit would update the store's; else ``(req, "")``.

    Raises ``ValueError`` where the fit would refuse the update (another kernel, dtype or tile: named).
    """
    if req.overwrite or req.store is None:
        return req, ""
    req, growth = growth_request(req, chunk_size, None if dtype == "auto" else dtype)
    if growth is None:
        return req, ""
    reused, computed, entries = update_blocks(growth.n_old, growth.n_new, growth.block)
    total = growth.n_new * (growth.n_new + growth.block) // 2  # about a fresh fit's stored entries
    note = (f"would update the store's fit of {growth.n_old} rows to {growth.n_new} (if the input's first "
            f"{growth.n_old} rows are the stored ones, checked by digest): "
            + (f"{computed} Gram blocks computed ({entries:,} kernel entries, about {entries / total:.0%} of a fresh "
               f"fit's), {reused} reused; " if growth.gram else "")
            + ("the solver starts from the old eigenvectors extended to the new rows"
               if growth.model_rows == growth.n_old else "no model of the old rows to start the solver from"))
    return req, note
