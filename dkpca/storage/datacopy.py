"""The copy of the training data in a store (``data/X``): written once, fenced, every read verified.

The copy records each chunk's digest as it is written (``data`` attributes ``digest``, ``digests``), and every
read of it checks it, so a chunk that is missing, stale or another chunk's is refused (:class:`CorruptChunkError`,
naming the chunk); a refit that would reuse the copy reads it all first.  Chunk writes check the fit's lease.

Growing the copy (an update, :mod:`dkpca.growth`): the input's first rows are checked against the recorded
digests chunk by chunk (:meth:`StoredData.changed_chunk`); :meth:`StoredData.grow_data` records ``growing`` (from,
to, the new fingerprint), resizes ``data/X``, writes the chunks from the old boundary's onward and, in one last
write of the attributes, the new fingerprint (and the ``tile`` it was taken in) and digests; ``prefixes`` keeps
each earlier row count (and its boundary chunk's digest), so a model fitted on the first rows reads exactly those
rows, verified (:class:`~.rowview.RowPrefix`), before, during and after the update.  :class:`StoredData` is a
mix-in of :class:`~dkpca.storage.fitstore.FitStore`: the store's layout and model switch live there.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import dask.array as da
import numpy as np
import zarr

from ..execution import compute
from .datachunks import InputChangedError, chunk_digest, copy_edge, remake_meta, rewrite_chunks, same_values, write_rows
from .integrity import (
    DIGEST,
    CorruptChunkError,
    VerifiedArray,
    check_chunks,
    check_layout,
    create_array,
    decode_digests,
    encode_digests,
    json_digest,
    writable,
)
from .lock import Fenced, Lease
from .modelrecord import DamagedModelError
from .paths import exists, relation
from .rowview import RowPrefix
from .slots import present, remove_member

__all__ = ["DATA", "RECOPY", "DataExtent", "StoredData"]

DATA = "data"
#: what to rerun when the data copy is damaged: the input is the truth
RECOPY = "rerun the fit with overwrite=True (CLI: --overwrite) to copy the data again"


@dataclass(frozen=True)
class DataExtent:
    """What the data copy can give a reader: its complete rows, features, and the earlier row counts it keeps."""

    rows: int
    d: int
    prefixes: frozenset[int]
    #: the rows of a chunk; the fingerprint of the complete rows; the update under way (from, to, fingerprint)
    edge: int = 0
    fingerprint: dict | None = None
    growing: dict | None = None
    #: whether the copy records its chunks' digests (copies older than that cannot be grown)
    digested: bool = False
    #: the row chunk its fingerprint was taken in, its fit's tile: ``edge``, unless an update re-tiled K
    tile: int = 0

    def covers(self, n: int, d: int) -> bool:
        """Whether a model fitted on ``n`` rows of ``d`` features reads its own rows here."""
        return d == self.d and (n == self.rows or n in self.prefixes)

    @classmethod
    def of_record(cls, attrs: dict, rows: int, d: int, edge: int, growing: dict | None = None) -> DataExtent:
        """The extent the copy's group record ``attrs`` gives, with its complete ``rows``, ``d``, chunk ``edge``."""
        prefixes, fp, tile = attrs.get("prefixes") or {}, attrs.get("fingerprint"), attrs.get("tile")
        return cls(rows, d, frozenset(int(p) for p in prefixes if str(p).isdigit()), edge,
                   fp if isinstance(fp, dict) else None, growing, attrs.get("digests") is not None and
                   bool(attrs.get("complete")), tile if type(tile) is int and tile > 0 else edge)


def _growing(attrs: dict) -> dict | None:
    """The ``growing`` record of an update under way (from, to, fingerprint), checked; None if there is none."""
    g = attrs.get("growing")
    if g is None:
        return None
    if not (isinstance(g, dict) and type(g.get("from")) is int and type(g.get("to")) is int
            and 0 < g["from"] < g["to"] and isinstance(g.get("fingerprint"), dict)):
        raise ValueError(f"records an unusable update under way ({g!r})")
    return g


