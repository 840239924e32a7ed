"""The copy of the training data in a store (``data/X``): written once, fenced, every read verified.

The copy records each chunk's digest as it is written (``data`` attributes
``digest``, ``digests``), and every read of it checks it, so a chunk that is
missing, stale or another chunk's is refused (:class:`CorruptChunkError`,
naming the chunk); a refit that would reuse the copy reads it all first.
Each chunk write checks the fit's lease (:class:`~dkpca.storage.lock.Fenced`).

:class:`StoredData` is a mix-in of :class:`~dkpca.storage.fitstore.FitStore`:
the store's layout and its model switch live there, the data copy here.
"""

from __future__ import annotations

import uuid
from typing import Any

import dask.array as da
import numpy as np

from ..execution import compute
from .integrity import (
    DIGEST,
    CorruptChunkError,
    VerifiedArray,
    check_chunks,
    check_layout,
    chunk_coords,
    chunk_region,
    create_array,
    decode_digests,
    encode_digests,
    padded_digest,
)
from .lock import Fenced, Lease
from .paths import relation

__all__ = ["DATA", "RECOPY", "StoredData"]

DATA = "data"
#: what to rerun when the data copy is damaged: the input is the truth
RECOPY = "rerun the fit with overwrite=True (CLI: --overwrite) to copy the data again"


def _copy_block(block: np.ndarray, target: Any, edge: tuple[int, int], block_info: dict | None = None) -> np.ndarray:
    """Write one row block of X into the data copy (``target``, maybe fenced); the digest of its chunk as stored."""
    target[tuple(slice(a, b) for a, b in block_info[0]["array-location"])] = block
    return np.array([padded_digest(np.ascontiguousarray(block), edge)], dtype=np.uint64)


