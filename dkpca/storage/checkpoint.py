"""Solver checkpoints in the store, so a killed fit resumes its eigensolver.

An iterative solver's state after each pass is small next to K (a few n x l
arrays and a pass count), so it is written to ``<store>/solver/`` after every
pass and read back when the same fit is rerun::

    solver/            attrs: key, slot, passes, history, checksums, saved
      s0/<name>        arrays of one generation (e.g. ``Q``, n x l float64)
      s1/<name>        the other generation

Two slots alternate: a pass writes the slot that the attributes do *not*
point to, then rewrites the group attributes (one JSON document, replaced
atomically by zarr's LocalStore) to point at it.  A writer killed half-way
leaves either the old pointer (the old slot is intact) or the new one (the
new slot is complete); on top of that every array's checksum is recorded in
the attributes and verified on load, so a torn or foreign state is never
trusted -- it is ignored and the solver starts afresh.

The state is keyed to everything it depends on (fingerprint of X, kernel,
Gram dtype and chunking, k, solver settings): a checkpoint of another fit is
ignored, never used.  :meth:`SolverCheckpoint.clear` removes it once the model
is saved.  Arrays are Zarr, metadata JSON: nothing is pickled.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr

from ..config import seconds_setting
from ..jsonsafe import json_safe
from .chunks import ChunkWriter
from .fitstore import FitStore, remove_member
from .integrity import content_digest, create_array

__all__ = ["SolverCheckpoint", "CheckpointState", "SLOTS", "GROUP", "seal"]

logger = logging.getLogger("dkpca")

GROUP = "solver"
SLOTS = ("s0", "s1")


#: what the seal covers: everything a resumed solver takes from the attributes
_SEALED = ("key", "slot", "passes", "history", "checksums")


def seal(attrs: dict[str, Any]) -> str:
    """A digest of the attributes a resumed solver uses: the arrays' checksums do not cover the pass count."""
    return content_digest([], json.dumps({k: attrs.get(k) for k in _SEALED}, sort_keys=True).encode())