def _bound(data: VerifiedArray) -> str | None:
    """The digest of ``data``'s recorded chunk digests (None where it records none): :meth:`StoredData.data_digest`."""
    return None if data.digests is None else json_digest([int(d) for d in data.digests])


class StoredData:
    """The training data's copy in a store: :meth:`store_data` writes it, the other methods read it, verified.

    The class it is mixed into provides ``path``, ``open``, ``open_for_write``,
    ``model_group``, ``model_attrs``, ``discard_data`` (withdraw the model, delete the old copy and K) and
    ``recopy_orphan``.
    """

    def store_data(self, X: da.Array, fingerprint: dict, overwrite: bool, progress: bool = False,
                   source: str | None = None, lease: Lease | None = None, seen: Sequence[int] = ()) -> da.Array:
        """Copy X into ``data/X`` once (kept if the fingerprint matches: :meth:`mend_data`); return it, lazily.

        A copy of other data is an error unless ``overwrite``; then the data, the Gram store and the model (all
        derived from it) are replaced -- but never while X is being read from this very store (``source``, the
        input's absolute path): that would turn the input into zeros.  Identical data is kept even with
        ``overwrite`` (a refit from ``<store>/data/X`` with a new kernel replaces K and the model only).  With the
        fit's ``lease`` every chunk write checks it first: a copy task that outlives its fit writes nothing
        (:class:`~dkpca.storage.Lease`).  ``seen``: the scan's digests of X's chunks; a copy that wrote others is
        removed (a rerun copies afresh).
        """
        root = self.open_for_write()
        if present(root, DATA, damaged=False):
            attrs = dict(root[DATA].attrs)
            growing = attrs.get("growing")
            if growing is not None and not overwrite:
                to = growing.get("to") if isinstance(growing, dict) else None
                raise ValueError(f"store {self.path!r} is being updated to {to} rows of data (a killed update); "
                                 "rerun that update with the grown data to finish it, or pass overwrite=True "
                                 "(CLI: --overwrite) to fit this data from scratch.")
            if attrs.get("fingerprint") == fingerprint and attrs.get("complete"):
                try:  # nothing reads data/X once K is built: damage is found here or never
                    return self._lazy(self.mend_data(X, lease))
                except CorruptChunkError:
                    if not overwrite:  # the error names the chunk and the fix
                        raise
            if source is not None and relation(source, self.path) in ("same", "inside"):
                raise ValueError(
                    f"the input {source!r} lies inside the store {self.path!r}, whose data it would have to "
                    "replace while reading it; copy the data out of the store first, or choose another store."
                )
            if attrs.get("fingerprint") != fingerprint and not overwrite:
                old = attrs.get("fingerprint", {})
                rows, fitted = (old.get("shape") or [None])[0], self.model_rows()
                if isinstance(rows, int) and fitted is not None and fitted < rows:
                    # the copy grew and the model did not follow: "fitted on" these rows would be untrue
                    raise ValueError(
                        f"store {self.path!r} holds {rows} rows of data and a model of its first {fitted}: an "
                        f"update to {rows} rows was killed before it finished; rerun that update with the "
                        f"{rows}-row data to finish it, or pass overwrite=True (CLI: --overwrite) to fit this data "
                        "from scratch, or choose another store.")
                edge, now = self.data_extent().tile, X.chunks[0][0]
                if old.get("shape") == fingerprint.get("shape") and edge != now:  # the checksum is per chunk
                    raise ValueError(
                        f"store {self.path!r} holds data of the same shape in chunks of {edge} rows, and this fit "
                        f"asks for {now} (chunk_size): the data's checksum is taken per chunk, so they cannot be "
                        f"compared. Pass chunk_size={edge} (CLI: --chunk-size {edge}) to reuse the store, or "
                        "overwrite=True (CLI: --overwrite) to replace it, or choose another store.")
                raise ValueError(
                    f"store {self.path!r} was fitted on different data (store: shape {old.get('shape')}, "
                    f"checksum {old.get('checksum')}; now: shape {fingerprint.get('shape')}, checksum "
                    f"{fingerprint.get('checksum')}). Pass overwrite=True (CLI: --overwrite) to replace it, or "
                    "choose another store."
                )
            self.discard_data(root)
        elif (why := self.orphaned_data(root)) is not None:
            if overwrite:
                self.discard_data(root)
            elif not self.recopy_orphan(root, fingerprint, why):  # its record lost: only a K of X's says what it held
                raise CorruptChunkError(self.path, f"{DATA}/X", None, f"{why}; {RECOPY}")
        g = root.create_group(DATA)
        g.attrs.update({"fingerprint": fingerprint, "complete": False})
        if copy_edge(X) is None:  # one task a chunk: two tasks writing parts of one chunk would race
            X = X.rechunk((X.chunks[0][0], X.shape[1]))
        edge = copy_edge(X)
        arr = create_array(g, "X", shape=X.shape, chunks=edge, dtype=X.dtype)
        target = arr if lease is None else Fenced(arr, lease)
        try:  # each task writes its block and returns the digest of the chunk as stored, recorded with `complete`
            values = write_rows(X, target, edge, "copying X into the store", progress, seen=seen)
        except InputChangedError:
            remove_member(root, DATA)  # this fit's own copy, of no one reading of the input
            raise
        g.attrs.update({"complete": True, "digest": DIGEST, "digests": encode_digests(values), "edge": edge[0]})
        return self.training_data()

    def _data_record(self) -> tuple[zarr.Array, dict, int, dict | None]:
        """``data/X``, its attributes, its complete rows and the update under way (if any), the layout checked:
        before anything walks the chunk grid an edited ``zarr.json`` may claim, the array's shape is checked
        against the fingerprint (or, mid-update, against the update's two row counts)."""
        try:
            group = self.open()[DATA]
            arr, attrs = group["X"], dict(group.attrs)
        except (TypeError, ValueError) as exc:  # zarr's metadata parsing: a complex64 with fill 0.0, ...
            raise CorruptChunkError(self.path, f"{DATA}/X", None, f"has metadata zarr cannot read ({exc}); "
                                    f"{RECOPY}") from None
        except KeyError as exc:  # its metadata (zarr.json) or the whole copy deleted: what was there is unknown
            where = f"{DATA}/X/zarr.json" if exc.args == ("X",) else f"{DATA}/zarr.json"
            raise CorruptChunkError(self.path, f"{DATA}/X", None, f"is missing (no {where}); {RECOPY}") from None
        try:
            growing = _growing(attrs)
        except ValueError as exc:
            raise CorruptChunkError(self.path, DATA, None, f"{exc}: its attributes are damaged or were edited; "
                                    f"{RECOPY}") from None
        fingerprint = attrs.get("fingerprint")
        shape = fingerprint.get("shape") if isinstance(fingerprint, dict) else None
        shape = tuple(shape) if isinstance(shape, list) else (shape,) if shape is not None else None
        rows = growing["from"] if growing is not None else shape[0] if shape else arr.shape[0]
        if shape is not None:
            if growing is not None and arr.shape[0] == growing["to"]:  # resized already: the new rows' count
                shape = (growing["to"], *shape[1:])
            check_layout(arr, shape, None, RECOPY)
        return arr, attrs, rows, growing

    def training_array(self, rows: int | None = None, bound: str | None = None) -> VerifiedArray:
        """The stored training data for tasks reading rows: every read verified, damage names its chunk.

        ``bound``: a model's :meth:`data_digest` of its rows, recorded when it was saved; other rows are refused
        in one line: ``ValueError`` where the store's own model is bound to them (refit since the model was
        loaded), else :class:`~.modelrecord.DamagedModelError` (``data/`` or the model copied from another store
        of the same shape); a copy recording no digests (made before dkpca recorded them) reads unbound.
        """
        data = self._training_array(rows)
        if bound is not None and data.digests is not None and _bound(data) != bound:  # none: an old copy, unbound
            if (self.model_attrs() or {}).get("data_digest") == _bound(data):  # the store's own model: refit
                raise ValueError(f"store {self.path!r} was refit since this model was loaded: its data is another "
                                 "fit's now; load the store's model again (dkpca.load), or refit this one.")
            raise DamagedModelError(self.path, "model field 'data_digest'", "names other training data than the "
                                    f"store's {DATA}/X holds (the model or the data was copied from another store)")
        return data

    def check_bound(self, rows: int, recorded: Any) -> None:
        """A model's ``data_digest`` attribute (``recorded``) against its ``rows`` of the copy: refused where it is
        not a digest or names other rows (:meth:`training_array`); None, a model saved before dkpca recorded it,
        passes.  The one check of the model's load and of ``dkpca verify``."""
        if recorded is not None and not isinstance(recorded, str):
            raise DamagedModelError(self.path, "model field 'data_digest'", f"is {recorded!r}, not a digest")
        if recorded is not None:
            self.training_array(rows, recorded)

    def data_digest(self, rows: int) -> str | None:
        """What binds a model to its training data: a digest of the recorded digests of its rows' chunks (a
        model fitted before an update reads the same from the grown copy); None for a copy recording none."""
        return _bound(self._training_array(rows))

    def _training_array(self, rows: int | None = None) -> VerifiedArray:
        """:meth:`training_array` unbound.

        ``rows``: a model's own rows (default: all the copy holds, complete): the first ``rows`` of a copy that
        an update grew since, read as they were (:class:`~.rowview.RowPrefix`); a count the copy never held is
        refused (``ValueError``, one line).  Refused first (:class:`CorruptChunkError`, one line) when
        ``data/X``'s metadata disagrees with the data's fingerprint, or the digests recorded do not cover its
        chunks.  Copies made before dkpca recorded digests (no ``digests`` attribute) still load: their reads
        check presence and the CRC-32C only.
        """
        arr, attrs, complete, growing = self._data_record()
        rows = complete if rows is None else rows
        if attrs.get("digests") is None:
            if rows != arr.shape[0]:
                raise ValueError(f"store {self.path!r} holds {arr.shape[0]} rows of data, not the {rows} this model "
                                 "was fitted on; load the store's current model (dkpca.load) or refit.")
            # a copy made before dkpca recorded digests (older stores): it still loads; its reads are checked
            # for presence and by CRC-32C only (a swapped or stale chunk cannot be recognised)
            return VerifiedArray(arr)
        edge = arr.chunks[0]
        try:
            digests = decode_digests(attrs["digests"])
            if attrs.get("digest") != DIGEST or len(digests) != -(-complete // edge):
                raise ValueError(f"{len(digests)} digests ({attrs.get('digest')!r}) for {-(-complete // edge)} "
                                 "chunks")
            prefixes = attrs.get("prefixes") or {}
            boundary = prefixes.get(str(rows)) if rows != complete else None
            if boundary is not None:
                boundary = decode_digests([boundary])[0]
        except ValueError as exc:
            raise CorruptChunkError(self.path, f"{DATA}/X", None, f"has unusable recorded digests ({exc}): the "
                                    f"data's attributes are damaged or were edited; {RECOPY}") from None
        if rows == complete and growing is None:
            return VerifiedArray(arr, digests)
        if rows > complete or (rows != complete and str(rows) not in prefixes):
            raise ValueError(f"store {self.path!r} holds {complete} rows of data and keeps no record of its first "
                             f"{rows}: it no longer holds the data this model was fitted on; load the store's "
                             "current model (dkpca.load) or refit.")
        full = rows // edge
        kept = digests[:full] + ((digests[full] if rows == complete else boundary,) if rows % edge else ())
        if None in kept:
            raise CorruptChunkError(self.path, DATA, None, f"records no digest of the chunk holding row {rows - 1}; "
                                    f"{RECOPY}")
        return RowPrefix(array=arr, digests=kept, rows=rows)

    def model_rows(self) -> int | None:
        """The rows of the store's current model (its eigenvectors' metadata), None if it has none readable."""
        try:
            name = self.model_group()
            return None if name is None else int(self.open()[name]["eigenvectors"].shape[0])
        except (KeyError, ValueError, TypeError, OSError):
            return None

    def data_extent(self) -> DataExtent:
        """The complete rows, features and earlier row counts of the copy (a model load checks its own)."""
        arr, attrs, rows, growing = self._data_record()
        return DataExtent.of_record(attrs, rows, int(arr.shape[1]), int(arr.chunks[0]), growing)

    def orphaned_data(self, root: zarr.Group) -> str | None:
        """Why keys under ``data/`` are no copy -- the group's ``zarr.json`` lost or unreadable -- or None."""
        if present(root, DATA, damaged=False) or not exists(f"{self.path}/{DATA}"):
            return None
        return f"has metadata zarr cannot read ({DATA}/zarr.json)" if present(root, DATA) else \
            f"is missing (no {DATA}/zarr.json)"

    def mend_data(self, X: da.Array, lease: Lease | None = None) -> VerifiedArray:
        """:meth:`check_data`, damage (chunks, lost metadata) first written again from X where it holds the recorded."""
        try:
            return self.check_data()
        except CorruptChunkError as exc:
            if remake_meta(self.open_for_write()[DATA], X, self.path):  # its zarr.json lost: made again, judged
                return self.mend_data(X, lease)
            rewrite_chunks(X, self.training_array(), writable(self.open_for_write()[DATA]["X"]), lease, exc, self.path)
            return self.training_array()

    def check_data(self) -> VerifiedArray:
        """Read the whole data copy once, a chunk at a time, each verified (the first damage raises, naming it);
        return it as :meth:`training_array` does, every chunk now known present."""
        data = self.training_array()
        self._check_present(data)
        edge = data.array.chunks[0]
        for s in range(0, data.shape[0], edge):
            data[s:s + edge]
        return data

    @staticmethod
    def _check_present(data: VerifiedArray) -> None:
        check_chunks(data.array, data.chunk_coords if isinstance(data, RowPrefix) else None)

    def training_data(self, rows: int | None = None, bound: str | None = None) -> da.Array:
        """The stored training data (``rows``, ``bound``: as :meth:`training_array`), lazily; chunks checked now."""
        data = self.training_array(rows, bound)
        self._check_present(data)
        return self._lazy(data)

    def _lazy(self, data: VerifiedArray) -> da.Array:
        """``data`` (checked present) as a dask array, every chunk verified when read."""
        # named by store, content and rows, so graphs reading the same data share their keys
        digest = dict(self.open()[DATA].attrs).get("fingerprint", {}).get("checksum", uuid.uuid4().hex)
        name = f"dkpca-data-{uuid.uuid5(uuid.NAMESPACE_URL, self.path).hex}-{digest}-{data.shape[0]}"
        return da.from_array(data, chunks=data.array.chunks, asarray=True, lock=False, name=name)

    # -- an update: the copy grown by new rows -------------------------------
    def changed_chunk(self, X: da.Array, rows: int) -> tuple[int, int, int] | None:
        """The first chunk of the copy whose rows below ``rows`` differ from X's: ``(chunk, first row, last row)``;
        None: all equal.  X is read up to ``rows``, re-chunked as the copy is, and compared by the digests
        recorded when the copy was written; only a chunk whose digest differs is read from the copy, to compare
        values (:func:`~.datachunks.same_values`: ``-0.0`` for ``0.0`` is no change)."""
        arr, attrs, complete, _ = self._data_record()
        edge = (arr.chunks[0], arr.shape[1])
        recorded = decode_digests(attrs["digests"])[:-(-rows // edge[0])]
        head = X[:rows].rechunk((edge[0], X.shape[1]))
        got = head.map_blocks(chunk_digest, edge, dtype=np.uint64, drop_axis=1,
                              chunks=((1,) * len(head.chunks[0]),), name=f"dkpca-rows-{uuid.uuid4().hex}")
        (values,) = compute(got, label="checking the stored rows")
        held = cache(lambda: self._training_array(rows))  # the copy's rows, opened at the first digest that differs
        for c, (a, b) in enumerate(zip(values, recorded, strict=True)):
            start, stop = c * edge[0], min((c + 1) * edge[0], rows)
            if int(a) != b and not same_values(held(), X, start, stop):
                return c, start, stop - 1
        return None

    def grow_data(self, X: da.Array, fingerprint: dict, rows: int, progress: bool = False,
                  lease: Lease | None = None, seen: Sequence[int] = ()) -> da.Array:
        """Grow the copy of the first ``rows`` rows of X to all of X; return the grown copy, lazily.

        The caller has checked that X's first ``rows`` rows are the copy's (:meth:`changed_chunk`), mended any
        damaged chunk of them (:meth:`mend_data`) and holds the store lock.  Only the chunks from the one the old
        end falls in are written (a rerun after a kill writes them again); chunks wholly in the old rows are never
        touched.  ``seen``: as :meth:`store_data`'s; a copy that wrote other chunks stops, as a killed one would.
        """
        g = self.open_for_write()[DATA]
        arr, attrs = writable(g["X"]), dict(g.attrs)
        edge = (arr.chunks[0], arr.shape[1])
        old = decode_digests(attrs["digests"])
        growing = _growing(attrs)
        # one write records the update under way; a kill from here on leaves it recognisable
        if growing is None or growing["to"] != X.shape[0] or growing["fingerprint"] != fingerprint:
            g.attrs.update({"growing": {"from": rows, "to": int(X.shape[0]), "fingerprint": fingerprint}})
        if arr.shape[0] != X.shape[0]:
            arr.resize((X.shape[0], arr.shape[1]))  # metadata only: no chunk of the old rows is rewritten
        first = rows // edge[0] * edge[0]
        tail, seen = X[first:], list(seen[first // edge[0]:] if X.chunks[0][0] == edge[0] else ())
        if rows % edge[0] and int(chunk_digest(np.asarray(X[first:rows]), edge)[0]) != old[-1]:
            # X's old rows there hold the copy's values in other bytes (changed_chunk): the copy keeps its own,
            # which the earlier row count's digest (prefixes) names
            tail, seen[:1] = da.concatenate([da.from_array(self._training_array(rows)[first:rows]), X[rows:]]), [None]
        target = arr if lease is None else Fenced(arr, lease)
        values = write_rows(tail.rechunk((edge[0], X.shape[1])), target, edge, "copying the new rows into the store",
                            progress, first, seen)
        prefixes = dict(attrs.get("prefixes") or {})
        prefixes[str(rows)] = encode_digests([old[-1]])[0] if rows % edge[0] else None
        # the last write: the grown copy is complete, and every earlier row count still readable
        # the fingerprint is taken in X's row chunks, the fit's tile (an update may re-tile K: "tile")
        g.attrs.update({"fingerprint": fingerprint, "complete": True, "digest": DIGEST, "growing": None,
                        "digests": encode_digests([*old[:first // edge[0]], *values]), "prefixes": prefixes,
                        "tile": int(X.chunks[0][0])})
        return self.training_data()
