"""What ``KernelPCA.partial_fit(store=)`` checks of a batch against the store before adding it.

A store outlives the process that grows it: a job run each night adds its night's rows through a new
estimator, which continues the store's fit.  Two reruns would then fit rows twice without a word -- a
job requeued after its ``partial_fit`` finished (the batch is already the store's last rows) and a
script rerun from its first batch (the batch is the store's first rows) -- and a batch killed part way
leaves the store's data ahead of its model.  Each is judged here, on the rows themselves.
"""

from __future__ import annotations

import enum
from typing import Any

import dask.array as da

from .storage import FitStore

__all__ = ["Held", "RepeatedBatchWarning", "held_rows", "refuse_batch_over_a_killed_one", "refuse_a_store_grown_since"]


class RepeatedBatchWarning(UserWarning):
    """A new estimator's first batch is already the last rows of the store's fit: it was not added again."""


class Held(enum.Enum):
    """Where a batch's rows already are among the rows a store's fit holds."""

    NOWHERE = "nowhere"
    LAST = "last"  # a rerun of the call that added them
    FIRST = "first"  # a rerun from the first batch


def _equal(a: da.Array, b: da.Array) -> bool:
    # the first rows decide almost always (other data): the whole comparison runs only when they agree
    return bool((a[:1] == b[:1]).all().compute()) and bool((a == b).all().compute())


def held_rows(seen: da.Array, batch: da.Array) -> Held:
    """Whether ``batch`` (of ``seen``'s dtype and width) equals ``seen``'s last rows or its first ones."""
    n, m = seen.shape[0], batch.shape[0]
    if m > n:
        return Held.NOWHERE
    if _equal(seen[n - m:], batch):
        return Held.LAST
    if _equal(seen[:m], batch):
        return Held.FIRST
    return Held.NOWHERE


def refuse_batch_over_a_killed_one(grown: Any, path: str) -> None:
    """A batch killed while it was being added leaves the store's data ahead of its model; ``dkpca.fit``'s
    refusal of ``grown`` (the rows seen and another batch) then advised ``overwrite=True``, which here would
    refit this batch alone.  Another batch: of other rows, or as many whose digests differ from the copy's."""
    store = FitStore.at(path)
    try:
        ext, fitted = store.data_extent(), store.model_rows()
    except (OSError, ValueError, KeyError):  # the fit judges a store it cannot read, naming why
        return
    pending = ext.growing["to"] if ext.growing is not None else ext.rows
    if fitted is None or fitted >= pending:
        return
    if pending != grown.shape[0] or (ext.growing is None and store.changed_chunk(grown, pending) is not None):
        raise ValueError(
            f"store {path!r} holds the fit of {fitted} rows and a batch being added to it (rows {fitted} "
            f"to {pending - 1}) that was killed before it finished: call partial_fit again with that batch to "
            f"finish it, then with this one (overwrite=True would start afresh on this batch alone, dropping "
            f"the {fitted} rows fitted).")


def refuse_a_store_grown_since(path: str, seen: int) -> None:
    """An estimator of ``seen`` rows (an older pickle, another process's) whose store another estimator has grown
    since: the fit's refusal ("fitted on different data ... Pass overwrite=True") named a fix that a later call
    does not take (only a first call overwrites)."""
    held = FitStore.at(path).model_rows()
    if held is not None and held > seen:
        raise ValueError(f"store {path!r} holds a fit of {held} rows, grown since this estimator fitted its {seen}: "
                         "continue it with a new estimator, KernelPCA(store=...).partial_fit(batch), or call fit "
                         "to start afresh.")
