"""The data copy's row chunks written: each returning its digest, which the copy records; a damaged one written
again from the input, which the copy's fingerprint says it is.

A refit reads the whole copy it reuses (nothing reads ``data/X`` once K is
built, so damage is found there or never).  Where a chunk is missing,
truncated, corrupt or another chunk's, and the input's fingerprint is the
copy's, the input is the truth: each damaged chunk is written again from the
input's rows -- only after the rows' digest is found equal to the one recorded
when the chunk was first written, so nothing but the recorded values is ever
written -- and K and the model, built from those values, are kept.  A kill
part way leaves chunks either as they were or repaired; the rerun repairs the
rest.  A copy without recorded digests (written by an older dkpca) cannot be
checked so: its damage is refused as before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from zarr.core.sync import sync

from ..execution import compute, for_the_client
from .integrity import DIGEST, CorruptChunkError, VerifiedArray, create_array, decode_digests, padded_digest
from .lock import Fenced, Lease

__all__ = ["InputChangedError", "chunk_digest", "copy_block", "copy_edge", "damaged_chunks", "held_as",
           "remake_meta", "rewrite_chunks", "same_values", "write_rows"]

logger = logging.getLogger("dkpca")


def chunk_digest(block: np.ndarray, edge: tuple[int, int]) -> np.ndarray:
    """The digest a chunk holding ``block`` (zero-padded) records: written with it, compared with an input's rows."""
    return np.array([padded_digest(np.ascontiguousarray(block), edge)], dtype=np.uint64)


def copy_edge(X: da.Array) -> tuple[int, int] | None:
    """The chunk shape a data copy writes X's row blocks as, one block a chunk (tasks writing parts of one chunk
    would race); None where X's blocks are not such chunks (uneven rows, split columns): the copy re-chunks X
    first, and a scan's digests of its blocks are not the copy's."""
    heights, widths = X.chunks
    regular = len(widths) == 1 and len(set(heights[:-1])) <= 1 and heights[-1] <= heights[0]
    return (heights[0], X.shape[1]) if regular else None


def copy_block(block: np.ndarray, target: Any, edge: tuple[int, int], offset: int = 0,
               block_info: dict | None = None) -> np.ndarray:
    """Write one row block of X into the data copy (``target``, maybe fenced) at row ``offset`` on; its digest."""
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    target[offset + r0:offset + r1, c0:c1] = block
    return chunk_digest(block, edge)


class InputChangedError(ValueError):
    """The input's rows as the copy wrote them are not those the fit's scan read: it changed in between."""


def write_rows(X: da.Array, target: Any, edge: tuple[int, int], label: str, progress: bool = False, offset: int = 0,
               seen: Sequence[int | None] = ()) -> list[int]:
    """Write X's row blocks (one chunk of shape ``edge`` each, tasks in parallel) into ``target`` from row
    ``offset`` on; return the digest of each chunk as written, which the copy records.

    ``seen``: the digests the fit's scan of the input took of the same chunks (:attr:`dkpca.io.Fingerprint.chunks`;
    empty, or None for a chunk: not comparable).  The input is read twice -- scanned (finite? its fingerprint),
    then copied -- and a file still being written, or rewritten meanwhile, gives two different reads: a copy
    recorded under the scan's fingerprint would hold other data.  Raises :class:`InputChangedError` naming the
    first chunk that differs (its rows are written; the caller decides what becomes of them).
    """
    digests = X.map_blocks(copy_block, target, edge, offset, dtype=np.uint64, drop_axis=1,
                           chunks=((1,) * len(X.chunks[0]),), name=f"dkpca-copy-{uuid.uuid4().hex}")
    (values,) = compute(digests, label=label, progress=progress, local=for_the_client(X.nbytes))
    for c, (written, scanned) in enumerate(zip(values, seen, strict=False)):  # seen empty: none taken
        if scanned is not None and int(written) != int(scanned):
            first, last = offset + c * edge[0], min(offset + (c + 1) * edge[0], offset + X.shape[0]) - 1
            raise InputChangedError(
                f"the input changed while this fit read it: its rows {first} to {last} differ between "
                "dkpca's check of them and its copy of them (is something still writing it?); rerun once it is "
                "complete.")
    return [int(v) for v in values]


def same_values(data: VerifiedArray, X: da.Array, start: int, stop: int) -> bool:
    """Whether rows ``start:stop`` of the copy (``data``, read verified) hold X's values where their digests differ.

    Digests compare bytes, and ``0.0`` and ``-0.0`` are one value in two (a sign flipped, ``np.round``, another
    program's writer): every kernel gives them the same entries, so such rows are the copy's data, not changed
    ones.  A damaged chunk of the copy, or another dtype, is not the same.
    """
    if data.dtype != X.dtype:
        return False
    try:
        held = data[start:stop]
    except CorruptChunkError:
        return False
    return bool(np.array_equal(held, np.asarray(X[start:stop])))


