"""What a saved model group records of its arrays, and the checks of every read against that record.

A CRC-32C per chunk proves that a chunk is what *some* writer wrote, not what
the model's writer wrote: values rewritten through zarr carry a valid CRC,
two chunks of one array exchanged are each valid, and an array whose
``zarr.json`` lost its ``crc32c`` codec is read unchecked.  So every model
group (:meth:`~dkpca.storage.FitStore.write_model`, ``write_sparse_model``)
records, in its attributes, each array's shape, chunk shape, data type and
the XXH3 digest of its bytes (attribute ``arrays``, digest algorithm in
``digest``; :func:`record`).  A read checks the metadata against the record
before it reads a chunk (a huge shape is refused, never allocated), and the
bytes against the digest after (:func:`read_recorded`).  An all-zero chunk
that zarr did not write (it skips chunks equal to the fill value) reads as
zeros, which the digest accepts: the content is what was written.

Old stores: a group written before records existed has none; it is read as
before (presence and CRC of each chunk; arrays written before checksums:
presence and size).  How a reader tells an old group from one whose record
was removed: the root attribute ``<kind>_digests`` names the group that
carries a record, written in the same atomic write as the pointer
(:meth:`FitStore._switch`).  A group it names without a record is refused.
An older dkpca refitting the store leaves that attribute naming a group that
is gone, so its own model is read as an old one.

Every refusal is :class:`DamagedModelError`, a ``ValueError``: one line
naming the store, the field and the fix.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import zarr

from ..machine import memory_total
from .integrity import DIGEST, digest, encode_digests, has_checksum, json_digest, read_verified, read_whole

__all__ = ["DamagedModelError", "ATTRS", "EDITED", "RECORD", "SEALED", "attrs_digest", "edited", "record", "read_group",
           "read_recorded", "read_unrecorded", "check_pointer", "digests_key"]

#: the attribute holding the digests of a group's :data:`SEALED` attributes (:func:`attrs_digest`)
ATTRS = "attrs_digest"
#: the model group's attribute holding the record of its arrays
RECORD = "arrays"
#: why a sealed attribute is refused (:func:`edited`)
EDITED = "was edited after it was written (its digest differs from the one recorded)"
_FIXES = {"model": "refit the model", "sparse_model": "fit the sparse model again and save it"}


class DamagedModelError(ValueError):
    """A saved model (its arrays, attributes or the root's pointer) is not what its writer wrote.

    ``what`` names the field (``model field 'report'``, ``root attribute 'model'``), ``why`` the problem.
    """

    def __init__(self, store: str, what: str, why: str, kind: str = "model") -> None:
        self.store, self.what, self.why, self.kind = store, what, why, kind
        super().__init__(f"store {store!r}: {what} {why}; the store is damaged or was edited -- "
                         f"{_FIXES.get(kind, _FIXES['model'])}.")

    def __reduce__(self) -> tuple:
        return type(self), (self.store, self.what, self.why, self.kind)


def digests_key(kind: str) -> str:
    """The root attribute naming the ``kind`` group that records its arrays' digests."""
    return f"{kind}_digests"


def check_pointer(store: str, kind: str, name: Any) -> str | None:
    """``name`` if it can name a ``kind`` group (``<kind>.<32 hex>``, or the version-1 fixed ``kind``); else refuse.

    A pointer naming ``data``, a path with ``..`` or a number would otherwise
    reach zarr (TypeError) or read another member as a model.
    """
    if name is None or (isinstance(name, str) and re.fullmatch(rf"{re.escape(kind)}(\.[0-9a-f]{{32}})?", name)):
        return name
    raise DamagedModelError(store, f"root attribute {kind!r}", f"is {name!r}, not the name of a {kind} group",
                            kind)


def _entry(arr: zarr.Array, data: np.ndarray) -> dict[str, Any]:
    return {"shape": list(arr.shape), "chunks": list(arr.chunks), "dtype": arr.dtype.str,
            "digest": encode_digests([digest(np.ascontiguousarray(data, dtype=arr.dtype))])[0]}


def record(written: dict[str, tuple[zarr.Array, np.ndarray]], attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The attributes recording the arrays just written (name -> (array, the data written into it)), and the
    digests of the group's :data:`SEALED` ``attrs`` (:func:`attrs_digest`)."""
    out = {RECORD: {name: _entry(arr, data) for name, (arr, data) in written.items()}, "digest": DIGEST}
    return out if attrs is None else {**out, ATTRS: attrs_digest(attrs)}


#: the model attributes no other check covers, each with the JSON type whose digest a read checks here: numbers the
#: model's scores and ratios use as they are read, a sparse model's parameters (its noise variance and centring are
#: what its transform and likelihood compute with), and its kernel (None: its reader checks the spec first and then
#: :func:`edited`; checked against K's where K is stored, not where it is recomputed).  A value of another type is
#: left to its reader, which names what is wrong with it (its report and sizes are checked by their readers alone).
SEALED: dict[str, type | tuple[type, ...] | None] = {"grand_mean": (int, float), "trace": (int, float),
                                                     "params": dict, "kernel": None}


def attrs_digest(attrs: dict[str, Any]) -> dict[str, str]:
    """The digest of each :data:`SEALED` attribute as JSON holds it (:func:`record`): an edited grand mean or trace
    would be used without a word."""
    return {key: json_digest(attrs[key]) for key in SEALED if key in attrs}


def edited(attrs: dict[str, Any], key: str) -> bool:
    """Whether the sealed attribute ``key`` of a group's ``attrs`` is not the value recorded when it was written
    (False where nothing was recorded: an older group)."""
    recorded = attrs.get(ATTRS)
    return isinstance(recorded, dict) and key in recorded and json_digest(attrs.get(key)) != recorded[key]


def _check_attrs(store: str, kind: str, group: str, attrs: dict[str, Any]) -> None:
    """Refuse a well-formed sealed attribute whose digest is not the one recorded (a malformed one is left to its
    reader, which names what is wrong with it; groups written before the digests have none)."""
    recorded = attrs.get(ATTRS)
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise DamagedModelError(store, f"{kind} attribute {ATTRS!r} of group {group!r}", f"is {recorded!r}, not the "
                                "digests of the attributes", kind)
    for key in recorded:
        got, form = attrs.get(key), SEALED.get(key)
        well_formed = form is not None and isinstance(got, form) and not isinstance(got, bool) and (
            not isinstance(got, float) or math.isfinite(got))
        if well_formed and edited(attrs, key):
            raise DamagedModelError(store, f"{kind} attribute {key!r} of group {group!r}", EDITED, kind)


def _parsed(store: str, kind: str, group: str, rec: Any, algo: Any) -> dict[str, dict[str, Any]]:
    """The record, every field checked for type and range (it is read back: trust nothing)."""
    def bad(why: str) -> DamagedModelError:
        return DamagedModelError(store, f"{kind} attribute {RECORD!r} of group {group!r}", why, kind)

    if algo != DIGEST:
        raise bad(f"is digested with {algo!r}; this dkpca checks {DIGEST!r}")
    if not isinstance(rec, dict) or not rec:
        raise bad(f"is {rec!r}, not a record of the arrays")
    out = {}
    for name, e in rec.items():
        ok = isinstance(e, dict) and isinstance(e.get("shape"), list) and isinstance(e.get("chunks"), list)
        ok = ok and len(e["shape"]) == len(e["chunks"]) and isinstance(e.get("digest"), str)
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in e["shape"])
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in e["chunks"])
        ok = ok and re.fullmatch(r"[0-9a-f]{16}", e["digest"]) is not None and isinstance(e.get("dtype"), str)
        try:
            dtype = np.dtype(e["dtype"]) if ok else None
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biuf":
            raise bad(f"has entry {name!r} = {e!r}, not a shape, chunks, numeric data type and digest")
        out[name] = {"shape": tuple(e["shape"]), "chunks": tuple(e["chunks"]), "dtype": dtype,
                     "digest": int(e["digest"], 16)}
    return out


