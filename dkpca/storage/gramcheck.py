"""The Gram store's checks: its layout, its done markers, damaged blocks found and their markers cleared.

The solver reads K, never the sums or the diagonal once the row sums are
reduced; so a rerun that reuses the store checks those (small: nb x n and n
values) -- their CRC, and their digests against the blocks' sums markers
(:func:`sums_digest`) -- and recomputes the blocks whose sums are damaged
(:meth:`GramChecks.mend_sums`); the row sums are checked against the digests
recorded when they were reduced (:meth:`GramChecks.read_row_sums`).  Every array's shape is checked against
the attributes before any chunk grid is walked (:meth:`GramChecks.check_layout`).
A chunk found damaged while solving clears the markers of every damaged block
(:meth:`GramChecks.repair`), so one rebuild mends them all.

:class:`GramChecks` is a mix-in of :class:`~dkpca.storage.gramstore.GramStore`,
which provides ``store`` (the :class:`~dkpca.storage.fitstore.FitStore`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np
import zarr

from ..linalg.grid import block_bounds, n_blocks
from .chunks import ChunkReader
from .integrity import (
    DIGEST,
    CorruptChunkError,
    check_layout,
    chunk_digests,
    decode_digests,
    digest,
    encode_digests,
    json_digest,
    padded_digest,
    read_whole,
    store_name,
    writable,
)

__all__ = ["GROUP", "MARKER_KEY", "REBUILD", "SEAL", "SUMS", "GramChecks", "block_mask", "gram_layout", "gram_seal",
           "marker_key", "read_done_markers", "recorded_digests", "row_sums_record", "sums_digest"]

GROUP = "gram"

logger = logging.getLogger("dkpca")

#: what to rerun when the Gram store's layout (its attributes or an array's metadata) is damaged
REBUILD = "rerun the fit with overwrite=True (CLI: --overwrite) to rebuild the Gram matrix"


#: the array of the blocks' sums markers: at [I, J] (I <= J) :func:`sums_digest` of the sums block (I, J) wrote
#: (absent from stores built before they were recorded, whose sums are checked by CRC only)
SUMS = "sums_done"


def gram_layout(n: int, block: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every Gram array's shape and chunks for ``n`` rows in tiles of ``block``."""
    nb = n_blocks(n, block)
    return {"K": ((n, n), (block, block)), "partial_sums": ((nb, n), (1, block)), "diag": ((n,), (block,)),
            "done": ((nb, nb), (1, 1)), SUMS: ((nb, nb), (1, 1)), "row_sums": ((n,), (block,))}


def sums_digest(first: int, second: int) -> int:
    """A block's sums marker: the digest of its two sums chunks' digests (partial sums ``(J, I)``, then
    ``(I, J)`` or, on the diagonal, its diag chunk), as :meth:`~dkpca.storage.chunks.ChunkWriter.write` returned
    them.  Their CRC cannot tell a stale or foreign copy from the chunk written there; this can."""
    return digest(np.array([first, second], dtype=np.uint64))


#: the Gram group's attribute sealing what a fit takes from its attributes as they are (:func:`gram_seal`)
SEAL = "seal"


def gram_seal(attrs: dict[str, Any]) -> str:
    """The digest of the kernel K was built with and of trace(K) (``diag_sum``, once reduced), as recorded: an
    edited one would be used without a word (the tile, precision and size are checked against the arrays)."""
    return json_digest({key: attrs.get(key) for key in ("kernel", "diag_sum")})


#: the attribute recording the digest of each chunk of the row sums, written with ``complete``
ROW_SUMS_DIGESTS = "row_sums_digests"


def _row_sums_digests(row_sums: np.ndarray, block: int) -> list[int]:
    """The digest of each stored chunk of the row sums (zero-padded at the end, as zarr stores it)."""
    return [padded_digest(row_sums[s:s + block], (block,)) for s in range(0, row_sums.shape[0], block)]