def held_as(store: Any, X: da.Array, fingerprint: dict) -> dict | None:
    """The fingerprint of ``store``'s data copy where the copy holds X's values in other bytes
    (:meth:`~.datacopy.StoredData.changed_chunk`), for a refit of the same values to keep the copy, K and the
    model bound to it; None otherwise (``fingerprint``, X's, stands).  Reads X and the copy only where the
    fingerprints differ and shape, dtype and tile agree."""
    try:
        ext = store.data_extent()
    except (OSError, ValueError, KeyError):  # no copy, or one the fit judges and names
        return None
    old = ext.fingerprint or {}
    if (old == fingerprint or ext.growing is not None or not ext.digested or ext.tile != X.chunks[0][0]
            or any(old.get(key) != fingerprint.get(key) for key in ("shape", "dtype"))):
        return None
    return old if store.changed_chunk(X, ext.rows) is None else None


def damaged_chunks(data: VerifiedArray) -> dict[int, CorruptChunkError]:
    """Each row chunk of the copy that fails its read (missing, truncated, corrupt, another's), with its error."""
    edge = data.array.chunks[0]
    bad = {}
    for c, start in enumerate(range(0, data.shape[0], edge)):
        try:
            data[start:start + edge]
        except CorruptChunkError as exc:
            bad[c] = exc
    return bad


def _rewrite(block: np.ndarray, target: Any, edge: tuple[int, int], chunk: int, recorded: int) -> bool:
    """Write ``block`` as row chunk ``chunk`` if its digest is the recorded one; whether it was."""
    if int(chunk_digest(block, edge)[0]) != recorded:
        return False
    target[chunk * edge[0]:chunk * edge[0] + block.shape[0], :] = block
    return True


def rewrite_chunks(X: da.Array, data: VerifiedArray, arr: zarr.Array, lease: Lease | None, found: CorruptChunkError,
                   path: str) -> None:
    """Write the damaged row chunks of the copy ``data`` again from X into ``arr`` (its array, written under the
    fit's ``lease`` where there is one), and read them back verified: after it, every chunk of the copy has been
    read intact.  ``found``: the damage a read of it met.

    Raises ``found`` where the copy records no digests or no chunk fails a read of its own (damage of its
    metadata), or where X's rows of a damaged chunk are not those recorded (then that chunk is not written).
    """
    bad = damaged_chunks(data)
    if data.digests is None or not bad:
        raise found
    first = next(iter(bad.values()))
    edge = (data.array.chunks[0], data.shape[1])
    blocks = X.rechunk((edge[0], X.shape[1])).to_delayed().ravel()
    target = arr if lease is None else Fenced(arr, lease)
    tasks = [dask.delayed(_rewrite, pure=False)(blocks[c], target, edge, c, int(data.digests[c])) for c in bad]
    done = compute(*tasks, label="repairing the data copy", local=for_the_client(X.nbytes))
    if not all(done):
        raise found
    for c in bad:  # read back, verified: the rest of the copy was read intact by damaged_chunks
        data[c * edge[0]:(c + 1) * edge[0]]
    logger.warning("store %s: %d chunk(s) of its data copy were damaged (first: %s); written again from the "
                   "input, whose rows are those recorded for them; the Gram matrix built from them is kept", path,
                   len(bad), str(first).split(";")[0])


def remake_meta(group: zarr.Group, X: da.Array, path: str) -> bool:
    """Write the data copy's array metadata (``data/X/zarr.json``) again where it is lost or unreadable and the
    copy's record (``group``'s attributes: complete, X's fingerprint, the chunks' digests) is intact; whether it did.

    The chunks are kept: what they hold is judged by their recorded digests when read.  The metadata says only
    shape, dtype and chunk rows; the fingerprint records the first two, the record the last (``edge``; a copy
    written before dkpca recorded it: X's chunk rows, the fit's tile), taken only where X's first rows in them give
    the first recorded digest.
    """
    try:
        group["X"]
        return False  # readable: its chunks are judged, not its metadata
    except KeyError:
        unreadable = False
    except (TypeError, ValueError):  # zarr's metadata parsing: a zarr.json cut short or garbled
        unreadable = True
    attrs = dict(group.attrs)
    fp = attrs.get("fingerprint") if isinstance(attrs.get("fingerprint"), dict) else {}
    shape = fp.get("shape")
    if not (attrs.get("complete") and attrs.get("growing") is None and attrs.get("digest") == DIGEST
            and isinstance(shape, list) and list(X.shape) == shape and fp.get("dtype") == str(X.dtype)):
        return False
    try:
        digests = decode_digests(attrs.get("digests"))
    except ValueError:
        return False
    for rows in dict.fromkeys((attrs.get("edge"), X.chunks[0][0])):  # in order, once each
        edge = (rows, shape[1]) if type(rows) is int and rows > 0 else None
        if edge is not None and len(digests) == -(-shape[0] // rows) \
                and int(chunk_digest(np.asarray(X[:rows]), edge)[0]) == digests[0]:
            if unreadable:  # replaced only now that its replacement is known
                sync(group.store.delete(f"{group.path}/X/zarr.json"))
            create_array(group, "X", shape=tuple(shape), chunks=edge, dtype=X.dtype)
            logger.warning("store %s: the data copy's metadata (data/X/zarr.json) was lost or unreadable; written "
                           "again from its record, its chunks kept", path)
            return True
    return False
