"""Transform outputs: the Zarr arrays ``dkpca transform`` writes -- marked as dkpca's, resumable, never foreign.

An output is one Zarr array (``zarr.open_array(OUTPUT)[:]`` reads the
projections) whose attribute ``dkpca_transform`` records what made it::

    {"format_version": 1, "store": "/abs/store", "model": "<digest of the model's content>",
     "input": {"path": "/abs/input", "fingerprint": {"shape": [...], "dtype": "...", "checksum": "..."}},
     "complete": false, "dkpca_version": "..."}

* The record is written with the array's metadata, before any chunk, with ``complete: false``; it turns
  true only once every chunk is there (one rewrite of ``zarr.json``, which zarr replaces atomically).
  Unwritten rows read as NaN (the fill value), never as plausible zeros, for a reader that ignores the mark;
  dkpca's readers refuse an incomplete output (:func:`check_readable`), ``dkpca info`` and ``verify`` say so.
* The same command resumes an incomplete output: zarr writes a chunk whole (a temporary file renamed into
  place, or one object), so a chunk that is there was written completely; each is read back through its
  CRC-32C and only the missing or damaged ones are computed -- if the output was made by the same model (its
  content, :func:`model_digest`, not its path) from the same input (the fingerprint :func:`dkpca.io.scan`
  computes), with the same shape and chunks.  Any other output is refused unless ``overwrite``.
* One transform writes an output at a time: :func:`open_output` holds the output's writer lock (the store's
  lease, :mod:`dkpca.storage.lock`, as ``<output>/.dkpca.lock``, removed when it ends) and every chunk write
  checks it, so a second transform -- resuming, or replacing with ``overwrite`` -- is refused while the first
  runs, and a straggler of one killed writes nothing into its successor's output.  Where the lock cannot be
  made race-free (an fsspec protocol other than S3's) an output replaced while a transform wrote it is still
  not marked complete by that transform.
* Each chunk's digest, returned by the task writing it, is recorded with ``complete``: verify, a rerun and
  a reader refuse an intact chunk that is not the one written there (an incomplete output: CRC only).
* ``overwrite`` replaces only an output this module wrote, and removes only the files it wrote there
  (``zarr.json``, the chunk files of its grid and zarr's temporaries of those).  A path holding anything else
  -- a dkpca store, a user's Zarr group or array, a directory of files, an output into which the user put a
  file -- is refused: dkpca never deletes what it did not write.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

from ..execution import compute
from ..version import __version__
from .integrity import (
    DIGEST,
    CorruptChunkError,
    VerifiedArray,
    checksum_codecs,
    chunk_region,
    content_digest,
    decode_digests,
    encode_digests,
    padded_digest,
    present_chunks,
    read_verified,
    writable,
    write_config,
)
from .lock import Fenced, Lease, exclusive
from .lockfiles import UnlockableStoreError, lock_files
from .outputstate import (
    KEY,
    OUTPUT_FORMAT_VERSION,
    HeadlessOutputError,
    NotAnOutputError,
    OutputState,
    chunk_grid,
    output_state,
)
from .paths import exists, is_url, url_fs
from .verify import Finding

__all__ = ["KEY", "OUTPUT_FORMAT_VERSION", "NotAnOutputError", "OutputState", "TransformOutput", "model_digest",
           "output_state", "prepare_output", "open_output", "is_output", "check_readable", "readable", "output_facts",
           "describe", "verify_output"]

_RERUN = "rerun the same 'dkpca transform' command to finish it (the chunks already written are kept)"


def model_digest(arrays: Sequence[np.ndarray], facts: dict[str, Any]) -> str:
    """A digest of what a projection depends on: the model's arrays (dtype, shape, bytes) and JSON ``facts``.

    Content, not a name: a refit that switches the store to another model
    changes it; the same model read from a moved store does not.
    """
    return content_digest(arrays, json.dumps(facts, sort_keys=True, default=str).encode())


def _differs(state: OutputState, record: dict[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...]) -> str:
    """How the output ``state`` differs from the one ``record`` describes ('' if it is the same)."""
    if state.record.get("model") != record["model"]:
        return f"another model (of store {state.record.get('store')!r})"
    if (state.record.get("input") or {}).get("fingerprint") != record["input"]["fingerprint"]:
        was = (state.record.get("input") or {}).get("path")
        return f"other input data ({'other contents of' if was == record['input'].get('path') else 'from'} {was!r})"
    if state.shape != tuple(shape) or state.chunks != tuple(chunks):
        return f"another shape or chunking ({state.shape}, chunks {state.chunks})"
    return ""


def _recorded(record: dict[str, Any], total: int) -> tuple[int, ...] | None:
    """The chunk digests a complete output's record holds (None: none, or not usable -- CRC checks only)."""
    try:
        digests = decode_digests(record.get("digests"))
    except ValueError:
        return None
    return digests if record.get("complete") and record.get("digest") == DIGEST and len(digests) == total else None