def _open(store: str, kind: str, group: zarr.Group, name: str) -> zarr.Array:
    """Member ``name`` of ``group`` as an array; refused by name if missing, not an array or unreadable metadata."""
    where = f"{kind} array {f'{group.path}/{name}'!r}"
    try:
        arr = group[name]
    except KeyError:
        raise DamagedModelError(store, where, "is missing", kind) from None
    except Exception as exc:  # zarr's metadata parsing: TypeError, ValueError, ... (a complex64 with fill 0.0)
        raise DamagedModelError(store, where, f"has metadata zarr cannot read ({exc})", kind) from None
    if not isinstance(arr, zarr.Array):
        raise DamagedModelError(store, where, "is not an array", kind)
    return arr


def _check_size(store: str, kind: str, arr: zarr.Array, recorded: bool = False) -> None:
    """Refuse an array larger than this process may hold (it is read whole), before it is allocated.

    ``recorded``: its shape is the one its writer recorded -- a model written on a machine with more memory,
    said so first (or a record edited alike, whose fix is named after it); else a claim no model written from
    memory here could make (damage).  The memory is the process's job's (:func:`dkpca.machine.memory_total`).
    """
    claimed = math.prod(arr.shape) * arr.dtype.itemsize
    memory = memory_total()
    if claimed <= memory:
        return
    if recorded:
        raise ValueError(f"store {store!r}: {kind} array {arr.path!r} holds {claimed:.3g} bytes (shape "
                         f"{arr.shape}), more than this machine's memory for this process ({memory:.3g} bytes), "
                         "as its record says: the model was written on a larger machine: load it on one with more "
                         f"memory (or, if the store was edited, {_FIXES.get(kind, _FIXES['model'])}).")
    raise DamagedModelError(store, f"{kind} array {arr.path!r}",
                            f"claims shape {arr.shape} ({claimed:.3g} bytes), more than this machine's "
                            f"memory ({memory:.3g} bytes) and more than any model written from memory", kind)


