"""An update's store side: whether a fit grows the stored one (:func:`find_growth`), and the Gram store grown.

:func:`find_growth` reads only attributes: the data copy's rows, earlier row counts and update under way, the Gram
store's kernel, tile and precision, the model's rows.  It is what ``dkpca.fit`` and ``dkpca.plan`` both ask.

The Gram store grown by new rows: the stored grid kept, only blocks touching new rows to compute.

K's tiles keep their edge: new rows fill the last, partial row block and then new ones.  Blocks wholly in the
old rows keep their chunks, sums and done markers; the blocks of the row block the old end falls in (partial, when
``n_old`` is not a multiple of the tile) get their markers cleared first, so the build recomputes them; new blocks
have no marker yet.  The build (:func:`dkpca.gram.build_gram`) then computes exactly the blocks without a marker,
and its reduction recomputes the row sums and trace from the per-block sums.

Crash safety: every step is idempotent and the ``growing`` attribute (the target rows and fingerprint), written
first and cleared last, says a rerun (or ``dkpca verify``) found a store caught mid-step; the same update then
does it again.  Nothing here deletes or rewrites a chunk of the old rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import zarr

from ..execution import compute, for_the_client
from ..linalg.grid import default_block_size, n_blocks
from .datacopy import DATA, DataExtent
from .fitstore import FitStore
from .gramcheck import GROUP, gram_layout, read_done_markers
from .gramstore import GramStore, lost_gram, unreadable_gram
from .integrity import CorruptChunkError, block_checksum, rows_checksum, writable
from .slots import remove_member

__all__ = ["Growth", "built_entries", "damaged_gram_of_prefix", "find_growth", "gram_of_prefix", "grow_gram",
           "refit_conflicts", "retile", "retire_gram", "stored_entries", "stored_tile", "update_blocks"]


@dataclass(frozen=True)
class Growth:
    """A fit of ``n_new`` rows that updates the store's fit of its first ``n_old``.

    ``block``: the stored tile edge (the update keeps it); ``copy_data``: the
    data copy still holds only the old rows (or is mid-update); ``model_rows``: the rows of the store's current
    model (its eigenvectors start the solver when they are ``n_old``); ``gram_rows``: the rows of the store's K
    that the update grows (None: no K to grow) -- ``n_old``, or fewer where an update since K was built did not
    store it (``gram="recompute"``, ``"memory"``, ARPACK): K then grows from its own rows.
    """

    n_old: int
    n_new: int
    block: int
    copy_data: bool
    model_rows: int | None
    gram_rows: int | None = None
    #: the store's tile where the update re-tiles K (:func:`retile`): K is built anew at ``block``
    retiled: int | None = None
    #: the store's precision of K where the update builds K anew in another: ``dtype="auto"`` found float32 short
    #: of tol on the grown data (:func:`dkpca.planning.growthplan.growth_request`), as a fresh fit would
    retyped: str | None = None

    @property
    def gram(self) -> bool:
        """The store holds K to grow."""
        return self.gram_rows is not None

    @property
    def rebuilt(self) -> bool:
        """K is built anew: in another tile (:attr:`retiled`) or precision (:attr:`retyped`)."""
        return self.retiled is not None or self.retyped is not None

    def gram_blocks(self) -> tuple[int, int, int]:
        """:func:`update_blocks` of K's growth: from its own rows (``gram_rows``), else from ``n_old``; every block
        where K is built anew."""
        if self.rebuilt:
            return update_blocks(0, self.n_new, self.block)
        return update_blocks(self.n_old if self.gram_rows is None else self.gram_rows, self.n_new, self.block)


#: row blocks of K above which an update re-tiles a tile that is too small (:func:`retile`): 136 block tasks a
#: pass, ~40 ms of dask's threaded scheduler at its measured 0.3 ms a task; fewer cost nothing worth a rebuild
RETILE_ROW_BLOCKS = 16


def retile(tile: int, n: int, chunk_size: int | None) -> int:
    """The tile an update of ``n`` rows builds K in, where the store's is ``tile``: ``tile``, unless it is below
    half of a fresh fit's (``default_block_size(n)``; with ``chunk_size``, below it: a tile a first fit of fewer
    rows clipped) and cuts K into more than :data:`RETILE_ROW_BLOCKS` row blocks.  A first fit of 100 rows has a
    tile of 100, and an update to 8,000 rows kept it: 3,240 blocks a pass where a fresh fit has 3 (25.4 s against
    a fresh fit's 1.75 s; re-tiled 2.0 s: 2-core machine, 2026-11-28).  A tile half a fresh fit's or more is
    kept (4 times the blocks at most).  A function of the tile and rows alone: a rerun decides as the killed update.
    """
    want = default_block_size(n) if chunk_size is None else min(chunk_size, n)
    small = 2 * tile < want if chunk_size is None else tile < want
    return want if small and n_blocks(n, tile) > RETILE_ROW_BLOCKS else tile


def _recorded(store: FitStore | None) -> tuple[DataExtent | None, dict | None]:
    """The store's data copy (its extent) and K's attributes, each None where absent -- or both None for no store,
    a new one, or one whose records cannot be read (damaged or foreign: the fit's own checks judge it)."""
    if store is None or store.is_new():
        return None, None
    try:
        root = store.open()
        data = store.data_extent() if DATA in root else None
    except CorruptChunkError:  # the copy's array metadata lost or unreadable: its group's record may say its extent
        if (data := _extent_of_record(root)) is None:
            return None, None
    except (ValueError, TypeError, KeyError):
        return None, None
    if unreadable_gram(root) is not None:  # K's record lost: no K to grow; retire_gram removes it, the build warns
        return data, None
    return data, (dict(root[GROUP].attrs) if GROUP in root else None)


def _extent_of_record(root: zarr.Group) -> DataExtent | None:
    """The copy's extent from its group's record alone (fingerprint, the chunk rows it recorded: ``edge``, earlier
    row counts), where ``data/X/zarr.json`` is lost or unreadable; None where the record cannot say (a copy written
    before dkpca recorded ``edge``, an update under way).  The fit's first read of the copy writes the array's
    metadata again (:func:`~.datachunks.remake_meta`), or refuses."""
    try:
        attrs = dict(root[DATA].attrs)
    except (KeyError, ValueError, TypeError):
        return None
    fp, edge = attrs.get("fingerprint"), attrs.get("edge")
    shape = fp.get("shape") if isinstance(fp, dict) else None
    if not (isinstance(shape, list) and len(shape) == 2 and type(edge) is int and edge > 0 and attrs.get("complete")
            and attrs.get("growing") is None and attrs.get("digests")):
        return None
    return DataExtent.of_record(attrs, int(shape[0]), int(shape[1]), edge)


def stored_tile(store: FitStore | None, n: int, d: int) -> int | None:
    """The tile of the store's complete data copy of ``n`` x ``d`` rows (None: none such, or unreadable).

    A refit without ``chunk_size`` keeps it: the data's fingerprint is taken
    per row chunk, so another tile would call the same data different (and
    after an update the stored tile is the old fit's, not the default for n).
    """
    ext = _recorded(store)[0]
    return ext.tile if ext is not None and ext.rows == n and ext.d == d and ext.growing is None and ext.tile else None


def refit_conflicts(store: FitStore | None, n: int, d: int, kernel: dict, dtype: str, block: int) -> list[str]:
    """What a fit (no update) of ``n`` x ``d`` data into ``store`` without ``overwrite`` would refuse, in words,
    read from attributes alone (``dkpca plan`` says it before a job is submitted): a data copy of another
    shape, K of another kernel, precision or tile.  Data of the same shape the fit compares by checksum,
    which reads all of it: not here.  A path that is not a dkpca store (a file, another Zarr group, a directory
    of other files): the fit's own refusal.  Nothing for a new or unreadable store (the fit judges those).
    """
    if store is not None:
        try:
            store.check_target()  # reads only (mode "r"); nothing for a new store
        except ValueError as exc:
            return [f"{exc} (dkpca fit would refuse it)"]
    ext, attrs = _recorded(store)
    fix = "pass overwrite=True (CLI: --overwrite) to replace it, or choose another store"
    if ext is not None and ext.growing is not None and ext.growing.get("to") != n:  # killed while copying rows
        return [f"the store is being updated to {ext.growing.get('to')} rows of data (a killed update): dkpca fit "
                f"would refuse this {n}-row input; rerun that update with the grown data to finish it, or {fix}"]
    if ext is not None and (ext.rows, ext.d) != (n, d):  # refused there first: K's attributes follow from it
        fitted = store.model_rows()
        killed = (f" (an update of its model of {fitted} rows, killed before it finished: rerun it with the "
                  f"{ext.rows}-row data to finish it)" if fitted is not None and fitted < ext.rows else "")
        return [f"the store holds data of {ext.rows} x {ext.d}{killed}: dkpca fit would refuse this {n} x {d} "
                f"input; {fix}"]
    mismatch = GramStore.describe_mismatch(attrs, {"kernel": kernel, "block": block, "dtype": dtype},
                                           ("kernel", "block", "dtype")) if attrs is not None else ""
    return [f"the store's K is of another fit ({mismatch}): dkpca fit would refuse it; {fix}"] if mismatch else []


def find_growth(store: FitStore | None, n: int, d: int, x_dtype: str, kernel: dict, dtype: str | None,
                chunk_size: int | None) -> Growth | None:
    """Whether a fit of ``n`` x ``d`` data (``x_dtype``) into ``store`` is an update of the fit it holds.

    An update: the store's data copy (with recorded digests) holds fewer
    rows than the input, of the same features and type -- or holds the
    input already while K or the model are still of the old rows (a rerun
    after a kill).  Whether the old rows are the input's first rows is
    checked later, chunk by chunk, by digest.  ``dtype`` (None: ``auto``)
    and ``chunk_size`` (None: default) as the user gave them.

    Raises
    ------
    ValueError
        An update whose kernel, precision or tile differs from the store's,
        naming each difference and the fix; grown input of another data type
        than the store's copy, naming both.
    """
    ext, gram = _recorded(store)
    if ext is None:
        return None  # no data copy; the plain path judges a damaged or foreign store, as before
    fp = ext.fingerprint or {}
    if not ext.digested or ext.d != d:
        return None
    if fp.get("dtype") != x_dtype:
        if n > ext.rows:  # more rows of the same features: meant as an update, which the digests cannot check
            raise ValueError(
                f"store {store.path!r} holds {ext.rows} rows of {fp.get('dtype')} data, and this input of "
                f"{n} rows is {x_dtype}: an update checks the old rows by the digests of their stored values, so "
                f"the input must be {fp.get('dtype')} too (e.g. X.astype({fp.get('dtype')!r})). Convert it, or "
                "pass overwrite=True (CLI: --overwrite) to fit from scratch, or choose another store.")
        return None
    model_rows = store.model_rows()
    if ext.growing is not None:
        n_old, copy = ext.growing["from"], True
    elif n > ext.rows:
        n_old, copy = ext.rows, True
    elif n == ext.rows and gram is not None and isinstance(gram.get("n"), int) and gram["n"] < n \
            and (gram["n"] in ext.prefixes or isinstance(gram.get("growing"), dict)):
        n_old, copy = int(gram.get("growing", {}).get("from", gram["n"]) if gram.get("growing") else gram["n"]), False
    elif n == ext.rows and model_rows is not None and model_rows < n and model_rows in ext.prefixes:
        n_old, copy = model_rows, False
    else:
        return None
    if n <= n_old:
        return None
    # K's rows: the data's first rows (a recorded prefix) up to n_old, else K of other rows (the build judges it)
    kn = gram.get("n") if gram is not None else None
    gram_rows = kn if type(kn) is int and (kn == n_old or (kn < n_old and kn in ext.prefixes)) else None
    block = int(gram["block"]) if gram is not None and type(gram.get("block")) is int else ext.tile
    diffs = []
    if gram is not None:
        if gram.get("kernel") != kernel:
            if (store.model_attrs() or {}).get("kernel") == kernel:  # K is not the model's
                raise ValueError(
                    f"store {store.path!r} holds a model of {n_old} rows with this kernel, and a Gram matrix of "
                    f"another one that an earlier fit left (K: {gram.get('kernel')!r}, model and now: {kernel!r}): "
                    "an update grows K, which is not the model's. Pass overwrite=True (CLI: --overwrite) to fit "
                    "from scratch, or choose another store.")
            diffs.append(f"the kernel differs (store: {gram.get('kernel')!r}, now: {kernel!r})")
        if dtype is not None and gram.get("dtype") != np.dtype(dtype).name:
            diffs.append(f"the dtype differs (store: {gram.get('dtype')!r}, now: {np.dtype(dtype).name!r})")
    # a tile equal to a row count the store had, below the chunk size now asked: that size clipped to the data
    clipped = chunk_size is not None and chunk_size >= block and (block == n_old or block in ext.prefixes)
    if chunk_size is not None and min(chunk_size, n) != block and not clipped:
        diffs.append(f"the chunk size differs (store: {block}, now: {chunk_size})")
    tile = retile(block, n, chunk_size)
    if diffs:
        raise ValueError(f"store {store.path!r} holds a fit of {n_old} rows that this input of {n} rows would "
                         f"update, but {'; '.join(diffs)}. An update keeps the store's kernel, dtype and chunk "
                         "size: pass the same ones, or overwrite=True (CLI: --overwrite) to fit from scratch, or "
                         "choose another store.")
    if tile != block:  # K is built anew at the tile a fresh fit would have
        return Growth(n_old=int(n_old), n_new=int(n), block=tile, copy_data=copy, model_rows=model_rows,
                      retiled=block)
    return Growth(n_old=int(n_old), n_new=int(n), block=block, copy_data=copy, model_rows=model_rows,
                  gram_rows=gram_rows)


def stored_entries(n: int, block: int) -> int:
    """Kernel entries of K's stored blocks for ``n`` rows: the upper triangle of blocks, diagonal blocks whole."""
    sizes = _block_sizes(n, block)
    return int((n * n + int(np.sum(sizes * sizes))) // 2)


def _block_sizes(n: int, block: int) -> np.ndarray:
    return np.diff(np.minimum(np.arange(0, n + block, block), n))


def built_entries(store: FitStore | None, n: int, kernel: dict, dtype: str, block: int) -> int:
    """Kernel entries of the blocks the store's K of ``n`` rows, ``kernel``, precision and tile already holds (done
    markers read, not verified): what a fit of the same data reuses -- all of them for a complete K, those of a
    build killed part way for an interrupted one (``dkpca plan`` costs only the rest).  0 for no such K.
    Whether the data is the same the fit decides by digest, which reads all of it; this reads attributes and
    markers alone.
    """
    attrs = _recorded(store)[1]
    if attrs is None or any(attrs.get(key) != want for key, want in
                            (("n", n), ("kernel", kernel), ("dtype", dtype), ("block", block))):
        return 0
    if attrs.get("complete"):
        return stored_entries(n, block)
    try:
        done = read_done_markers(store.open()[GROUP]["done"]) != 0
    except (CorruptChunkError, ValueError, TypeError, KeyError):
        return 0
    sizes = _block_sizes(n, block)
    return int(np.sum(np.triu(done) * np.outer(sizes, sizes)))


def retire_gram(store: FitStore, block: int, dtype: Any) -> None:
    """Remove the store's K where it is of another tile than ``block`` or another precision than ``dtype``, or keys
    of one whose metadata a kill took or cannot be read (an update that builds K anew, :attr:`Growth.rebuilt`;
    under the lock).

    The model stays: it is derived from the data, not from K, and an update keeps it loadable until the new one
    is switched in (as while K grows).  A K of this tile and precision (a rerun's, part built) stays for the
    build to resume.
    """
    root = store.open_for_write()
    if (why := lost_gram(store, root)) is not None:
        logging.getLogger("dkpca").warning("store %s: %s; K is built anew", store.path, why)
        other = True
    elif GROUP in root:
        attrs = root[GROUP].attrs
        other = attrs.get("block") != block or attrs.get("dtype") != np.dtype(dtype).name
    else:
        other = False
    if other:
        remove_member(root, GROUP)


def update_blocks(n_old: int, n_new: int, block: int) -> tuple[int, int, int]:
    """``(reused, computed, entries)``: K's upper blocks an update of ``n_old`` to ``n_new`` rows keeps and computes.

    ``entries``: kernel evaluations of the computed blocks (their stored entries, :func:`stored_entries`),
    for ``dkpca plan`` and the report: never more than a fresh fit's.
    """
    nb_new = n_blocks(n_new, block)
    kept = n_old // block  # row blocks wholly in the old rows
    reused = kept * (kept + 1) // 2
    computed = nb_new * (nb_new + 1) // 2 - reused
    edge = kept * block  # rows whose blocks among themselves are kept
    return reused, computed, stored_entries(n_new, block) - stored_entries(edge, block)


def gram_of_prefix(store: FitStore, gram: dict[str, Any]) -> bool:
    """Whether K (its attributes ``gram``) is of the data copy's first rows, fewer than it holds now: a row count the
    copy had (``prefixes``) whose values, in K's tile, checksum to K's fingerprint.

    An update that stores no K (``gram="recompute"``, ``"memory"``, ARPACK) leaves K of the rows before it, which
    the next update that stores K grows; its fingerprint is then no longer the copy's, and only its rows' values
    tell it from K of other data.  Reads those rows, verified.
    """
    fp, block = gram.get("fingerprint"), gram.get("block")
    ext = _recorded(store)[0]
    shape = fp.get("shape") if isinstance(fp, dict) else None
    if not (ext is not None and isinstance(shape, list) and len(shape) == 2 and type(block) is int and block > 0
            and shape == [gram.get("n"), ext.d] and shape[0] in ext.prefixes and shape[0] < ext.rows):
        return False
    X = store.training_data(shape[0])
    X = X.rechunk((block, X.shape[1]))
    terms = compute(*[dask.delayed(block_checksum, pure=True)(b) for b in X.to_delayed().ravel()],
                    local=for_the_client(X.nbytes))
    return fp == {"shape": shape, "dtype": str(X.dtype), "checksum": rows_checksum(terms, X.chunks[0])}


def damaged_gram_of_prefix(store: FitStore, want: dict[str, Any]) -> bool:
    """Whether the store's K, an array's metadata under it unreadable, is of the copy's first rows with ``want``'s
    kernel, tile and precision (:func:`gram_of_prefix`): this data's own K with its record lost, which the build
    makes anew -- not K of another fit, which a fit refuses without ``overwrite``."""
    root = store.open()
    if unreadable_gram(root) is None:
        return False
    try:
        attrs = dict(root[GROUP].attrs)
    except (KeyError, ValueError):  # its group's own record unreadable: nothing says whose K it is to refuse
        return False
    return not GramStore.describe_mismatch(attrs, want, ("kernel", "block", "dtype")) and gram_of_prefix(store, attrs)


def grow_gram(store: FitStore, n_old: int, want: dict[str, Any], older: bool = False) -> bool:
    """Grow the Gram store of ``n_old`` rows to ``want`` (fingerprint, kernel, block, dtype, n of the grown data).

    ``older``: ``n_old`` is fewer rows than the model's (an update since stored no K), so K's fingerprint is no
    longer the copy's: its rows' values are checked first (:func:`gram_of_prefix`).

    Returns whether the store was (or had been) grown for ``want``; False
    when it holds K of other rows, which the build then judges as any
    mismatch (refused unless ``overwrite``).  The caller holds the store lock
    and has checked kernel, block and dtype against the store's.
    """
    root = store.open_for_write()
    if GROUP not in root:
        return False
    g = root[GROUP]
    a = dict(g.attrs)
    growing = a.get("growing") if isinstance(a.get("growing"), dict) else None
    if a.get("fingerprint") == want["fingerprint"] and a.get("n") == want["n"] and growing is None:
        return True  # grown already (a rerun after a later stage's kill)
    if growing is None and (a.get("n") != n_old or (older and not gram_of_prefix(store, a))):
        return False
    block, n_new = int(want["block"]), int(want["n"])
    # 1. one write: an update is under way, and the row sums are to be reduced again
    g.attrs.update({"growing": {"n": n_new, "fingerprint": want["fingerprint"], "from": n_old}, "complete": False})
    # 2. the partial row block's markers go before anything else changes: its chunks are recomputed whole.
    # Markers whose metadata is lost go whole (the build then computes every block): their boundary chunks,
    # left, would still match that block's K chunk of the old rows after a kill, and pass for built
    if "done" not in g:
        remove_member(g, "done")
    elif n_old % block:
        last = n_old // block
        done = writable(g["done"])
        done[: last + 1, last] = 0
    # 3. every array to the new shape (metadata only: chunks of the old rows stay where they are)
    for name, (shape, _) in gram_layout(n_new, block).items():
        if name not in g:  # the sums markers, in a store built before they were recorded
            continue
        arr: zarr.Array = writable(g[name])
        if tuple(arr.shape) != shape:
            arr.resize(shape)
    # 4. one write: the Gram store is that of the grown data, its new blocks still to build
    g.attrs.update({"fingerprint": want["fingerprint"], "n": n_new, "growing": None, "grown_from": n_old})
    return True
