"""Chunk integrity: every array dkpca writes carries a CRC-32C per chunk, and reads check it.

Arrays are created by :func:`create_array` (zarr v3's ``crc32c`` codec after
the raw bytes), so zarr verifies each chunk it decodes; :mod:`.chunks`' raw
path checks the same trailer itself.  zarr reads a *missing* chunk as its
fill value without a word, so presence is checked here too
(:func:`check_chunks`) -- so every handle dkpca writes through writes every
chunk, also one equal to the fill value (:func:`write_config`).  A chunk that
is missing, of the wrong size, fails its checksum or is not the one recorded
is never read as data: readers raise :class:`CorruptChunkError`, naming the
array and the chunk.  An array whose metadata disagrees with what dkpca
recorded of it (a shape of 10^12 rows) is refused before any chunk grid is
walked (:func:`check_layout`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash
import zarr
from zarr.codecs import Crc32cCodec
from zarr.core.sync import sync
from zarr.storage import LocalStore

from .corrupt import CorruptChunkError, size_problem, unreadable, verify_digest

__all__ = ["CHECKSUM_BYTES", "CorruptChunkError", "checksum_codecs", "write_config", "writable", "create_array",
           "plain_layout", "has_checksum", "chunk_key", "chunk_exists", "store_name", "DIGEST", "digest", "json_digest",
           "padded_digest", "content_digest", "check_layout", "present_chunks",
           "check_chunks", "damaged_chunks", "chunk_digests", "chunk_coords", "chunk_region", "read_verified",
           "read_whole", "VerifiedArray", "encode_digests", "decode_digests"]

#: bytes the crc32c codec appends to each chunk (little-endian CRC-32C of the chunk's bytes)
CHECKSUM_BYTES = 4


def checksum_codecs() -> list:
    """The ``compressors`` of every array dkpca writes: none but a CRC-32C per chunk (zarr's ``crc32c``)."""
    return [Crc32cCodec()]


def write_config() -> dict[str, Any]:
    """The runtime configuration of every zarr handle dkpca writes through: every chunk is written.

    zarr v3 by default skips a chunk equal to the fill value (and deletes
    the one that was there): a zero data block, the zero row sums of a linear
    kernel on centred data.  Readers would then find it missing, which the
    presence checks here rightly call damage -- so dkpca never lets zarr skip
    one.  ``write_empty_chunks`` is an ``ArrayConfig``, not stored in the
    array's metadata: every handle that writes must carry it
    (:func:`create_array`'s do; :func:`writable` for arrays opened again;
    ``config=write_config()`` for ``dask.array.to_zarr``).
    """
    return {"write_empty_chunks": True}


def writable(arr: zarr.Array) -> zarr.Array:
    """``arr`` (opened again from its group or path) as a handle that writes every chunk (:func:`write_config`)."""
    return arr.with_config(write_config())


def create_array(group: zarr.Group, name: str, *, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: Any,
                 fill_value: Any = 0) -> zarr.Array:
    """Create array ``name`` in ``group`` the way dkpca stores every array: raw bytes plus a CRC-32C per chunk.

    No compression: K is incompressible noise to a compressor and is read
    every pass; the checksum costs ~4 bytes a chunk and a hardware CRC.
    The handle returned writes every chunk, fill-valued ones too (:func:`write_config`).
    """
    return group.create_array(name, shape=shape, chunks=chunks, dtype=dtype, compressors=checksum_codecs(),
                              fill_value=fill_value, config=write_config())


def plain_layout(arr: zarr.Array) -> bool:
    """Whether ``arr``'s chunks are stored as dkpca writes them: raw bytes, then (or not) a CRC-32C; no compression.

    Only then is a chunk's file of known size, and readable without zarr (:mod:`.chunks`).
    """
    return [c.get("name") for c in arr.metadata.to_dict().get("codecs", ())] in (["bytes"], ["bytes", "crc32c"])


def has_checksum(arr: zarr.Array) -> bool:
    """Whether ``arr``'s chunks carry a CRC-32C (stores written before checksums do not)."""
    return any(c.get("name") == "crc32c" for c in arr.metadata.to_dict().get("codecs", ()))


def chunk_key(arr: zarr.Array, coords: tuple[int, ...]) -> str:
    """The store key of chunk ``coords`` (dkpca's arrays use zarr's default ``c/i/j`` encoding)."""
    return "/".join([arr.path, "c", *map(str, coords)]) if arr.path else "/".join(["c", *map(str, coords)])


def chunk_exists(arr: zarr.Array, coords: tuple[int, ...]) -> bool:
    return bool(sync(arr.store.exists(chunk_key(arr, coords))))


def store_name(arr: zarr.Array) -> str:
    if isinstance(arr.store, LocalStore):
        return str(arr.store.root)
    fs = getattr(arr.store, "fs", None)  # a URL as the user wrote it, not <FsspecStore(S3FileSystem, ...)>
    return fs.unstrip_protocol(arr.store.path) if fs is not None else str(arr.store)


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


def json_digest(value: Any) -> str:
    """:func:`digest` of ``value`` as canonical JSON (sorted keys), 16 hex digits: attributes read back compared."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return f"{digest(np.frombuffer(text.encode(), dtype=np.uint8)):016x}"


def padded_digest(data: np.ndarray, chunks: tuple[int, ...]) -> int:
    """:func:`digest` of ``data`` as stored in a chunk of shape ``chunks`` (zero-padded at the edges, C order)."""
    if tuple(data.shape) != tuple(chunks):
        padded = np.zeros(chunks, dtype=data.dtype)
        padded[tuple(slice(0, e) for e in data.shape)] = data
        data = padded
    return digest(np.ascontiguousarray(data))


def block_checksum(block: np.ndarray) -> str:
    """BLAKE2b-128 (hex) of a row block's bytes (C order): one term of :func:`rows_checksum`."""
    return hashlib.blake2b(np.ascontiguousarray(block).view(np.uint8), digest_size=16).hexdigest()


def rows_checksum(block_checksums: Iterable[str], row_chunks: tuple[int, ...]) -> str:
    """A data matrix's checksum, as its fingerprint records it: BLAKE2b-128 of its row blocks'
    :func:`block_checksum` in order, then of the row blocking (taken in K's tiles, a store's)."""
    h = hashlib.blake2b(digest_size=16)
    for term in block_checksums:
        h.update(term.encode())
    h.update(str(tuple(row_chunks)).encode())
    return h.hexdigest()


def content_digest(arrays: Iterable[np.ndarray], extra: bytes = b"") -> str:
    """BLAKE2b-128 (hex) of the arrays' dtypes, shapes and bytes, then ``extra``: their content, not their names
    (a solver checkpoint's arrays, one each; the model a transform output was projected with)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8))
    h.update(extra)
    return h.hexdigest()


def encode_digests(values: Any) -> list[str]:
    """Chunk digests as JSON can hold them exactly (16 hex digits each; JSON numbers lose 64-bit integers)."""
    return [f"{int(v):016x}" for v in np.asarray(values, dtype=np.uint64).ravel()]


def decode_digests(values: Any) -> tuple[int, ...]:
    """The digests :func:`encode_digests` wrote (``ValueError`` for anything else)."""
    if not isinstance(values, list) or not all(isinstance(v, str) and len(v) == 16 for v in values):
        raise ValueError("the recorded chunk digests are not 16-hex-digit strings")
    return tuple(int(v, 16) for v in values)


def check_layout(arr: zarr.Array, shape: tuple[int, ...], chunks: tuple[int, ...] | None, fix: str) -> None:
    """Raise :class:`CorruptChunkError` unless ``arr`` has the ``shape`` (and ``chunks``) dkpca recorded of it.

    An array's ``zarr.json`` is not checksummed: one edited to claim 10^12
    rows would make every walk over its chunk grid (a listing, a presence
    check, ``dkpca verify``) run out of memory.  So its shape is compared
    with what dkpca recorded elsewhere (the data's fingerprint, the Gram
    store's ``n``) before any such walk; ``fix`` says what to rerun.
    """
    if tuple(arr.shape) != tuple(shape) or (chunks is not None and tuple(arr.chunks) != tuple(chunks)):
        want = f"shape {tuple(shape)}" + (f", chunks {tuple(chunks)}" if chunks is not None else "")
        raise CorruptChunkError(store_name(arr), arr.path, None,
                                f"claims shape {tuple(arr.shape)}, chunks {tuple(arr.chunks)}, but dkpca recorded "
                                f"{want}: its metadata is damaged or was edited; {fix}")


async def _keys(store: Any, prefix: str) -> list[str]:
    return [key async for key in store.list_prefix(prefix)]


def present_chunks(arr: zarr.Array) -> set[tuple[int, ...]]:
    """The chunks of ``arr`` that have a file (object), from one listing; never walks the whole grid.

    zarr's ``nchunks_initialized`` builds every key of the grid first: an
    edited shape of 10^12 rows exhausts memory.  Names that are no chunk of
    the grid (a killed writer's ``*.partial`` files) are not counted.
    """
    prefix = chunk_key(arr, ()) + "/"
    grid = arr.cdata_shape
    present = set()
    for key in sync(_keys(arr.store, prefix)):
        parts = key[len(prefix):].split("/")
        if len(parts) == arr.ndim and all(p.isdigit() for p in parts):
            coords = tuple(map(int, parts))
            if all(i < g for i, g in zip(coords, grid, strict=True)):
                present.add(coords)
    return present


def check_chunks(arr: zarr.Array, coords: Any = None) -> None:
    """Raise :class:`CorruptChunkError` for the first chunk of ``arr`` (or of ``coords``) that is missing.

    zarr reads a missing chunk as the fill value; an array dkpca wrote whole
    has every chunk (fill-valued ones too: :func:`write_config`), so one
    missing means a damaged store.  One listing for the whole array, and
    the grid is walked only up to the first chunk that is not listed.
    """
    if coords is None and arr.ndim:
        present = present_chunks(arr)
        if len(present) == arr.nchunks:
            return
        for c in chunk_coords(arr):  # stops at the first gap: at most len(present) + 1 steps
            if c not in present:
                raise CorruptChunkError(store_name(arr), arr.path, tuple(c), "missing")
        return
    for c in [()] if coords is None else coords:
        if not chunk_exists(arr, tuple(c)):
            raise CorruptChunkError(store_name(arr), arr.path, tuple(c), "missing")


def chunk_coords(arr: zarr.Array, selection: Any = Ellipsis) -> Any:
    """Coordinates of the chunks of ``arr`` that ``selection`` (Ellipsis or a tuple of slices) touches."""
    sel = () if selection is Ellipsis else selection if isinstance(selection, tuple) else (selection,)
    sel = tuple(sel) + (slice(None),) * (arr.ndim - len(sel))
    ranges = []
    for sl, c, size in zip(sel, arr.chunks, arr.shape, strict=True):
        start, stop, _ = sl.indices(size)
        ranges.append(range(start // c, max(start // c, -(-stop // c))))
    return _product(ranges)


def _product(ranges: list[range]) -> Iterator[tuple[int, ...]]:
    """``itertools.product`` without materialising its ranges (a grid of 10^12 rows is walked lazily)."""
    if not ranges:
        yield ()
        return
    for i in ranges[0]:
        for rest in _product(ranges[1:]):
            yield (i, *rest)


def chunk_region(arr: zarr.Array, coords: tuple[int, ...]) -> tuple[slice, ...]:
    """The selection of ``arr`` that chunk ``coords`` covers (smaller at the edges)."""
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
                arr[chunk_region(arr, c)]
            except Exception as exc:
                raise CorruptChunkError(store_name(arr), arr.path, c, _wrong_size(arr, c) or unreadable(exc)) from None
        raise error


def _wrong_size(arr: zarr.Array, coords: tuple[int, ...]) -> str | None:
    """"truncated (m of n bytes)" for a chunk of dkpca's uncompressed layout whose file has the wrong size, else None.

    zarr's crc32c codec takes a truncated chunk's last 4 bytes for its checksum and calls it a mismatch.
    """
    if not plain_layout(arr):
        return None
    want = int(np.prod(arr.chunks)) * arr.dtype.itemsize + (CHECKSUM_BYTES if has_checksum(arr) else 0)
    try:
        size = sync(arr.store.getsize(chunk_key(arr, coords)))
    except Exception:  # noqa: BLE001 -- a store that cannot say: the codec's own words stand
        return None
    return size_problem(size, want)


def damaged_chunks(arr: zarr.Array) -> dict[tuple[int, ...], CorruptChunkError]:
    """Every chunk of ``arr`` that is missing or fails its checksum, by coordinates (:func:`chunk_digests`)."""
    return chunk_digests(arr)[1]


def chunk_digests(arr: zarr.Array) -> tuple[dict[tuple[int, ...], int], dict[tuple[int, ...], CorruptChunkError]]:
    """Every readable chunk's :func:`padded_digest` (what :meth:`~dkpca.storage.chunks.ChunkWriter.write`
    returned for it), and every chunk that is missing or fails its checksum, by coordinates.

    One listing, then a row of chunks read at a time; only a row that fails
    is read again chunk by chunk, to name each damaged one.
    """
    have = present_chunks(arr)
    digests, found = {}, {}
    for row in range(arr.cdata_shape[0] if arr.ndim else 0):
        sel = (slice(row * arr.chunks[0], (row + 1) * arr.chunks[0]),)
        try:
            data = read_verified(arr, sel)
        except CorruptChunkError:
            data = None
        for c in chunk_coords(arr, sel):
            try:
                if c not in have:
                    raise CorruptChunkError(store_name(arr), arr.path, c, "missing")
                region = chunk_region(arr, c)
                # the row read covers the chunk's rows whole: the other axes' bounds select it there
                part = read_verified(arr, region) if data is None else data[(slice(None), *region[1:])]
                digests[c] = padded_digest(part, tuple(arr.chunks))
            except CorruptChunkError as exc:
                found[c] = exc
    return digests, found


def read_whole(arr: zarr.Array) -> np.ndarray:
    """All of ``arr``, every chunk present and verified; :class:`CorruptChunkError` names the first bad one."""
    check_chunks(arr)
    return read_verified(arr)


def _bounds(arr: zarr.Array, selection: Any) -> list[tuple[int, int]] | None:
    """``(start, stop)`` per axis of a selection of plain slices (Ellipsis, step 1); None for anything else."""
    sel = () if selection is Ellipsis else selection if isinstance(selection, tuple) else (selection,)
    if len(sel) > arr.ndim or not all(isinstance(s, slice) for s in sel):
        return None
    out = []
    for s, size in zip(sel + (slice(None),) * (arr.ndim - len(sel)), arr.shape, strict=True):
        start, stop, step = s.indices(size)
        if step != 1:
            return None
        out.append((start, max(start, stop)))
    return out


@dataclass(frozen=True)
class VerifiedArray:
    """A zarr array whose every read is checked: each chunk present, intact and, if recorded, the one written there.

    For ``dask.array.from_array`` and tasks reading rows.  ``digests``: the
    :func:`padded_digest` of every chunk (C order over the chunk grid)
    recorded when the array was written; a read then covers whole chunks
    and checks each against its own, so a chunk that is missing, corrupt,
    stale or another chunk's (two swapped files) is refused by name.
    Without (arrays written before dkpca recorded digests) a read checks
    presence and the CRC-32C only.
    """

    array: zarr.Array
    digests: tuple[int, ...] | None = None

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
        arr = self.array
        bounds = _bounds(arr, selection)
        if bounds is None:  # integers, index arrays, steps: the whole array read verified, then indexed
            return self[...][selection]
        sel = tuple(slice(a, b) for a, b in bounds)
        coords = list(chunk_coords(arr, sel))
        if self.digests is None:
            check_chunks(arr, coords)
            return read_verified(arr, sel)
        hull = tuple(slice(a // c * c, min(-(-b // c) * c, size))
                     for (a, b), c, size in zip(bounds, arr.chunks, arr.shape, strict=True))
        whole = read_verified(arr, hull)
        for c in coords:
            part = whole[tuple(slice(r.start - h.start, r.stop - h.start)
                               for r, h in zip(chunk_region(arr, c), hull, strict=True))]
            got = padded_digest(part, arr.chunks)
            expect = self.digests[int(np.ravel_multi_index(c, arr.cdata_shape))]
            if got != expect:
                check_chunks(arr, [c])  # "missing" says more than "not what was written"
                verify_digest(store_name(arr), arr.path, c, got, expect)
        return whole[tuple(slice(a - h.start, b - h.start) for (a, b), h in zip(bounds, hull, strict=True))]