def _unsealed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` marked incomplete: its chunk digests go with ``complete`` (rewritten chunks change them)."""
    return {**{k: v for k, v in record.items() if k not in ("digest", "digests")}, "complete": False}


def _write_chunk(block: np.ndarray, target: Any, row: int, chunks: tuple[int, ...]) -> int:
    """Write one output chunk's rows from ``row`` on into ``target`` (the array, or it fenced by the writer's
    lease); its digest as stored in ``chunks`` (recorded with ``complete``)."""
    target[row:row + block.shape[0], :] = block
    return padded_digest(np.ascontiguousarray(block), chunks)


@dataclass
class TransformOutput:
    """An output ready to be written: its array, record, the chunks still to write and the kept ones' digests."""

    path: str
    array: zarr.Array
    record: dict[str, Any]
    todo: list[tuple[int, ...]]
    total: int
    kept_digests: dict[tuple[int, ...], int]
    lease: Lease | None = None

    @property
    def kept(self) -> int:
        """Chunks an earlier, interrupted run of the same command wrote (verified and kept)."""
        return self.total - len(self.todo)

    def write(self, Z: da.Array, progress: bool = False) -> None:
        """Write the chunks still to write from ``Z``, then mark the output complete (never with a hole)."""
        digests = dict(self.kept_digests)
        if self.todo:
            edge = self.array.chunks[0]
            Z = Z.rechunk((edge, Z.shape[1]))  # a no-op where the rows are already the output's chunks
            # fenced: a straggler of a transform that lost the output writes nothing into another's
            target = self.array if self.lease is None else Fenced(self.array, self.lease)
            writes = [dask.delayed(_write_chunk, pure=False)(Z.blocks[i, j], target, i * edge, self.array.chunks)
                      for i, j in self.todo]
            digests.update(zip(self.todo, compute(*writes, label="projecting", progress=progress), strict=True))
        state = output_state(self.path)
        if state is None or (why := _differs(state, self.record, state.shape, self.array.chunks)):  # --overwrite
            raise FileExistsError(f"output {self.path!r} was replaced while this transform wrote it: it holds the "
                                  f"projections of {why or 'nothing'}; rerun with --overwrite to replace it again, or "
                                  "write to another path.")
        if missing := state.missing():  # a write that vanished without an error: never mark a hole complete
            raise CorruptChunkError(self.path, "projections", missing[0], "missing after the transform wrote it; "
                                    "rerun")
        grid = np.ndindex(*chunk_grid(state.shape, state.chunks))
        self.array.update_attributes({KEY: {**self.record, "complete": True, "digest": DIGEST,
                                            "digests": encode_digests([digests[c] for c in grid])}})


def _chunk_digest(arr: zarr.Array, coords: tuple[int, ...], recorded: tuple[int, ...] | None) -> int | None:
    """The digest of chunk ``coords`` of ``arr`` as read through its checksum; None where it fails that, or
    differs from the one ``recorded`` for it (another chunk's file copied over it)."""
    try:
        got = padded_digest(read_verified(arr, chunk_region(arr, coords)), arr.chunks)
    except Exception:
        return None
    if recorded is not None and got != recorded[int(np.ravel_multi_index(coords, arr.cdata_shape))]:
        return None
    return got


def _remove(state: OutputState) -> None:
    """Remove the output ``state`` found, file by file: only what this module wrote (no foreign file is there).

    Marked incomplete first, ``zarr.json`` last: a removal killed half-way
    leaves an output that is still recognisably ours and says it is incomplete.
    """
    if state.record.get("complete"):
        zarr.open_array(state.path, mode="r+").update_attributes({KEY: {**state.record, "complete": False}})
    fs, where = url_fs(state.path)
    where = where.rstrip("/")
    chunks = [f"{where}/c/{i}/{j}" for i, j in sorted(state.present)] + [f"{where}/{f}" for f in state.debris]
    if chunks:
        fs.rm(chunks)
    fs.rm(f"{where}/zarr.json")
    if not is_url(state.path):  # the chunk directories zarr made, if empty (nothing else is removed)
        for i, _ in sorted(state.present, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(where, "c", str(i)))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(where, "c"))


@contextlib.contextmanager
def _writer_lock(path: str) -> Iterator[Lease | None]:
    """The output's writer lock (:func:`~.lock.exclusive`), held while a transform prepares and writes it.

    Two transforms into one output would each replace or resume what the
    other writes.  Where no race-free create exists (an fsspec protocol
    other than S3's) the output is written unlocked, as before locks:
    :meth:`TransformOutput.write` still refuses to mark an output another
    transform replaced meanwhile.
    """
    try:
        lock_files(path)
    except UnlockableStoreError:
        yield None
        return
    with exclusive(path, what="output", by="transform") as lease:
        yield lease


@contextlib.contextmanager
def open_output(path: str, shown: str, origin: dict[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...],
                overwrite: bool) -> Iterator[TransformOutput]:
    """:func:`prepare_output` under the output's writer lock, held until the block ends (write inside it).

    Raises
    ------
    StoreLockedError
        Another transform is writing this output.
    """
    new = not exists(path)
    try:
        with _writer_lock(path) as lease:
            yield prepare_output(path, shown, origin, shape, chunks, overwrite, lease)
    finally:
        if new and not is_url(path):  # the lock made the directory: removed if refused before any write
            with contextlib.suppress(OSError):
                os.rmdir(path)


def prepare_output(path: str, shown: str, origin: dict[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...],
                   overwrite: bool, lease: Lease | None = None) -> TransformOutput:
    """The output at ``path`` ready for projections of ``shape``: new, resumed, or replaced.

    ``origin``: ``{"store", "model", "input": {"path", "fingerprint"}}``.  The same
    origin, shape and chunks resume (``overwrite`` then rewrites a complete
    output whole); another output of dkpca is replaced only with ``overwrite``.
    ``lease``: the output's writer lock as :func:`open_output` holds it, which
    every chunk write checks (None: written unlocked).

    Raises
    ------
    NotAnOutputError
        ``path`` holds something dkpca did not write (or an output with files of the user's in it).
    FileExistsError
        ``path`` holds another transform output and ``overwrite`` is False.
    """
    state = output_state(path, shown)
    record = {"format_version": OUTPUT_FORMAT_VERSION, **origin, "complete": False, "dkpca_version": __version__}
    if state is not None:
        why = _differs(state, record, shape, chunks)
        if not why:
            arr = writable(zarr.open_array(path, mode="r+"))
            kept: dict[tuple[int, ...], int] = {}
            if overwrite and state.complete:  # asked to replace a complete output: every chunk again
                todo = list(np.ndindex(*chunk_grid(state.shape, state.chunks)))
            else:  # resume: the missing chunks, and any that fails its checksum or recorded digest
                recorded = _recorded(state.record, state.total)
                found = {c: _chunk_digest(arr, c, recorded) for c in state.present}
                kept = {c: v for c, v in found.items() if v is not None}
                todo = sorted(state.missing() + [c for c, v in found.items() if v is None])
            if todo and state.record.get("complete"):  # marked incomplete before any chunk is rewritten
                arr.update_attributes({KEY: _unsealed(state.record)})
            return TransformOutput(path, arr, _unsealed(state.record), todo, state.total, kept, lease)
        if not overwrite:
            raise FileExistsError(f"output {shown!r} holds the projections of {why}; choose another path, or pass "
                                  "--overwrite (overwrite=True) to replace it.")
        if state.foreign:
            names = ", ".join(state.foreign[:3]) + (", ..." if len(state.foreign) > 3 else "")
            raise NotAnOutputError(
                f"output {shown!r} is a dkpca transform output but also holds files dkpca did not write ({names}); "
                "--overwrite never removes those: move them away yourself, or choose another output path.")
        _remove(state)
    arr = zarr.create_array(store=path, shape=shape, chunks=chunks, dtype="float64", fill_value=np.nan,
                            compressors=checksum_codecs(), attributes={KEY: record}, config=write_config())
    todo = list(np.ndindex(*chunk_grid(shape, chunks)))
    return TransformOutput(path, arr, record, todo, len(todo), {}, lease)


def is_output(node: Any) -> bool:
    """Whether a Zarr node is a dkpca transform output."""
    return isinstance(node, zarr.Array) and isinstance(node.attrs.get(KEY), dict)


def check_readable(node: Any, shown: str) -> None:
    """Refuse to read an incomplete transform output (``ValueError``); anything else passes."""
    if is_output(node) and not node.attrs[KEY].get("complete"):
        raise ValueError(f"input {shown!r} is an incomplete dkpca transform output ({len(present_chunks(node))} of "
                         f"{node.nchunks} chunks written: the transform was interrupted); {_RERUN}.")


def readable(node: Any, shown: str) -> Any:
    """``node`` to read as input data: an incomplete output refused (:func:`check_readable`), a complete one read
    through its recorded chunk digests (:class:`~.integrity.VerifiedArray`); anything else as it is."""
    check_readable(node, shown)
    digests = _recorded(node.attrs[KEY], node.nchunks) if is_output(node) else None
    return node if digests is None else VerifiedArray(node, digests)


def _found(path: str) -> OutputState | None:
    """The transform output at ``path``, or None if there is none (nothing, or something else); one whose record
    is lost is said as that (:class:`HeadlessOutputError`), not as a path that is no store."""
    try:
        return output_state(path)
    except HeadlessOutputError:
        raise
    except NotAnOutputError:
        return None


def output_facts(path: str) -> dict[str, Any] | None:
    """What ``dkpca info`` says of a transform output (JSON-safe); None if ``path`` is not one."""
    state = _found(path)
    if state is None:
        return None
    return {"transform_output": path, "shape": list(state.shape), "chunks": list(state.chunks),
            "chunks_written": len(state.present), "complete": state.complete,
            **{k: v for k, v in state.record.items() if k != "complete"}}


def describe(facts: dict[str, Any]) -> str:
    """:func:`output_facts` as ``dkpca info`` prints them."""
    inp = facts.get("input") or {}
    total = int(np.prod(chunk_grid(tuple(facts["shape"]), tuple(facts["chunks"]))))
    state = "complete" if facts["complete"] else (
        f"incomplete: {facts['chunks_written']} of {total} chunks written (the transform was interrupted); {_RERUN}")
    return "\n".join([
        f"dkpca transform output: {facts['shape'][0]} x {facts['shape'][1]} projections ({total} chunks of "
        f"{facts['chunks'][0]} rows)",
        f"  model:  {facts.get('model')} of store {facts.get('store')}",
        f"  input:  {inp.get('path')} (checksum {(inp.get('fingerprint') or {}).get('checksum')})",
        f"  state:  {state}"])


def verify_output(path: str) -> Finding | None:
    """``dkpca verify`` of a transform output: every chunk there and through its checksum; None if not one."""
    state = _found(path)
    if state is None:
        return None
    arr = zarr.open_array(path, mode="r")
    recorded = _recorded(state.record, state.total)
    bad = [c for c in sorted(state.present) if _chunk_digest(arr, c, recorded) is None]
    if bad:
        return Finding("output", False, f"output: {len(bad)} of {state.total} chunks corrupt or not the ones written "
                                        f"there (first: {bad[0]}); rerun the same 'dkpca transform' command to write "
                                        "them again")
    if not state.complete:
        return Finding("output", False, f"output: incomplete: {len(state.present)} of {state.total} chunks written "
                                        f"and verified (the transform was interrupted); {_RERUN}")
    return Finding("output", True, f"output: {state.shape[0]} x {state.shape[1]} projections, all {state.total} "
                                   "chunks verified")
