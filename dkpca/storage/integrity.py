"""Chunk integrity: every array dkpca writes carries a CRC-32C per chunk, and reads check it.

Arrays are created by :func:`create_array` (zarr v3's ``crc32c`` codec after
the raw bytes), so zarr verifies each chunk it decodes; :mod:`.chunks`' raw
path checks the same trailer itself.  zarr reads a *missing* chunk as its
fill value without a word, so presence is checked here too
(:func:`check_chunks`).  A chunk that is missing, of the wrong size, fails
its checksum or is not the one recorded is never read as data: readers raise
:class:`CorruptChunkError`, naming the array and the chunk.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash
import zarr
from zarr.codecs import Crc32cCodec
from zarr.core.sync import sync
from zarr.storage import LocalStore

__all__ = ["CHECKSUM_BYTES", "CorruptChunkError", "checksum_codecs", "create_array", "has_checksum", "chunk_key",
           "chunk_exists", "store_name", "DIGEST", "digest", "padded_digest", "verify_crc", "verify_digest",
           "check_chunks", "chunk_coords", "read_verified", "read_whole", "VerifiedArray"]

#: bytes the crc32c codec appends to each chunk (little-endian CRC-32C of the chunk's bytes)
CHECKSUM_BYTES = 4


class CorruptChunkError(ValueError):
    """A chunk dkpca wrote is missing, of the wrong size, or fails its checksum.

    ``array`` is the array's path in the store (``gram/K``), ``chunk`` the
    chunk's grid coordinates.  Picklable with its fields, so it crosses from a
    distributed worker to the client unchanged.
    """

    def __init__(self, store: str, array: str, chunk: tuple[int, ...], problem: str) -> None:
        self.store, self.array, self.chunk, self.problem = store, array, tuple(chunk), problem
        where = ", ".join(map(str, self.chunk))
        top = array.split("/", 1)[0].split(".", 1)[0]
        fix = {"data": "; the store's copy of the data is damaged: rerun the fit with overwrite=True (CLI: "
                       "--overwrite) to copy it again",
               "model": "; the model is damaged: rerun the fit to solve again",
               "gram": "; a rerun of the fit recomputes that block"}.get(top, "")
        super().__init__(f"chunk ({where}) of array {array!r} in {store!r} is {problem}{fix}")

    def __reduce__(self) -> tuple:
        return type(self), (self.store, self.array, self.chunk, self.problem)


def checksum_codecs() -> list:
    """The ``compressors`` of every array dkpca writes: none but a CRC-32C per chunk (zarr's ``crc32c``)."""
    return [Crc32cCodec()]


def create_array(group: zarr.Group, name: str, *, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: Any,
                 fill_value: Any = 0) -> zarr.Array:
    """Create array ``name`` in ``group`` the way dkpca stores every array: raw bytes plus a CRC-32C per chunk.

    No compression: K is incompressible noise to a compressor and is read
    every pass; the checksum costs ~4 bytes a chunk and a hardware CRC.
    """
    return group.create_array(name, shape=shape, chunks=chunks, dtype=dtype, compressors=checksum_codecs(),
                              fill_value=fill_value)


def has_checksum(arr: zarr.Array) -> bool:
    """Whether ``arr``'s chunks carry a CRC-32C (stores written before checksums do not)."""
    return any(c.get("name") == "crc32c" for c in arr.metadata.to_dict().get("codecs", ()))


def chunk_key(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """The store key of chunk ``coords`` (dkpca's arrays use zarr's default ``c/i/j`` encoding)."""
    return "/".join([arr.path, "c", *map(str, coords)]) if arr.path else "/".join(["c", *map(str, coords)])


def chunk_exists(arr: zarr.Array, coords: tuple[int, ...]) -> bool:
    return bool(sync(arr.store.exists(chunk_key(arr, coords))))


def store_name(arr: zarr.Array) -> str:
    return str(arr.store.root) if isinstance(arr.store, LocalStore) else str(arr.store)


#: the digest the Gram store's done markers record of each K chunk: XXH3 (64 bits, low bit set)
DIGEST = "xxh3_64|1"


def digest(data: Any) -> int:
    """A chunk's digest as its done marker records it: XXH3-64 of its bytes, low bit set (so never 0).

    Why not the CRC-32C the chunk already carries: on this project's
    machine the CRC instruction runs at ~6-7 GB/s a core (measured, also
    in C with three interleaved streams), which cost a solver pass 8-10 %;
    XXH3 runs at 13-16 GB/s.  The solver's reads of K check this digest
    (stronger: 64 bits, and it names the chunk written there); every other
    read checks the CRC.
    """
    return xxhash.xxh3_64_intdigest(data) | 1


def padded_digest(data: np.ndarray, chunks: tuple[int, ...]) -> int:
    """:func:`digest` of ``data`` as stored in a chunk of shape ``chunks`` (zero-padded at the edges, C order)."""
    if tuple(data.shape) != tuple(chunks):
        padded = np.zeros(chunks, dtype=data.dtype)
        padded[tuple(slice(0, e) for e in data.shape)] = data
        data = padded
    return digest(np.ascontiguousarray(data))


def verify_crc(store: str, array: str, coords: tuple[int, ...], crc: int, trailer: Any) -> None:
    """Raise :class:`CorruptChunkError` unless ``crc`` (the content's) equals the stored ``trailer``."""
    if crc != int.from_bytes(bytes(trailer), "little"):
        raise CorruptChunkError(store, array, coords, "corrupt (its CRC-32C checksum does not match)")


def verify_digest(store: str, array: str, coords: tuple[int, ...], got: int, expect: int) -> None:
    """Raise :class:`CorruptChunkError` unless the content's digest ``got`` is the one recorded, ``expect``."""
    if got != expect:
        raise CorruptChunkError(store, array, coords, "not what was written there (its digest differs from the one "
                                                      "recorded when it was built: corrupt, or another chunk's data)")


def check_chunks(arr: zarr.Array, coords: Any = None) -> None:
    """Raise :class:`CorruptChunkError` for the first chunk of ``arr`` (or of ``coords``) that is missing.

    zarr reads a missing chunk as the fill value; an array dkpca wrote whole
    has every chunk, so one missing means a damaged store.  One listing when
    all are there.
    """
    if coords is None:
        if arr.nchunks_initialized == arr.nchunks:
            return
        coords = chunk_coords(arr)
    for c in coords:
        if not chunk_exists(arr, tuple(c)):
            raise CorruptChunkError(store_name(arr), arr.path, tuple(c), "missing")


def chunk_coords(arr: zarr.Array, selection: Any = Ellipsis) -> Any:
    """Coordinates of the chunks of ``arr`` that ``selection`` (Ellipsis or a tuple of slices) touches."""
    sel = () if selection is Ellipsis else selection if isinstance(selection, tuple) else (selection,)
    sel = tuple(sel) + (slice(None),) * (arr.ndim - len(sel))
    ranges = []
    for sl, c, size in zip(sel, arr.chunks, arr.shape, strict=True):
        start, stop, _ = sl.indices(size)
        ranges.append(range(start // c, max(start // c, math.ceil(stop / c))))
    return itertools.product(*ranges)


def _region(arr: zarr.Array, coords: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, arr.chunks, arr.shape, strict=True))


def read_verified(arr: zarr.Array, selection: Any = Ellipsis) -> np.ndarray:
    """``arr[selection]``; a chunk failing its checksum or size raises :class:`CorruptChunkError` naming it.

    Presence is :func:`check_chunks`' job (zarr reads a missing chunk as its
    fill value without a word).
    """
    try:
        return arr[selection]
    except Exception as error:  # the codec's error names no chunk: find it
        for c in chunk_coords(arr, selection):
            try:
                arr[_region(arr, c)]
            except Exception as exc:
                raise CorruptChunkError(store_name(arr), arr.path, c, f"unreadable ({exc})") from None
        raise error


def read_whole(arr: zarr.Array) -> np.ndarray:
    """All of ``arr``, every chunk present and verified; :class:`CorruptChunkError` names the first bad one."""
    check_chunks(arr)
    return read_verified(arr)


@dataclass(frozen=True)
class VerifiedArray:
    """A zarr array whose reads name the chunk that fails its checksum (for ``dask.array.from_array``)."""

    array: zarr.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def ndim(self) -> int:
        return self.array.ndim

    def __getitem__(self, selection: Any) -> np.ndarray:
        return read_verified(self.array, selection)
