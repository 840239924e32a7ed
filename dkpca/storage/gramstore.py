"""The Gram store: K's upper-triangular blocks, their sums and done markers.

Layout, inside a :class:`~dkpca.storage.fitstore.FitStore`::

    gram/               attrs: fingerprint, kernel, block, dtype, n, complete, diag_sum
      K                 n x n, square chunks, blocks I <= J only
      partial_sums      nb x n: [J, rows of I] = sums over the columns of block (I, J) or its mirror
      diag              n: k(x_i, x_i) as stored
      done              nb x nb uint64 completion markers, one chunk per block: the digest of K's chunk
      sums_done         nb x nb uint64 sums markers, one chunk per block: the digest of its sums chunks
      row_sums          n, float64 (written once every block is done)

A block task writes K's chunk, its sums, then its marker (:class:`GramWriters`);
a rerun trusts the markers and nothing else.  The marker is the digest
(:func:`~dkpca.storage.integrity.digest`, never 0) of the K chunk it vouches
for, XORed with its block's mask (:func:`~dkpca.storage.gramcheck.block_mask`,
from the group's ``marker_key``), and the solver's reads check it: a chunk file
that is corrupt, or intact but not the one written there (another block's, a
stale copy, one copied with its marker from another block or another K of
the same layout), is refused.
Stores whose ``gram`` attributes do not name the digest (``marker``) have
markers that record none (uint8 1) and are checked by CRC only.  The sums
marker (:func:`~dkpca.storage.gramcheck.sums_digest`, written just before the
done marker) does the same for the block's partial sums and diagonal, which a
rerun reduces to the row sums without reading K: a stale copy of them would
centre K wrongly without a word.  Stores built before it have none.

Finding damage and clearing its blocks' markers (repair) is the mix-in
:class:`~dkpca.storage.gramcheck.GramChecks`.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from ..jsonsafe import json_safe
from ..kernels import Kernel, from_dict
from ..linalg.grid import n_blocks
from .chunks import ChunkReader, ChunkWriter, remove_partials
from .diskspace import InsufficientDiskSpace, check_disk_space, fit_footprint, gram_bytes
from .fitstore import FitStore, remove_member
from .gramcheck import (
    GROUP,
    MARKER_KEY,
    SEAL,
    SUMS,
    GramChecks,
    block_mask,
    gram_layout,
    gram_seal,
    marker_key,
    read_done_markers,
    read_marker_key,
    recorded_digests,
    row_sums_record,
    sums_digest,
)
from .integrity import (
    DIGEST,
    check_chunks,
    create_array,
    read_verified,
    read_whole,
    writable,
)
from .lock import Lease
from .paths import exists

__all__ = ["GramInfo", "GramStore", "GramWriters", "gram_bytes", "fit_footprint", "InsufficientDiskSpace",
           "check_disk_space", "lost_gram", "probe_array", "read_done_markers", "recorded_digests",
           "unreadable_gram"]


def _create_K(group: zarr.Group, shape: tuple[int, int], block: int, dtype: Any) -> zarr.Array:
    """K's array: square chunks, uncompressed (the raw chunk path reads and writes it directly)."""
    return create_array(group, "K", shape=shape, chunks=(block, block), dtype=dtype, fill_value=0.0)


def _create_arrays(g: zarr.Group, n: int, block: int, dtype: Any) -> None:
    """The Gram arrays for ``n`` rows in tiles of ``block`` that ``g`` lacks (all of them, for a new group)."""
    for name, (shape, chunks) in gram_layout(n, block).items():
        if name in g:
            continue
        if name == "K":
            _create_K(g, shape, block, dtype)
        else:
            kind = dtype if name == "diag" else "uint64" if name in ("done", SUMS) else "float64"
            create_array(g, name, shape=shape, chunks=chunks, dtype=kind, fill_value=0)


def probe_array(directory: str, edge: int, dtype: Any, count: int = 1) -> tuple[str, zarr.Array]:
    """An array of ``count`` chunks (one column of them) laid out exactly like K, in a new store under ``directory``.

    Planning times the Gram build's and the operator's own chunk I/O on it,
    on the store's filesystem, without knowing K's layout; ``count``: a chunk
    for each thread that writes at once (one array's metadata, not one each).
    """
    path = f"{directory}/probe.zarr"
    group = zarr.open_group(path, mode="w").create_group(GROUP)
    return path, _create_K(group, (count * edge, edge), edge, dtype)


