"""The Gram store's checks: its layout, its done markers, damaged blocks found and their markers cleared.

The solver reads K, never the sums or the diagonal once the row sums are
reduced; so a rerun that reuses the store checks those (small: nb x n and n
values) and recomputes the blocks whose sums are damaged
(:meth:`GramChecks.mend_sums`).  Every array's shape is checked against
the attributes before any chunk grid is walked (:meth:`GramChecks.check_layout`).
A chunk found damaged while solving clears the markers of every damaged block
(:meth:`GramChecks.repair`), so one rebuild mends them all.

:class:`GramChecks` is a mix-in of :class:`~dkpca.storage.gramstore.GramStore`,
which provides ``store`` (the :class:`~dkpca.storage.fitstore.FitStore`).
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import zarr

from ..linalg.grid import block_bounds, n_blocks
from .chunks import ChunkReader
from .integrity import DIGEST, CorruptChunkError, check_layout, damaged_chunks, store_name, writable

__all__ = ["GROUP", "REBUILD", "GramChecks", "read_done_markers", "recorded_digests"]

GROUP = "gram"

logger = logging.getLogger("dkpca")

#: what to rerun when the Gram store's layout (its attributes or an array's metadata) is damaged
REBUILD = "rerun the fit with overwrite=True (CLI: --overwrite) to rebuild the Gram matrix"


def recorded_digests(gram: zarr.Group, markers: np.ndarray) -> np.ndarray | None:
    """The K chunks' digests the ``markers`` record (0: not done), or None for a store whose markers record none."""
    return markers if gram.attrs.get("marker") == DIGEST else None


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
        n, block = a.get("n"), a.get("block")
        shape = a["fingerprint"].get("shape") if isinstance(a.get("fingerprint"), dict) else None
        rows = shape[0] if isinstance(shape, list) and shape else n
        if type(n) is not int or type(block) is not int or n < 1 or block < 1 or rows != n:
            raise CorruptChunkError(self.store.path, GROUP, None,
                                    f"records n = {n!r} and block = {block!r} for data of {rows!r} rows: its "
                                    f"attributes are damaged or were edited; {REBUILD}")
        nb = n_blocks(n, block)
        layout = {"K": ((n, n), (block, block)), "partial_sums": ((nb, n), (1, block)), "diag": ((n,), (block,)),
                  "done": ((nb, nb), (1, 1)), "row_sums": ((n,), (block,))}
        for name, (shape, chunks) in layout.items():
            if name in g:
                check_layout(g[name], shape, chunks, REBUILD)

    def damaged_sums(self, g: zarr.Group, markers: np.ndarray) -> list[tuple[int, int, CorruptChunkError]]:
        """Built blocks (``markers``) whose partial sums or diagonal chunk is missing or fails its checksum."""
        found: dict[tuple[int, int], CorruptChunkError] = {}
        for arr in (g["partial_sums"], g["diag"]):
            for c, exc in damaged_chunks(arr).items():
                block = (min(c), max(c))  # partial_sums (J, I) or (I, J) of block (I, J); diag (I,): (I, I)
                if markers[block]:
                    found.setdefault(block, exc)
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