@dataclass
class CheckpointState:
    """A solver state read back from the store.

    Attributes
    ----------
    passes : int
        Passes over K completed when the state was saved.
    history : list of float
        The solver's per-pass convergence history up to then.
    arrays : dict of str to ndarray
        The solver's arrays (randomized: ``Q``, the next basis, n x l).
    """

    passes: int
    history: list[float] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class SolverCheckpoint:
    """Save/restore an iterative solver's state in ``<store>/solver``.

    Parameters
    ----------
    path : str
        Store root (a dkpca store).
    key : dict
        JSON-serialisable identity of the problem (fingerprint, kernel, k,
        solver settings).  Only a state saved under an equal key is loaded.
    chunk_rows : int, optional
        Row chunking of saved arrays (default: whole arrays up to 2**20 rows).
    interval : float, optional
        Seconds of solver work a kill may lose: :meth:`save` writes only when
        at least this long has passed since the last save (or since
        :meth:`load`).  Default: Dask config ``dkpca.checkpoint-interval``
        (environment ``DASK_DKPCA__CHECKPOINT_INTERVAL``; default 5 s, in ``dkpca/dkpca.yaml``).  A
        checkpoint costs ~70 ms at n = 20,000 -- 10 % of a pass there, nothing
        next to the minutes-long passes it protects at scale.  0 saves every
        pass.

    Notes
    -----
    Solvers call :meth:`load` once before their first pass and :meth:`save`
    after every pass; both run in the client process.
    """

    def __init__(self, store: FitStore | str | os.PathLike, key: dict[str, Any], chunk_rows: int | None = None,
                 interval: float | None = None) -> None:
        self.store = FitStore.at(store)
        self.path = self.store.path
        self.key = json_safe(key)
        self.chunk_rows = chunk_rows
        self.interval = float(seconds_setting("dkpca.checkpoint-interval", zero=True) if interval is None else interval)
        self.saves = 0
        self._last: float | None = None

    def _group(self) -> zarr.Group:
        """The checkpoint group to write, made where there is none (or one whose zarr.json cannot be read)."""
        root = self.store.open(mode="r+")
        try:
            if GROUP in root:
                return root[GROUP]
        except ValueError:  # its zarr.json cut short or garbled: a checkpoint of nothing, replaced
            remove_member(root, GROUP)
        return root.create_group(GROUP)

    def load(self) -> CheckpointState | None:
        """The saved state for this key, or None (absent, other key, or damaged)."""
        self._last = time.monotonic()
        try:
            root = self.store.open(mode="r")
        except (FileNotFoundError, ValueError):
            return None
        try:
            if GROUP not in root:
                return None
            g = root[GROUP]
            a = dict(g.attrs)
        except ValueError as exc:  # its zarr.json cut short or garbled
            logger.warning("solver checkpoint in %s is unreadable (%s/zarr.json: %s); starting afresh", self.path,
                           GROUP, exc)
            return None
        if a.get("key") != self.key:
            if a.get("key") is not None:
                logger.info("solver checkpoint in %s belongs to another fit; ignoring it", self.path)
            return None
        slot = a.get("slot")
        sums = a.get("checksums") or {}
        if slot not in SLOTS or slot not in g or not sums:
            return None
        if a.get("seal") != seal(a):  # the pass count and history the solver resumes with, as written
            logger.warning("solver checkpoint in %s fails its seal (its attributes were edited or damaged, or "
                           "written by an older dkpca); starting afresh", self.path)
            return None
        arrays = {}
        try:
            for name, digest in sums.items():
                arr = g[slot][name][:]
                if content_digest([arr]) != digest:
                    logger.warning("solver checkpoint array %s/%s fails its checksum; starting afresh", slot, name)
                    return None
                arrays[name] = arr
        except (KeyError, ValueError, OSError) as exc:
            logger.warning("solver checkpoint in %s is unreadable (%s); starting afresh", self.path, exc)
            return None
        return CheckpointState(passes=int(a["passes"]), history=[float(h) for h in a.get("history", [])],
                               arrays=arrays)

    def save(self, passes: int, history: list[float], **arrays: np.ndarray) -> bool:
        """Record the state after ``passes`` passes (arrays, then the pointer).

        Returns False, writing nothing, when less than ``interval`` seconds
        have passed since the last save.
        """
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return False
        g = self._group()
        current = g.attrs.get("slot") if g.attrs.get("key") == self.key else None
        slot = SLOTS[1] if current == SLOTS[0] else SLOTS[0]
        # The slot being written is the one nobody points to.  Its arrays are
        # reused when their shape is unchanged (each pass of a solver saves
        # the same shapes): no directory churn, and chunk files go straight
        # from memory through ChunkWriter (temporary file + rename).
        sg = g[slot] if slot in g else g.create_group(slot)
        sums = {}
        for name in set(sg.array_keys()) - set(arrays):
            remove_member(sg, name)
        for name, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            if arr.ndim:
                rows = max(1, min(self.chunk_rows or (1 << 20), arr.shape[0]))
                chunks = (rows, *arr.shape[1:])
            else:
                chunks = ()
            z = sg[name] if name in sg else None
            if z is None or z.shape != arr.shape or z.dtype != arr.dtype or tuple(z.chunks) != chunks:
                if z is not None:
                    remove_member(sg, name)
                z = create_array(sg, name, shape=arr.shape, dtype=arr.dtype, chunks=chunks)
            if arr.ndim:
                writer = ChunkWriter.of(self.path, z)
                for i, r0 in enumerate(range(0, arr.shape[0], chunks[0])):
                    writer.write((i,) + (0,) * (arr.ndim - 1), arr[r0:r0 + chunks[0]])
            else:
                z[...] = arr
            sums[name] = content_digest([arr])
        # The pointer goes last, in one atomic JSON write.
        state = json_safe({"key": self.key, "slot": slot, "passes": int(passes), "history": list(history),
                           "checksums": sums})
        g.attrs.put({**state, "seal": seal(state), "saved": datetime.datetime.now(datetime.UTC).isoformat()})
        self.saves += 1
        self._last = time.monotonic()
        return True

    def clear(self) -> None:
        """Remove the checkpoint (after the model is saved, or on overwrite)."""
        try:
            root = self.store.open(mode="r+")
        except (FileNotFoundError, ValueError):
            return
        remove_member(root, GROUP)  # whatever is there, also a group whose zarr.json is unreadable