@dataclass
class GramInfo:
    """A complete Gram store and the centering statistics built with it.

    Attributes
    ----------
    store : FitStore
    n, block : int
        Matrix size and square chunk edge.
    dtype : numpy.dtype
        Storage precision of K.
    kernel : Kernel
        The (resolved) kernel K was built with.
    row_sums : ndarray of shape (n,)
        ``K @ 1`` of the stored (rounded) K, float64.
    diag_sum : float
        ``trace(K)``.
    reused_blocks, computed_blocks : int
        Blocks found complete in the store vs evaluated by the build.
    """

    store: FitStore
    n: int
    block: int
    dtype: np.dtype
    kernel: Kernel
    row_sums: np.ndarray
    diag_sum: float
    reused_blocks: int = 0
    computed_blocks: int = 0
    build_seconds: float = 0.0
    probe_product: np.ndarray | None = None
    digests: np.ndarray | None = None

    def expected_digest(self, I: int, J: int) -> int | None:
        """The digest recorded for K's chunk ``(I, J)`` when it was built (None if unrecorded)."""
        return None if self.digests is None else int(self.digests[I, J]) or None

    @property
    def n_blocks(self) -> int:
        return n_blocks(self.n, self.block)

    def K(self) -> zarr.Array:
        """K as a read-only zarr array (only blocks I <= J hold data)."""
        return zarr.open_array(self.store.path, path=f"{GROUP}/K", mode="r")

    def reader(self) -> ChunkReader:
        """Reader of K's blocks (resolved once; tasks carry it)."""
        return ChunkReader.of(self.store.path, self.K())