class StoredData:
    """The training data's copy in a store: :meth:`store_data` writes it, the other methods read it, verified.

    The class it is mixed into provides ``path``, ``open``, ``open_for_write``
    and ``discard_data`` (withdraw the model, delete the old copy and K).
    """

    def store_data(self, X: da.Array, fingerprint: dict, overwrite: bool, progress: bool = False,
                   source: str | None = None, lease: Lease | None = None) -> da.Array:
        """Copy X into ``data/X`` once (kept if the fingerprint matches); return the copy, lazily.

        A copy of other data is an error unless ``overwrite``; then the data,
        the Gram store and the model (all derived from it) are replaced --
        but never while X is being read from this very store (``source``, the
        input's absolute path): that would turn the input into zeros.
        Identical data is kept even with ``overwrite`` (a refit from
        ``<store>/data/X`` with a new kernel replaces K and the model only).
        With the fit's ``lease`` every chunk write checks it first: a copy task
        that outlives its fit writes nothing (:class:`~dkpca.storage.Lease`).
        """
        root = self.open_for_write()
        if DATA in root:
            attrs = dict(root[DATA].attrs)
            if attrs.get("fingerprint") == fingerprint and attrs.get("complete"):
                try:
                    # nothing reads data/X once K is built: damage is found here or never
                    return self._lazy(self.check_data())
                except CorruptChunkError:
                    if not overwrite:  # the error names the chunk and the fix: overwrite, below
                        raise
            if source is not None and relation(source, self.path) in ("same", "inside"):
                raise ValueError(
                    f"the input {source!r} lies inside the store {self.path!r}, whose data it would have to "
                    "replace while reading it; copy the data out of the store first, or choose another store."
                )
            if attrs.get("fingerprint") != fingerprint and not overwrite:
                old = attrs.get("fingerprint", {})
                raise ValueError(
                    f"store {self.path!r} was fitted on different data (store: shape {old.get('shape')}, "
                    f"checksum {old.get('checksum')}; now: shape {fingerprint.get('shape')}, checksum "
                    f"{fingerprint.get('checksum')}). Pass overwrite=True (CLI: --overwrite) to replace it, or "
                    "choose another store."
                )
            self.discard_data(root)
        g = root.create_group(DATA)
        g.attrs.update({"fingerprint": fingerprint, "complete": False})
        edge = (X.chunks[0][0], X.shape[1])
        if len(set(X.chunks[0][:-1])) > 1 or X.chunks[0][-1] > edge[0] or len(X.chunks[1]) > 1:
            X = X.rechunk(edge)  # one task a chunk: two tasks writing parts of one chunk would race
        arr = create_array(g, "X", shape=X.shape, chunks=edge, dtype=X.dtype)
        target = arr if lease is None else Fenced(arr, lease)
        # each task writes its block and returns the digest of the chunk as stored, recorded with `complete`
        digests = X.map_blocks(_copy_block, target, edge, dtype=np.uint64, drop_axis=1,
                               chunks=((1,) * len(X.chunks[0]),), name=f"dkpca-copy-{uuid.uuid4().hex}")
        (values,) = compute(digests, label="copying X into the store", progress=progress)
        g.attrs.update({"complete": True, "digest": DIGEST, "digests": encode_digests(values)})
        return self.training_data()

    def training_array(self) -> VerifiedArray:
        """The stored training data for tasks reading rows: every read verified, damage names its chunk.

        Refused first (:class:`CorruptChunkError`, one line) when ``data/X``'s
        metadata disagrees with the data's fingerprint, or the digests
        recorded do not cover its chunks.  Copies made before dkpca recorded
        digests (no ``digests`` attribute) still load: their reads check
        presence and the CRC-32C only.
        """
        try:
            group = self.open()[DATA]
            arr, attrs = group["X"], dict(group.attrs)
        except (TypeError, ValueError) as exc:  # zarr's metadata parsing: a complex64 with fill 0.0, ...
            raise CorruptChunkError(self.path, f"{DATA}/X", None, f"has metadata zarr cannot read ({exc}); "
                                    f"{RECOPY}") from None
        fingerprint = attrs.get("fingerprint")
        shape = fingerprint.get("shape") if isinstance(fingerprint, dict) else None
        if shape is not None:  # before anything walks the chunk grid an edited zarr.json may claim
            check_layout(arr, tuple(shape) if isinstance(shape, list) else (shape,), None, RECOPY)
        if attrs.get("digests") is None:
            # a copy made before dkpca recorded digests (older stores): it still loads; its reads are checked
            # for presence and by CRC-32C only (a swapped or stale chunk cannot be recognised)
            return VerifiedArray(arr)
        try:
            digests = decode_digests(attrs["digests"])
            if attrs.get("digest") != DIGEST or len(digests) != arr.nchunks:
                raise ValueError(f"{len(digests)} digests ({attrs.get('digest')!r}) for {arr.nchunks} chunks")
        except ValueError as exc:
            raise CorruptChunkError(self.path, f"{DATA}/X", None, f"has unusable recorded digests ({exc}): the "
                                    f"data's attributes are damaged or were edited; {RECOPY}") from None
        return VerifiedArray(arr, digests)

    def check_data(self) -> VerifiedArray:
        """Read the whole data copy once, a chunk at a time, each verified; the first damage raises, naming it.

        Returns the copy as :meth:`training_array` does, every chunk now known present.
        """
        data = self.training_array()
        check_chunks(data.array)
        for c in chunk_coords(data.array):
            data[chunk_region(data.array, c)]
        return data

    def training_data(self) -> da.Array:
        """The stored training data, lazily; every chunk checked present now and verified when read."""
        data = self.training_array()
        check_chunks(data.array)
        return self._lazy(data)

    def _lazy(self, data: VerifiedArray) -> da.Array:
        """``data`` (checked present) as a dask array, every chunk verified when read."""
        # named by store and content, so graphs reading the same data share their keys
        digest = dict(self.open()[DATA].attrs).get("fingerprint", {}).get("checksum", uuid.uuid4().hex)
        return da.from_array(data, chunks=data.array.chunks, asarray=True, lock=False,
                             name=f"dkpca-data-{uuid.uuid5(uuid.NAMESPACE_URL, self.path).hex}-{digest}")