def row_sums_record(row_sums: np.ndarray, block: int) -> dict[str, list[str]]:
    """The Gram group's attribute that :meth:`GramChecks.read_row_sums` checks the row sums by."""
    return {ROW_SUMS_DIGESTS: encode_digests(_row_sums_digests(row_sums, block))}


#: the Gram group's attribute binding its blocks' markers to their place: 16 hex digits, the digest of what the
#: group was created for (data fingerprint, kernel, tile, precision, rows; kept as K grows), from which each
#: block's mask (:func:`block_mask`) is derived.  A marker is its chunk's digest XOR its block's mask, so a chunk
#: copied with its marker from another block, or from a store of another K of the same layout, no longer matches
#: (it did: the digest alone named the bytes, not where they belong) -- while a store copied whole, or a block
#: copied from another store of the same fit, still does.  Stores created before it have none (markers unmasked).
MARKER_KEY = "marker_key"


def marker_key(want: dict[str, Any]) -> str:
    """The :data:`MARKER_KEY` of a Gram group created for ``want`` (fingerprint, kernel, block, dtype, n)."""
    return json_digest(want)


def read_marker_key(attrs: dict[str, Any]) -> int | None:
    """The Gram group's marker key as a number (None: a store created before it); ``ValueError`` if damaged."""
    key = attrs.get(MARKER_KEY)
    if key is None:
        return None
    try:  # written as the recorded digests are (encode_digests)
        return decode_digests([key])[0]
    except ValueError:
        raise ValueError(f"its {MARKER_KEY} attribute {key!r} is not 16 hex digits") from None


def block_mask(key: int | None, I: int, J: int) -> int:
    """What block ``(I, J)``'s done and sums markers are XORed with (0 without a key): even, so a marker -- a
    digest, whose low bit is set -- is never 0, which means "not done"."""
    if key is None:
        return 0
    return digest(np.array([key, I, J], dtype=np.uint64)) & ~1


def unmasked(markers: np.ndarray, key: int | None) -> np.ndarray:
    """The digests ``markers`` record (masked by :func:`block_mask`), 0 where a block has none."""
    if key is None:
        return markers
    out = markers.copy()
    for I, J in zip(*np.nonzero(markers), strict=True):
        out[I, J] ^= np.uint64(block_mask(key, int(I), int(J)))
    return out


def recorded_digests(gram: zarr.Group, markers: np.ndarray) -> np.ndarray | None:
    """The K chunks' digests the ``markers`` record (0: not done), or None for a store whose markers record none."""
    return unmasked(markers, read_marker_key(gram.attrs)) if gram.attrs.get("marker") == DIGEST else None


def read_done_markers(done: zarr.Array) -> np.ndarray:
    """The done markers (uint64, 0: not done), with every unreadable one counted as not done.

    Nothing is fsynced, so a node crash can leave a renamed marker file
    empty: zarr then fails to decode it, and one such chunk would make the
    whole store unusable.  Markers are then read one by one and any that
    cannot be read is 0 (its block is recomputed and the marker rewritten).

    On a local filesystem the upper triangle's marker files are read directly
    (:class:`~dkpca.storage.chunks.ChunkReader`: size and CRC-32C checked),
    a fit's serial step: zarr took 0.19 s for the 625 markers of n = 100,000
    and 0.73 s for 3,600 (2-core AMD EPYC, 2026-11-27), growing as the
    blocks; elsewhere zarr reads them, concurrently.
    """
    reader = ChunkReader.of(store_name(done), done)
    files = reader.raw_dir is not None
    if not files:  # not local files: zarr reads them all at once, concurrently
        with contextlib.suppress(Exception):  # a damaged chunk: each one read on its own below
            return done[...].astype(np.uint64)
    out = np.zeros(done.shape, dtype=np.uint64)
    for I in range(done.shape[0]):
        for J in range(I, done.shape[1]):
            with contextlib.suppress(Exception):  # the marker file itself where there is one, else through zarr
                out[I, J] = reader.read(I, J, (1, 1), purpose="done-marker")[0, 0] if files else done[I, J]
    return out