@dataclass(frozen=True)
class GramWriters:
    """What one block task writes, in the order that makes a rerun safe; tasks carry it."""

    K: ChunkWriter
    partial_sums: ChunkWriter
    diag: ChunkWriter
    done: ChunkWriter
    #: the sums markers' writer (None: a store built before they were recorded)
    sums: ChunkWriter | None = None
    #: the fit's hold on the store, checked before the block's first write and before its marker
    lease: Lease | None = None
    #: the store's marker key (:func:`~dkpca.storage.gramcheck.block_mask`; None: a store created before it)
    key: int | None = None

    def _fence(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def write_block(self, I: int, J: int, blk: np.ndarray, row_sums: np.ndarray, col_sums: np.ndarray | None,
                    visit: Any = None, check: Any = None) -> None:
        """K's chunk (with ``visit`` filling the sums strip by strip), the sums, then the marker.

        ``check()``, if given, runs once the sums are known and may raise:
        the block then gets no sums and no marker.  The marker goes last: only
        a block whose data and sums are all on disk is ever trusted by a rerun.
        A task whose fit no longer holds the store (``lease``) writes nothing
        and raises :class:`~dkpca.storage.LeaseLostError`; one that loses it
        while writing gets no marker.
        """
        self._fence()
        digest = self.K.write((I, J), blk, visit=visit)
        if check is not None:
            check()
        self._fence()
        first = self.partial_sums.write((J, I), row_sums[None])
        if I != J:
            second = self.partial_sums.write((I, J), col_sums[None])
        else:
            second = self.diag.write((I,), np.ascontiguousarray(np.diagonal(blk)))
        mask = block_mask(self.key, I, J)
        if self.sums is not None:
            self.sums.write((I, J), np.full((1, 1), sums_digest(first, second) ^ mask, np.uint64))
        if self.done.dtype == "uint8":  # a store built before markers recorded digests
            self.done.write((I, J), np.ones((1, 1), np.uint8))
        else:
            self.done.write((I, J), np.full((1, 1), digest ^ mask, np.uint64))


def _recorded(root: zarr.Group) -> dict | None:
    """K's record (its group's attributes); None where the store holds no K or the record cannot be read (a
    ``zarr.json`` cut short or garbled: K's record lost, and a fit builds K anew)."""
    try:
        return dict(root[GROUP].attrs) if GROUP in root else None
    except ValueError:  # json's and UTF-8's decoding errors
        return None


def unreadable_gram(root: zarr.Group) -> str | None:
    """Why K's metadata cannot be read (a ``zarr.json`` cut short or garbled), or None: readable, or no K."""
    try:
        if GROUP in root:
            with warnings.catch_warnings():  # an array without zarr.json: zarr's words; prepare says it in dkpca's
                warnings.filterwarnings("ignore", "Object at .* is not recognized", UserWarning)
                list(root[GROUP].members())
    except ValueError as exc:  # json's and UTF-8's decoding errors
        return f"the Gram matrix's metadata ({GROUP}/zarr.json or an array's under it) is unreadable ({exc})"
    return None


def lost_gram(store: FitStore, root: zarr.Group) -> str | None:
    """Why the store's K has lost its record -- its metadata unreadable (:func:`unreadable_gram`), or the group's
    ``zarr.json`` missing over keys under ``gram/`` (a kill, a deletion) -- or None: K is built anew, its keys go."""
    if (why := unreadable_gram(root)) is not None:
        return why
    if GROUP not in root and exists(f"{store.path}/{GROUP}"):
        return f"the Gram matrix's record ({GROUP}/zarr.json) is missing"
    return None


class GramStore(GramChecks):
    """The ``gram/`` group of a store."""

    def __init__(self, store: FitStore) -> None:
        self.store = store

    @staticmethod
    def describe_mismatch(attrs: dict, want: dict, keys: tuple[str, ...] = ("fingerprint", "kernel", "block",
                                                                             "dtype")) -> str:
        """What differs between a stored K's attributes and ``want`` (those of ``keys``), in words; "" if nothing."""
        diffs = []
        for key in keys:
            if attrs.get(key) != want[key]:
                label = {"fingerprint": "data X"}.get(key, key)
                diffs.append(f"{label} differs (store: {attrs.get(key)!r}, now: {want[key]!r})")
        return "; ".join(diffs)

    def refuse_other(self, want: dict[str, Any], attrs: dict | None = None) -> None:
        """Raise ``ValueError`` where the store holds K of another fit than ``want`` (``attrs``: its Gram group's,
        read here when not given): what :meth:`prepare` refuses without ``overwrite``, which a fit asks before
        it says anything (a kernel changed on the same data is refused as its first and only line)."""
        if attrs is None:
            attrs = _recorded(self.store.open())
        mismatch = self.describe_mismatch(attrs, want) if attrs is not None else ""
        if mismatch:
            raise ValueError(
                f"store {self.store.path!r} holds a Gram matrix that does not match this fit: {mismatch}. "
                "Pass overwrite=True (CLI: --overwrite) to rebuild it, or choose another store."
            )

    def prepare(self, want: dict[str, Any], overwrite: bool, needed: int | None = None) -> np.ndarray:
        """Open or create the Gram arrays for ``want`` (fingerprint, kernel, block, dtype, n); the done markers.

        Raises ``ValueError`` if the store holds K of another fit and not
        ``overwrite``; with ``overwrite`` (or a mismatch allowed by it) the old
        K and the model derived from it are removed first.  ``needed`` is the
        whole footprint checked against the free space (default: K alone).
        """
        root = self.store.open_for_write()
        n, block, dtype = want["n"], want["block"], np.dtype(want["dtype"])
        nb = n_blocks(n, block)
        if (why := lost_gram(self.store, root)) is not None:  # its arrays (maybe of other rows: an update's) go
            logging.getLogger("dkpca").warning("store %s: %s; K is built anew", self.store.path, why)
            self.store.remove_model()  # derived from K: withdrawn first, as overwrite does
            remove_member(root, GROUP)
        if GROUP in root:
            attrs = dict(root[GROUP].attrs)
            if not overwrite:
                self.refuse_other(want, attrs)
                g = root[GROUP]
                if missing := [f"{GROUP}/{name}" for name in gram_layout(n, block) if name != SUMS and name not in g]:
                    # killed while the arrays were being created (in the layout's order, before any block could
                    # be built), or an array's metadata lost: finish it.  Older stores lack only the sums markers,
                    # and keep lacking them
                    logging.getLogger("dkpca").warning("store %s: the Gram store lacks %s (a fit killed while creating "
                                                       "it, or its zarr.json lost); every block is computed",
                                                       self.store.path, ", ".join(missing))
                    _create_arrays(g, n, block, dtype)
                    return np.zeros((nb, nb), dtype=np.uint64)
                if not self.store.is_url:
                    remove_partials(os.path.join(self.store.path, GROUP))
                return self.mend_sums(g)
            self.store.remove_model()  # derived from K: withdrawn first, so readers never pair it with a new K
            remove_member(root, GROUP)
        check_disk_space(self.store, needed if needed is not None else gram_bytes(n, block, dtype))
        # Attributes with the group, in one write: an interrupted build is then recognisable as ours.
        attrs = json_safe({**want, "complete": False, "marker": DIGEST, MARKER_KEY: marker_key(json_safe(want))})
        g = root.create_group(GROUP, attributes={**attrs, SEAL: gram_seal(attrs)})
        _create_arrays(g, n, block, dtype)
        return np.zeros((nb, nb), dtype=np.uint64)

    def writers(self, direct: bool, lease: Lease | None = None) -> GramWriters:
        """The block tasks' writers; with the fit's ``lease``, fenced by it (:class:`GramWriters`)."""
        g = self.store.open(mode="r+")[GROUP]
        path = self.store.path
        return GramWriters(K=ChunkWriter.of(path, g["K"], direct=direct),
                           partial_sums=ChunkWriter.of(path, g["partial_sums"]),
                           diag=ChunkWriter.of(path, g["diag"]), done=ChunkWriter.of(path, g["done"]),
                           sums=ChunkWriter.of(path, g[SUMS]) if SUMS in g else None, lease=lease,
                           key=read_marker_key(g.attrs))

    def finish(self) -> None:
        """Reduce the per-block sums to row sums and trace, and mark the store complete (once)."""
        g = self.store.open(mode="r+")[GROUP]
        if g.attrs.get("complete"):
            return
        # every sum is verified as read: a damaged one raises CorruptChunkError, which
        # names the chunk, and the caller clears its block's marker (repair)
        n, block = int(g.attrs["n"]), int(g.attrs["block"])
        ps = g["partial_sums"]
        check_chunks(ps)
        row_sums = np.zeros(n, dtype=np.float64)
        # On a local filesystem the chunk files are read directly (size and CRC-32C checked): a fit's serial
        # step, which zarr took 0.29 s for at n = 100,000 (625 chunks) and the files 0.02-0.06 s (2-core AMD
        # EPYC, 2026-11-27); elsewhere zarr reads a column of chunks at a time, concurrently
        reader = ChunkReader.of(self.store.path, ps)
        for C, s in enumerate(range(0, n, block)):  # a column of chunks at a time: memory O(n), not O(n x blocks)
            e = min(s + block, n)
            if reader.raw_dir is None:
                row_sums[s:e] = read_verified(ps, (slice(None), slice(s, e))).sum(axis=0)
            else:
                for R in range(ps.shape[0]):  # in row order, as numpy's sum over the column adds them
                    row_sums[s:e] += reader.read(R, C, (1, e - s), purpose="partial-sums")[0]
        writable(g["row_sums"])[:] = row_sums  # every chunk written, zero row sums too
        diag_sum = float(np.sum(read_whole(g["diag"]), dtype=np.float64))
        g.attrs.update({"complete": True, "diag_sum": diag_sum, **row_sums_record(row_sums, block),
                        SEAL: gram_seal({"kernel": g.attrs["kernel"], "diag_sum": diag_sum})})

    def recorded_dtype(self) -> str | None:
        """The precision of the K this store holds (``float32``/``float64``), or None (no store, no K, unreadable).

        Read back, so anything but those two names is None: the build's own
        checks then decide about that K.
        """
        if self.store.is_new():
            return None
        try:
            dtype = (_recorded(self.store.open()) or {}).get("dtype")
        except (OSError, ValueError, TypeError, KeyError):  # not a store, or metadata zarr cannot read
            return None
        return dtype if dtype in ("float32", "float64") else None

    def recorded_kernel(self) -> dict | None:
        """The kernel spec K was built with, or None when the store holds no Gram matrix (or none readable)."""
        return (_recorded(self.store.open()) or {}).get("kernel")

    def open(self) -> GramInfo:
        """A complete Gram store (``ValueError`` if it is incomplete)."""
        g = self.store.open()[GROUP]
        a = dict(g.attrs)
        if not a.get("complete"):
            raise ValueError(f"the Gram matrix in {self.store.path!r} is incomplete; rerun the fit to finish it.")
        self.check_layout(g)
        row_sums = self.read_row_sums(g)
        return GramInfo(store=self.store, n=a["n"], block=a["block"], dtype=np.dtype(a["dtype"]),
                        kernel=from_dict(a["kernel"]), row_sums=row_sums,
                        diag_sum=float(a["diag_sum"]), digests=recorded_digests(g, read_done_markers(g["done"])))
