"""``dkpca verify``: check every chunk of a store and say what a rerun would recompute.

Read-only: it changes nothing in the store.  Each part of the layout gets one
:class:`Finding`; ``ok`` is False only for damage that a plain rerun would
not silently absorb or that needs the user (a damaged data copy), or that
the rerun will repair (damaged Gram blocks are recomputed) -- the text says
which.  Incomplete parts (a build or solve that was killed) are not damage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import zarr

from .checkpoint import GROUP as CHECKPOINT
from .checkpoint import SLOTS, seal
from .chunks import partials
from .corrupt import TrailerOnlyError
from .fitstore import DATA, MODEL, RITZ, SPARSE_MODEL, FitStore
from .gramcheck import SUMS, gram_layout
from .gramstore import GROUP as GRAM
from .gramstore import GramStore, read_done_markers, unreadable_gram
from .growth import gram_of_prefix
from .integrity import CorruptChunkError, check_chunks, chunk_coords, has_checksum, read_verified
from .modelrecord import EDITED, DamagedModelError, edited
from .paths import exists
from .slots import present

__all__ = ["Finding", "verify_store"]


@dataclass(frozen=True)
class Finding:
    """One part of a store: ``part`` (data, gram, model, ...), whether it is intact, one line saying so."""

    part: str
    ok: bool
    text: str


def _unchecked(arrays: list[zarr.Array]) -> str:
    old = [a.path for a in arrays if not has_checksum(a)]
    return f" ({', '.join(old)} written without checksums: presence and size checked only)" if old else ""


def _verify_array(arr: zarr.Array) -> None:
    """Every chunk present and verified, one chunk in memory at a time."""
    check_chunks(arr)
    for c in chunk_coords(arr):
        read_verified(arr, tuple(slice(i * e, (i + 1) * e) for i, e in zip(c, arr.chunks, strict=True)))


def _verify_group(group: zarr.Group) -> None:
    for arr in group.array_values():
        _verify_array(arr)


def _data(store: FitStore, root: zarr.Group) -> Finding:
    try:
        absent = not present(root, DATA, damaged=False) or "X" not in root[DATA]
    except (TypeError, ValueError):  # zarr cannot parse data/X's metadata (an edited data_type): check_data says so
        absent = False
    # none yet (or killed before data/X was created) -- unless a model was fitted on it or its keys are left
    if absent and store.model_group() is None and store.orphaned_data(root) is None and not (
            present(root, DATA, damaged=False) and root[DATA].attrs.get("complete")):
        return Finding("data", True, "data/X: no data copy yet; a rerun of the fit copies the data")
    if not absent and not root[DATA].attrs.get("complete"):
        return Finding("data", True, "data/X: the copy was interrupted; a rerun of the fit copies the data again")
    try:
        data = store.check_data()  # shape against the fingerprint first; each chunk against its recorded digest
    except CorruptChunkError as exc:
        return Finding("data", False, f"data/X: {exc}")  # names the fix: the input is the truth
    growing = root[DATA].attrs.get("growing")
    if isinstance(growing, dict):  # an update killed while copying its new rows (check_data checked the record)
        return Finding("data", True, f"data/X: caught mid-update from {growing['from']} to {growing['to']} rows: "
                                     f"the first {data.shape[0]} rows verified; a rerun of the same update copies "
                                     "the new rows")
    arr = root[DATA]["X"]
    old = "" if "digests" in root[DATA].attrs else " (copied without digests: presence and checksums only)"
    return Finding("data", True, f"data/X: {arr.shape[0]} x {arr.shape[1]}, all {arr.nchunks} chunks verified"
                                 f"{_unchecked([arr]) or old}")


def _of_copy(store: FitStore, root: zarr.Group, g: zarr.Group) -> tuple[str | None, str]:
    """Whether K is of the store's data copy: why not (its data fingerprint is another's: what a fit refuses), or
    None; and what to say after its blocks -- that it is of the copy's first rows, where those rows' values
    checked so (left by an update that stored no K; the next that does grows it)."""
    data = root[DATA].attrs.asdict() if present(root, DATA, damaged=False) else {}
    have, want = g.attrs.get("fingerprint"), data.get("fingerprint")
    if not data.get("complete") or isinstance(data.get("growing"), dict) or not isinstance(want, dict) or have == want:
        return None, ""  # no copy to compare with (it names its own state), or an update under way
    try:
        if gram_of_prefix(store, g.attrs.asdict()):
            return None, (f", of the data's first {have['shape'][0]} of {(want.get('shape') or ['?'])[0]} rows (an "
                          "update since stored no K; the next fit that stores K grows it)")
    except CorruptChunkError:
        return None, ""  # those rows damaged: the data's finding names them; K is judged once they are mended
    have = have.get("checksum") if isinstance(have, dict) else have
    return (f"gram: K was built from other data (checksum {have}) than the store's copy, data/X (checksum "
            f"{want.get('checksum')}): copied from another store, or edited; a rerun of the fit refuses it -- "
            "rerun it with --overwrite (overwrite=True) to build K anew"), ""


def _gram(store: FitStore, root: zarr.Group) -> Finding:
    if (why := unreadable_gram(root)) is not None:
        return Finding("gram", False, f"gram: {why}; a rerun of the fit builds K anew")
    if GRAM not in root:  # keys left without the group's zarr.json are no Gram matrix: a rerun builds K anew over them
        if exists(f"{store.path}/{GRAM}"):
            return Finding("gram", True, f"gram: {GRAM}/zarr.json is missing, so what is left under {GRAM}/ is not "
                                         "used; a rerun of the fit builds K anew")
        return Finding("gram", True, "gram: no Gram matrix yet; a rerun of the fit builds it")
    g = root[GRAM]
    missing = [name for name in gram_layout(1, 1) if name != SUMS and name not in g]  # older stores lack SUMS
    if missing:  # a fit killed while creating them (in this order, before any block), or their zarr.json lost
        complete = bool(g.attrs.get("complete"))
        return Finding("gram", not complete, f"gram: {', '.join(missing)} missing"
                       f"{' (no zarr.json)' if complete else ''}; a rerun of the fit builds every block again")
    growing = g.attrs.get("growing")
    if isinstance(growing, dict):  # an update killed while growing K's arrays: their shapes are in between
        return Finding("gram", True, f"gram: caught mid-update from {growing.get('from')} to {growing.get('n')} "
                                     "rows while its arrays were being resized; a rerun of the same update "
                                     "finishes it and computes the blocks of the new rows")
    other, prefix = _of_copy(store, root, g)
    if other is not None:
        return Finding("gram", False, other)
    try:
        GramStore(store).check_layout(g)  # before the markers are read: no shape of 10^12 is ever allocated
    except CorruptChunkError as exc:
        return Finding("gram", False, f"gram: {exc}")
    n = int(g.attrs["n"])
    nb = g["done"].shape[0]
    total = nb * (nb + 1) // 2
    todo = total - int(np.count_nonzero(np.triu(read_done_markers(g["done"]))))
    found = GramStore(store).damaged_blocks()
    bad = [f"block ({I}, {J}): {exc.array} chunk {exc.chunk} {exc.problem}"
           for I, J, exc in found if not isinstance(exc, TrailerOnlyError)]
    # values read by their recorded digest, as every solver pass reads them: no rerun rewrites them, none need to
    trailers = [f"{exc.chunk}" for _, _, exc in found if isinstance(exc, TrailerOnlyError)]
    if g.attrs.get("complete") and not bad:
        try:
            GramStore(store).read_row_sums(g)
        except CorruptChunkError as exc:
            bad.append(f"row sums: {exc}")
    old = _unchecked([g["K"], g["partial_sums"], g["diag"]])
    if trailers:
        old += (f" (gram/K chunk{'s' if len(trailers) > 1 else ''} {', '.join(trailers[:5])}"
                f"{', ...' if len(trailers) > 5 else ''}: CRC-32C trailer damaged, values intact -- they match the "
                "digest recorded when written, which is what a fit checks; only zarr alone would refuse them)")
    if bad:
        return Finding("gram", False, f"gram: {len(bad)} of {total} blocks damaged ({'; '.join(bad[:5])}"
                                      f"{'; ...' if len(bad) > 5 else ''}); a rerun of the same fit recomputes "
                                      f"them{f' and builds the {todo} not yet built' if todo else ''}{old}")
    if todo and g.attrs.get("complete"):  # every block was built: their markers were lost since (deleted, damaged)
        return Finding("gram", False, f"gram: K was complete, but the done markers of {todo} of {total} blocks are "
                                      "missing or unreadable (deleted or damaged since); a rerun of the same fit "
                                      f"recomputes those blocks{old}")
    if todo:  # a build killed part way
        return Finding("gram", True, f"gram: {total - todo} of {total} blocks built and verified; a rerun of the "
                                     f"fit builds the other {todo}{old}")
    return Finding("gram", True, f"gram: all {total} blocks of K ({n} x {n}) and their sums verified{prefix}{old}")


def _model(store: FitStore, kind: str) -> Finding | None:
    """The ``kind`` model read as a load reads it: pointer, record, metadata, every chunk, every digest."""
    fix = "a rerun of the fit solves again from the stored Gram matrix" if kind == "model" else \
        "fit the sparse model again and save it"
    try:  # through the reader's seqlock: a model switched meanwhile is read again
        store.read_model() if kind == "model" else store.read_sparse_model()
    except DamagedModelError as exc:  # names the field and the fix
        return Finding(kind, False, f"{kind}: {exc}")
    except CorruptChunkError as exc:
        return Finding(kind, False, f"{kind}: {exc}; {fix}")
    except ValueError as exc:  # "holds no complete model": none yet, or withdrawn while we read
        if store.model_group(kind) is not None:  # no: an error we did not foresee is damage, never "none yet"
            return Finding(kind, False, f"{kind}: {exc}")
        return None if kind != "model" else Finding(kind, True, "model: none yet; a rerun of the fit solves")
    name = store.model_group(kind)
    group = store.open()[name] if name is not None else None
    old = _unchecked(list(group.array_values())) if group is not None else ""
    try:  # the data copy's own damage is the data finding's to name
        rows = store.data_extent().rows if kind == "model" and group is not None else None
    except (CorruptChunkError, ValueError):
        rows = None
    if group is not None and edited(group.attrs.asdict(), "kernel"):  # the load's check, where K is not stored
        exc = DamagedModelError(store.path, f"{kind} field 'kernel'", EDITED, kind)
        return Finding(kind, False, f"{kind}: {exc}")
    n = group["eigenvectors"].shape[0] if rows is not None else None
    try:  # bound to its own rows: not data, or a model, copied from another store of the same shape
        if n is not None:
            store.check_bound(n, group.attrs.get("data_digest"))
    except DamagedModelError as exc:
        return Finding(kind, False, f"{kind}: {exc}")
    except (CorruptChunkError, ValueError):
        pass  # the data copy's finding names it
    if n is not None and n < rows:  # the data copy grew (an update under way): the model still reads its own
        old += (f" (fitted on the first {n} of the {rows} rows the store holds: an update under way; it loads "
                "and transforms as before, and a rerun of the same update replaces it)")
    return Finding(kind, True, f"{kind}: all arrays verified{old}")


def _ritz(store: FitStore) -> Finding | None:
    """The record of the model's Ritz pairs (an update's start): damage there only costs an update a pass."""
    if store.model_group(RITZ) is None:
        return None
    try:
        _, attrs = store.read_ritz()
    except ValueError as exc:  # damaged (DamagedModelError, CorruptChunkError), or withdrawn while we read
        return Finding("ritz", True, f"update start: {exc}; harmless: an update of this fit starts as a fresh "
                                     "fit does (one more pass), and the next fit writes it again")
    if attrs.get("model") != store.model_group():  # a fit killed between its model and its record
        return Finding("ritz", True, "update start: a record of an earlier model, not of this one (a fit was "
                                     "killed before writing its own); harmless: an update of this fit ignores it "
                                     "and starts as a fresh fit does (one more pass)")
    return Finding("ritz", True, "update start (the model's Ritz pairs and K times them): all arrays verified")


def _checkpoint(root: zarr.Group) -> Finding | None:
    try:
        if CHECKPOINT not in root:
            return None
        g = root[CHECKPOINT]
    except ValueError as exc:  # its zarr.json cut short or garbled
        return Finding("checkpoint", True, f"solver checkpoint: {CHECKPOINT}/zarr.json unreadable ({exc}); harmless: "
                                           "a rerun starts the solver afresh and replaces it")
    slot, attrs = g.attrs.get("slot"), g.attrs.asdict()
    if slot not in SLOTS or slot not in g:  # none yet (killed before the first pass saved), or an edited pointer
        return Finding("checkpoint", True, "solver checkpoint: none complete; a rerun starts the solver afresh")
    missing = [name for name in attrs.get("checksums") or {} if name not in g[slot]]
    if missing or attrs.get("seal") != seal(attrs):  # as the solver's start judges it (SolverCheckpoint.load)
        why = f"its arrays {', '.join(missing)} are missing" if missing else "its attributes fail their seal"
        return Finding("checkpoint", True, f"solver checkpoint: {why}; harmless: a rerun starts the solver afresh")
    try:
        _verify_group(g[slot])
    except CorruptChunkError as exc:
        return Finding("checkpoint", True, f"solver checkpoint: {exc}; harmless: a rerun starts the solver afresh")
    return Finding("checkpoint", True, f"solver checkpoint: pass {g.attrs.get('passes')} verified; a rerun "
                                       "resumes from it")


def _temporaries(store: FitStore) -> Finding | None:
    if store.is_url:
        return None
    count = len(partials(store.path))
    if not count:
        return None
    return Finding("temporaries", True, f"{count} temporary chunk files left by a killed writer; a rerun removes "
                                        "them")


def verify_store(path: str | os.PathLike | FitStore) -> list[Finding]:
    """Check every chunk of the store at ``path``; one :class:`Finding` per part present.

    Raises ``FileNotFoundError``/``ValueError`` if ``path`` is not a dkpca store.
    """
    store = FitStore.at(path)
    root = store.open()
    sparse = _model(store, SPARSE_MODEL)
    fit_parts = any(present(root, m) for m in (DATA, GRAM, CHECKPOINT))
    if sparse is not None and not fit_parts and store.model_group() is None:
        # SparseKernelPCA.save's store: no kernel PCA fit, whose parts "a rerun of the fit" would make
        return [Finding("store", True, "a sparse model's store: no data copy, Gram matrix or kernel PCA model"),
                sparse]
    found = [_data(store, root), _gram(store, root), _model(store, MODEL), sparse, _ritz(store), _checkpoint(root),
             _temporaries(store)]
    return [f for f in found if f is not None]