def read_recorded(store: str, kind: str, group: zarr.Group, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every array the group records, checked against the record: metadata before the read, digest after."""
    rec = _parsed(store, kind, group.path, attrs.get(RECORD), attrs.get("digest"))
    _check_attrs(store, kind, group.path, attrs)
    out = {}  # only recorded arrays are read: a member added since is never taken for part of the model
    for name, e in rec.items():
        arr = _open(store, kind, group, name)
        where = f"{kind} array {arr.path!r}"
        if not has_checksum(arr):
            raise DamagedModelError(store, where, "has no crc32c codec in its metadata, though its model was "
                                    "written with one", kind)
        got = {"shape": arr.shape, "chunks": arr.chunks, "dtype": arr.dtype}
        for field, value in got.items():
            if value != e[field]:
                raise DamagedModelError(store, where, f"has {field} {value} in its metadata, but {e[field]} was "
                                        "written", kind)
        _check_size(store, kind, arr, recorded=True)
        data = read_verified(arr)  # a missing chunk reads as zeros: the digest says whether that is what was written
        if digest(np.ascontiguousarray(data)) != e["digest"]:
            raise DamagedModelError(store, where, "is not what was written (its digest differs from the one "
                                    "recorded when it was saved)", kind)
        out[name] = data
    return out


def read_unrecorded(store: str, kind: str, group: zarr.Group) -> dict[str, np.ndarray]:
    """Every array of a group written before records existed: presence and CRC (or size) of each chunk."""
    try:
        names = list(group.array_keys())
    except Exception as exc:  # zarr's metadata parsing
        raise DamagedModelError(store, f"{kind} group {group.path!r}", f"has an array whose metadata zarr cannot "
                                f"read ({exc})", kind) from None
    out = {}
    for name in names:
        arr = _open(store, kind, group, name)
        _check_size(store, kind, arr)
        out[name] = read_whole(arr)
    return out


def read_group(store: str, root: zarr.Group, kind: str, name: str, recorded: bool,
               ) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """``(arrays, attrs)`` of model group ``name``; arrays None when the group is absent or not complete.

    ``recorded``: the root says this group records its arrays' digests (so it must).
    """
    try:
        g = root[name]
    except KeyError:
        return None, {}
    except Exception as exc:  # zarr's metadata parsing: attributes that are no JSON object, ...
        raise DamagedModelError(store, f"{kind} group {name!r}", f"has metadata zarr cannot read ({exc})",
                                kind) from None
    attrs = dict(g.attrs)
    if attrs.get("complete") is not True:
        return None, attrs
    if RECORD in attrs or recorded:
        if RECORD not in attrs:
            raise DamagedModelError(store, f"{kind} attribute {RECORD!r} of group {name!r}",
                                    f"is missing, though the root attribute {digests_key(kind)!r} says the group "
                                    "records its arrays' digests", kind)
        return read_recorded(store, kind, g, attrs), attrs
    return read_unrecorded(store, kind, g), attrs  # written before records existed
