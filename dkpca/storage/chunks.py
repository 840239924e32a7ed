"""Whole-chunk reads and writes of one Zarr array, with a raw fast path.

Every array dkpca writes carries a CRC-32C per chunk (:mod:`.integrity`);
this module's raw path writes and checks that trailer itself.

Gram tasks write and every solver pass reads all of K, chunk by chunk.  zarr's
own read and write paths cost about twice a plain ``readinto``/``write`` of a
64 MB chunk (measured), so on a plain local layout (:func:`chunk_file`) chunks
are read and written as files directly -- in exactly zarr's format, checksum
included; anything else (object stores, other codecs, edge chunks on write)
goes through zarr.  This module is the only place that bypasses zarr, and it
only does so for the exact layout it checks.  Both paths write every chunk,
also one equal to the fill value (all zeros), which zarr alone would skip.

A chunk that is missing, of the wrong size or fails its checksum is never
read as data: readers raise :class:`CorruptChunkError`, naming the array and
the chunk (zarr alone would return its fill value for a missing chunk).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import xxhash
import zarr
from zarr.core.buffer.cpu import NDBuffer
from zarr.storage import LocalStore

from ..execution import config_switch
from ..linalg.workspace import ALIGN, scratch, tidy
from ..machine import memory_total
from .corrupt import size_problem, unreadable, verify_crc, verify_digest
from .integrity import (
    CHECKSUM_BYTES,
    CorruptChunkError,
    chunk_exists,
    digest,
    has_checksum,
    padded_digest,
    plain_layout,
    writable,
)

__all__ = ["chunk_file", "checksum", "ChunkWriter", "ChunkReader", "write_direct", "use_direct_io",
           "DIRECT_IO_FRACTION", "partials", "remove_partials"]

#: K larger than this fraction of the machine's memory is written with O_DIRECT
DIRECT_IO_FRACTION = 0.5

#: ``MAP_POPULATE`` maps a cached file's pages in one call; without it reads go through ``readinto``
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def chunk_file(arr: zarr.Array, coords: tuple[int, ...]) -> str | None:
    """Path of chunk ``coords`` if it is a plain native-order file we may use directly.

    Only for arrays whose codecs are ``bytes`` (no compression, no
    transposition), optionally followed by ``crc32c``, in a LocalStore with
    the default ``c/I/J`` keys.  Anything else returns None and goes through zarr.
    """
    if not isinstance(arr.store, LocalStore) or sys.byteorder != "little":
        return None
    meta = arr.metadata.to_dict()
    if not plain_layout(arr) or meta["codecs"][0].get("configuration", {}).get("endian", "little") != "little":
        return None
    enc = meta.get("chunk_key_encoding", {})
    if enc.get("name") != "default" or enc.get("configuration", {}).get("separator", "/") != "/":
        return None
    return os.path.join(str(arr.store.root), arr.path, "c", *map(str, coords))


def use_direct_io(nbytes: int) -> bool:
    """Whether an array of ``nbytes`` is written with ``O_DIRECT``.

    Dask config ``dkpca.direct-io``: ``True``/``False``, or ``"auto"`` (the
    default): direct when the array exceeds ``DIRECT_IO_FRACTION`` of this
    machine's memory.  Such a K will not stay in the page cache for the
    solver's passes anyway, and buffered, its build is bound by dirty-page
    writeback.  Measured here (24 GB): at n = 60,000 (K 7.7 GB) O_DIRECT
    halves the build (8.6 s vs 14.6 s) but the first pass then fills the page
    cache itself (13.8 s vs 6.2 s), a net loss; so only a K too large to cache
    goes direct.  On a cluster this is the client's memory, a proxy for the
    workers'.
    """
    forced = config_switch("dkpca.direct-io")
    return nbytes > DIRECT_IO_FRACTION * memory_total() if forced is None else forced


def checksum(data: np.ndarray, crc: int = 0) -> int:
    """The CRC-32C of ``data``'s bytes continued from ``crc``: zarr's ``crc32c`` codec's value, without the GIL.

    zarr computes it with ``google_crc32c``, which holds the GIL throughout:
    measured here on a 64 MB chunk, 4.8-5.4 ms in which a Python thread beside
    it ran at 37 % of its rate (99 % with ``crc32c``, which releases the GIL
    for large buffers, 4.1-4.2 ms).  Every thread of a Gram build checksums its
    chunks, so that time was serial: 55 chunks, ~0.28 s, of a build at
    n = 40,000, whatever the threads.
    """
    return crc32c.crc32c(data, crc)


@dataclass(frozen=True)
class ChunkWriter:
    """Writes whole chunks of one array; small and plain, so tasks carry it.

    A task holding a writer opens no zarr metadata per block (measured ~7 ms a
    block for the four arrays a Gram task touches).  On a plain local layout a
    chunk is written straight from its buffer (an edge chunk padded to the
    full shape first), followed by its CRC-32C (computed, with the chunk's
    digest, strip by strip while the strip is in cache), to a temporary file
    renamed into place, so a reader or a crash never sees half
    a chunk; anything else goes through zarr, which also writes whole chunks
    and their checksums.
    """

    store: str
    path: str
    chunks: tuple[int, ...]
    dtype: str
    raw_dir: str | None
    direct: bool = False
    crc: bool = True

    @classmethod
    def of(cls, store: str, arr: zarr.Array, direct: bool = False) -> ChunkWriter:
        """Writer for ``arr``, an array of the store opened from path or URL ``store``.

        ``direct=True`` writes whole raw chunks with ``O_DIRECT`` (see
        :func:`write_direct`), for arrays larger than the page cache absorbs.
        """
        return cls(store=store, path=arr.path, chunks=tuple(arr.chunks), dtype=str(arr.dtype),
                   raw_dir=chunk_file(arr, ()), direct=direct, crc=has_checksum(arr))

    def write(self, coords: tuple[int, ...], data: Any, visit: Any = None, strip_bytes: int = 1 << 20) -> int:
        """Write chunk ``coords``; ``data`` covers its region (smaller at the edges); the chunk's digest.

        ``visit(s, e)``, if given, is called on each row strip ``data[s:e]``
        just before that strip is written, while it is in cache: a caller
        reducing over the block (row and column sums) then reads it from
        memory once instead of twice.  The digest returned
        (:func:`~dkpca.storage.integrity.digest`) is that of the whole chunk as
        stored (an edge chunk padded with zeros, as zarr stores it); a caller
        records it to recognise the chunk later (:meth:`ChunkReader.read`'s ``expect``).
        """
        # strips only for a visit; else each step takes the whole chunk in one call without the GIL (crc32c,
        # xxhash, write): a 1 MB strip's three hand-overs of the GIL, ~200 a 64 MB chunk, queue behind every
        # other thread of a 16-thread build (issue 40)
        rows = data.shape[0] if data.ndim < 2 or visit is None else max(1, strip_bytes // max(1, data[0].nbytes))
        strips = [(s, min(s + rows, data.shape[0])) for s in range(0, data.shape[0], rows)]
        raw = self.raw_dir is not None and data.dtype == self.dtype
        # only a buffered raw write of a full, contiguous chunk visits strips as it writes them
        if visit is not None and not (raw and not self.direct and tuple(data.shape) == self.chunks
                                      and data.flags.c_contiguous):
            for s, e in strips:
                visit(s, e)
            visit = None
        if raw and tuple(data.shape) != self.chunks:
            # an edge chunk: stored padded to the full chunk shape with the fill value 0
            padded = np.zeros(self.chunks, dtype=self.dtype)
            padded[tuple(slice(0, e) for e in data.shape)] = data
            data = padded
            strips = [(s, min(s + rows, data.shape[0])) for s in range(0, data.shape[0], rows)]
        if not raw or not data.flags.c_contiguous:
            # writable: zarr would skip (and delete) a chunk equal to the fill value, which readers call missing
            arr = writable(zarr.open_array(self.store, path=self.path, mode="r+"))
            arr[tuple(slice(c * s, c * s + e) for c, s, e in zip(coords, self.chunks, data.shape, strict=True))] = data
            return padded_digest(data, self.chunks)
        path = os.path.join(self.raw_dir, *map(str, coords))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.partial"
        crc, hashed = 0, xxhash.xxh3_64()
        try:
            if not self.direct:
                # buffered: each strip is visited and checksummed just before it is copied out
                with open(tmp, "wb", buffering=0) as f:
                    for s, e in strips:
                        if visit is not None:
                            visit(s, e)
                        strip = np.asarray(data[s:e])
                        if self.crc:
                            crc = checksum(strip, crc)
                        hashed.update(strip)
                        f.write(memoryview(strip).cast("B"))
                    if self.crc:
                        f.write(crc.to_bytes(CHECKSUM_BYTES, "little"))
            else:
                hashed.update(data)
                trailer = checksum(data).to_bytes(CHECKSUM_BYTES, "little") if self.crc else b""
                if not write_direct(tmp, data, trailer):
                    with open(tmp, "wb", buffering=0) as f:
                        f.write(memoryview(data).cast("B"))
                        f.write(trailer)
            os.replace(tmp, path)
            return hashed.intdigest() | 1  # as integrity.digest
        except BaseException:
            # a full disk or a kill mid-write leaves no temporary file behind
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


@dataclass(frozen=True)
class ChunkReader:
    """Reads whole, verified chunks of one 2-D array.

    The counterpart of :class:`ChunkWriter`.  A plain chunk file (edge chunks
    are stored padded to the full chunk shape) is memory-mapped -- on Linux
    with ``MAP_POPULATE``, which maps a cached file's pages in one call and
    copies nothing: measured at n = 20,000 (``benchmarks/integrity.py``), an
    unchecked float32 pass took 0.408 s this way against 0.471 s with
    ``readinto``, which pays for the check (0.447 s checked).
    Its size, and its digest against the one recorded when it was written
    (``expect``; else its CRC-32C), are checked before it is used.  Otherwise the chunk
    goes through zarr (whose codec verifies the checksum) into a reused
    per-thread buffer, after checking that it exists.

    The mapping stays valid if a writer replaces the file (writers rename new
    files into place; the old inode lives while mapped).  Any problem raises
    :class:`CorruptChunkError`.
    """

    store: str
    path: str
    chunks: tuple[int, int]
    dtype: str
    raw_dir: str | None
    crc: bool = True

    @classmethod
    def of(cls, store: str, arr: zarr.Array) -> ChunkReader:
        return cls(store=store, path=arr.path, chunks=tuple(arr.chunks), dtype=str(arr.dtype),
                   raw_dir=chunk_file(arr, ()), crc=has_checksum(arr))

    def read(self, I: int, J: int, shape: tuple[int, int], purpose: str = "op-block",
             expect: int | None = None, both: bool = False) -> np.ndarray:
        """Chunk ``(I, J)``, whose region has ``shape``: a read-only view (raw path) or a per-thread buffer.

        ``expect``: the digest recorded when the chunk was written
        (:meth:`ChunkWriter.write`); checked instead of the CRC-32C (cheaper, and
        it also refuses an intact chunk that is not the one written there).
        ``both=True`` checks the CRC-32C as well, in the same read (``dkpca verify``).
        """
        tidy()  # retired buffers (a finished Gram build's) go before this block is mapped in beside them
        if self.raw_dir is not None:
            return self._read_file(I, J, purpose, expect, both)[: shape[0], : shape[1]]
        buf = scratch(purpose, shape, self.dtype)
        arr = zarr.open_array(self.store, path=self.path, mode="r")
        if not chunk_exists(arr, (I, J)):
            raise CorruptChunkError(self.store, self.path, (I, J), "missing")
        r0, c0 = I * self.chunks[0], J * self.chunks[1]
        try:
            arr.get_basic_selection((slice(r0, r0 + shape[0]), slice(c0, c0 + shape[1])),
                                    out=NDBuffer.from_numpy_array(buf))
        except ValueError as exc:  # the crc32c codec's mismatch, or the bytes codec's wrong size
            raise CorruptChunkError(self.store, self.path, (I, J), unreadable(exc)) from None
        if expect is not None:
            verify_digest(self.store, self.path, (I, J), padded_digest(buf, self.chunks), expect)
        return buf

    def _read_file(self, I: int, J: int, purpose: str, expect: int | None, both: bool) -> np.ndarray:
        count = self.chunks[0] * self.chunks[1]
        nbytes = count * np.dtype(self.dtype).itemsize
        want = nbytes + (CHECKSUM_BYTES if self.crc else 0)
        try:
            fd = os.open(os.path.join(self.raw_dir, str(I), str(J)), os.O_RDONLY)
        except FileNotFoundError:
            raise CorruptChunkError(self.store, self.path, (I, J), "missing") from None
        try:
            size = os.fstat(fd).st_size
            if (problem := size_problem(size, want)) is not None:
                raise CorruptChunkError(self.store, self.path, (I, J), problem)
            if _POPULATE:
                mapped = mmap.mmap(fd, want, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
                full = np.frombuffer(mapped, dtype=self.dtype, count=count)  # the array keeps the mapping
                trailer = mapped[nbytes:]
            else:
                full = scratch(purpose, (count,), self.dtype)
                with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
                    f.readinto(memoryview(full).cast("B"))
                    trailer = f.read()
        finally:
            os.close(fd)
        if expect is not None:
            verify_digest(self.store, self.path, (I, J), digest(full), expect)
        if self.crc and (expect is None or both):  # after a digest that matched, only the trailer can be damaged
            verify_crc(self.store, self.path, (I, J), checksum(full), trailer, values_intact=expect is not None)
        return full.reshape(self.chunks)


def partials(directory: str) -> list[str]:
    """The temporary ``*.partial`` chunk files under ``directory`` (what a killed writer leaves)."""
    return [os.path.join(dirpath, name) for dirpath, _, files in os.walk(directory)
            for name in files if name.endswith(".partial")]


def remove_partials(directory: str) -> int:
    """Delete the temporary chunk files a killed writer left under ``directory``; how many.

    Only the holder of the store's lock calls this, so no live writer's
    temporary file can be among them.
    """
    removed = 0
    for path in partials(directory):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed += 1
    return removed


def write_direct(path: str, data: Any, trailer: bytes = b"") -> bool:
    """Write ``data``'s bytes, then ``trailer``, to a new file with ``O_DIRECT``; False if unsupported here.

    Measured on this project's machine: a Gram build whose K (7.7 GB at n =
    60,000) outgrows what the page cache absorbs before writeback throttles
    it writes 2x faster this way (the device DMAs from our buffer, no copy
    through the page cache, no dirty-page throttling).  The buffer must be
    page-aligned (dkpca's scratch buffers are); a tail that is not a multiple
    of 4 KiB is written by an ordinary write.
    """
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or not data.flags.c_contiguous or data.ctypes.data % ALIGN:
        return False
    mv = memoryview(data).cast("B")
    head = len(mv) - len(mv) % ALIGN
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    except OSError:  # e.g. tmpfs: EINVAL
        return False
    try:
        done = 0
        while done < head:
            done += os.write(fd, mv[done:head])
    except OSError:
        os.close(fd)
        return False
    os.close(fd)
    if head < len(mv) or trailer:
        with open(path, "r+b", buffering=0) as f:
            f.seek(head)
            f.write(mv[head:])
            f.write(trailer)
    return True