class GramChecks:
    """Layout checks, damage found, markers cleared: the Gram store's part that reads what may be damaged."""

    def check_layout(self, g: zarr.Group | None = None) -> None:
        """Raise :class:`CorruptChunkError` unless every Gram array has the shape and chunks its attributes record.

        ``n`` must be the rows of the data the store's fingerprint records;
        nothing walks a chunk grid (or allocates the markers) before this.
        """
        g = self.store.open()[GROUP] if g is None else g
        a = dict(g.attrs)
        if SEAL in a and a[SEAL] != gram_seal(a):  # stores written before it have none
            raise CorruptChunkError(self.store.path, GROUP, None, "has attributes that were edited (the kernel or "
                                    f"trace recorded with K no longer matches its seal); {REBUILD}")
        try:
            read_marker_key(a)
        except ValueError as exc:
            raise CorruptChunkError(self.store.path, GROUP, None, f"{exc}: its attributes are damaged or were "
                                    f"edited; {REBUILD}") from None
        n, block = a.get("n"), a.get("block")
        shape = a["fingerprint"].get("shape") if isinstance(a.get("fingerprint"), dict) else None
        rows = shape[0] if isinstance(shape, list) and shape else n
        if type(n) is not int or type(block) is not int or n < 1 or block < 1 or rows != n:
            raise CorruptChunkError(self.store.path, GROUP, None,
                                    f"records n = {n!r} and block = {block!r} for data of {rows!r} rows: its "
                                    f"attributes are damaged or were edited; {REBUILD}")
        layout = gram_layout(n, block)
        for name, (shape, chunks) in layout.items():
            if name in g:
                check_layout(g[name], shape, chunks, REBUILD)

    def read_row_sums(self, g: zarr.Group) -> np.ndarray:
        """The reduced row sums, every chunk present and verified: its CRC, and its digest where the store
        records them (:func:`row_sums_record`) -- a CRC cannot tell a stale or foreign copy, which would centre K
        wrongly without a word.  A chunk that fails raises :class:`CorruptChunkError` naming it, and a rerun
        reduces them again from the blocks' sums (:meth:`repair`)."""
        row_sums = read_whole(g["row_sums"])
        if ROW_SUMS_DIGESTS not in g.attrs:  # stores reduced before the digests were recorded: CRC only
            return row_sums
        try:
            want = decode_digests(g.attrs[ROW_SUMS_DIGESTS])
        except ValueError:
            want = ()
        got = _row_sums_digests(row_sums, int(g.attrs["block"]))
        where, why = f"{GROUP}/row_sums", "not the row sums reduced from this store's blocks (a stale or foreign copy)"
        if len(want) != len(got):
            raise CorruptChunkError(self.store.path, where, (0,), "unconfirmed: the digests recorded of the row "
                                    "sums are damaged or were edited")
        for C, (a, b) in enumerate(zip(got, want, strict=True)):
            if a != b:
                raise CorruptChunkError(self.store.path, where, (C,), why)
        return row_sums

    def damaged_sums(self, g: zarr.Group, markers: np.ndarray) -> list[tuple[int, int, CorruptChunkError]]:
        """Built blocks (``markers``) whose partial sums or diagonal chunk is missing, fails its checksum, or is
        not the one the block wrote (against its sums marker, where the store records them)."""
        found: dict[tuple[int, int], CorruptChunkError] = {}
        digests = {}
        for name in ("partial_sums", "diag"):
            digests[name], bad = chunk_digests(g[name])
            for c, exc in bad.items():
                block = (min(c), max(c))  # partial_sums (J, I) or (I, J) of block (I, J); diag (I,): (I, I)
                if markers[block]:
                    found.setdefault(block, exc)
        if SUMS in g:  # stores built before the sums markers: CRC only
            recorded = unmasked(read_done_markers(g[SUMS]), read_marker_key(g.attrs))
            for I, J in zip(*np.nonzero(np.triu(markers)), strict=True):
                I, J = int(I), int(J)
                parts = (digests["partial_sums"].get((J, I)),
                         digests["partial_sums"].get((I, J)) if I != J else digests["diag"].get((I,)))
                if (I, J) in found or None in parts or sums_digest(*parts) == recorded[I, J]:
                    continue
                why = (f"unconfirmed: block ({I}, {J}) recorded no sums marker" if not recorded[I, J] else
                       f"not the sums block ({I}, {J}) wrote (a stale or foreign copy)")
                found[I, J] = CorruptChunkError(store_name(g[SUMS]), f"{GROUP}/partial_sums", (J, I), why)
        return [(I, J, exc) for (I, J), exc in sorted(found.items())]

    def mend_sums(self, g: zarr.Group) -> np.ndarray:
        """The done markers of a store a rerun reuses, cleared for blocks whose sums or diagonal are damaged.

        The solver never reads those once the row sums are reduced, so
        without this a rerun would reuse every block and leave them damaged
        (while ``dkpca verify`` says a rerun recomputes them).
        """
        self.check_layout(g)
        markers = read_done_markers(g["done"])
        bad = self.damaged_sums(g, markers)
        if bad:
            logger.warning("%s; recomputing the %d Gram block(s) whose sums are damaged", bad[0][2], len(bad))
            done = writable(g["done"])
            for I, J, _ in bad:
                done[I, J] = 0
                markers[I, J] = 0
            g.attrs.update({"complete": False})  # the row sums are reduced again
        return markers

    def damaged_blocks(self) -> list[tuple[int, int, CorruptChunkError]]:
        """Every built block whose K chunk, sums or diagonal is missing, truncated, corrupt or not its own.

        One read of the built part of K (each chunk verified against its
        marker's checksum), one chunk in memory at a time; the sums as
        :meth:`damaged_sums` reads them.
        """
        g = self.store.open()[GROUP]
        self.check_layout(g)
        bounds = block_bounds(int(g.attrs["n"]), int(g.attrs["block"]))
        markers = read_done_markers(g["done"])
        digests = recorded_digests(g, markers)
        reader = ChunkReader.of(self.store.path, g["K"])
        bad = {}
        for I, (i0, i1) in enumerate(bounds):
            for J in range(I, len(bounds)):
                if not markers[I, J]:
                    continue
                j0, j1 = bounds[J]
                try:
                    # the digest stands in for the CRC on the solver's path: here both, in one read
                    reader.read(I, J, (i1 - i0, j1 - j0), purpose="verify",
                                expect=None if digests is None else int(digests[I, J]), both=True)
                except CorruptChunkError as exc:
                    bad[I, J] = exc
        for I, J, exc in self.damaged_sums(g, markers):
            bad.setdefault((I, J), exc)
        return [(I, J, exc) for (I, J), exc in sorted(bad.items())]

    def repair(self, error: CorruptChunkError) -> int:
        """Clear the done markers of every damaged block, ``error``'s first; how many (0: not a Gram chunk).

        ``error`` is what a read of the Gram store raised; the others are
        found by :meth:`damaged_blocks`, so one rebuild mends them all.  The
        next build recomputes those blocks (K's chunk, its sums, its marker)
        and the row sums; nothing else in the store changes.
        """
        name = error.array.rsplit("/", 1)[-1]
        if error.array != f"{GROUP}/{name}" or name not in ("K", "partial_sums", "diag", "done", "row_sums"):
            return 0
        g = self.store.open_for_write()[GROUP]
        c = error.chunk  # K, partial_sums and done chunks are (I, J) or its mirror; diag is (I,); row_sums no block
        if not c:  # the array's metadata, not a chunk: no block to recompute (check_layout names the fix)
            return 0
        blocks = set() if name == "row_sums" else {(min(c), max(c))}
        blocks |= {(I, J) for I, J, _ in self.damaged_blocks()}
        g.attrs.update({"complete": False})  # the row sums are reduced again
        done = writable(g["done"])
        for block in blocks:
            done[block] = 0
        return max(1, len(blocks))
