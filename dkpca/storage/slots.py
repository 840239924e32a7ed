"""The store's models: groups written whole and switched to by a root attribute, so readers never see half a
model -- the mix-in :class:`ModelSlots` of :class:`~dkpca.storage.fitstore.FitStore`, which provides ``path``,
``open``, ``open_for_write``, ``members``, ``check_target`` and ``lock``.

Models: readers never see half a model
--------------------------------------
Deleting the old model before writing the new one let readers loading the
store meanwhile find no model, or a group with arrays half gone (a
``KeyError``, or zarr's fill values for deleted chunk files).  So a model is
never rewritten in place:

1. the writer puts it into a fresh group with a name never used before,
   ``model.<uuid hex>``, arrays first, its ``complete`` attribute last;
2. it switches the root attribute ``model`` to that name in ONE write of the
   root's ``zarr.json``: zarr's LocalStore writes a key to a temporary file
   and renames it into place (``zarr/storage/_local.py``, ``_atomic_write``),
   and an object store replaces an object whole, so a reader sees the old
   document or the new one;
3. only then it deletes the old group, and any orphan ``model.*`` group that
   a writer killed between 1 and 2 left (the next writer does; readers never).

The group records each array's shape, chunks, data type and XXH3 digest
(attribute ``arrays``), and the switch's one write also sets the root
attribute ``model_digests`` to the group's name: every read checks the
record, and a group so named without one is refused; groups written before
records existed are read as before (:mod:`.modelrecord`).  A pointer that
cannot name a model group (``12345``, ``data``), or names one that is
missing or not complete, is damage, refused in one line: refit.

Withdrawing the model (:meth:`FitStore.remove_model`: new data, a rebuilt
Gram matrix) is the same switch, to ``null``, before the deletion.  A reader
reads the pointer, that group, then the pointer again (a seqlock): names are
never reused and a group is deleted only after the pointer has left it, so
an unchanged pointer proves nothing it read was being deleted; a changed one
means a refit switched meanwhile, and the reader starts over (a bounded
number of times, then the one-line "holds no complete model" ``ValueError``,
which is also what no pointer, or ``null``, gives).  The sparse model (root
attribute ``sparse_model``) works the same way.

The switch rewrites the root's attributes (format, format_version,
dkpca_version, pointers) read-modify-write from a fresh read.  That is safe
because there is one writer at a time: :func:`dkpca.fit` saves its model
under the store lock, :meth:`FitStore.write_sparse_model` takes that lock
itself, and whoever calls :meth:`FitStore.write_model` outside a fit must be
the store's only writer, as for any other write into a store.

Format versions: a version-1 reader looks for a fixed ``model`` group and
would call a version-2 store empty, so version 2 makes it refuse the store by
its version instead.  A version-1 store still loads here: where the pointer
attribute is absent, the fixed group of that name is the model (read-only).
The first switch or withdrawal in a version-1 store writes
``format_version: 2`` with the pointer, then deletes the fixed group; all
other members have the same layout in both versions.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import zarr
from zarr.core.sync import sync

from ..jsonsafe import json_safe
from .integrity import create_array
from .modelrecord import DamagedModelError, check_pointer, digests_key, read_group, record

__all__ = ["FORMAT_VERSION", "MODEL", "RITZ", "SPARSE_MODEL", "ModelSlots", "present", "remove_member"]

#: the store's format version (2: models switched by pointer; see "Format versions")
FORMAT_VERSION = 2
#: a reader starts over at most this many times when refits switch the model while it reads
READ_ATTEMPTS = 20

MODEL = "model"
SPARSE_MODEL = "sparse_model"
#: the model's leading Ritz pairs with their products with K: a later update's first product (dkpca.growth)
RITZ = "ritz"


def present(group: zarr.Group, name: str, *, damaged: bool = True) -> bool:
    """Whether ``group`` has a member ``name``; one whose metadata zarr cannot parse is there (``damaged``).

    zarr's ``name in group`` parses the member's ``zarr.json``, so one cut short or garbled raises json's error
    where the caller asked only whether it is there: ``damaged=True`` (there, and its reader names the damage) or
    ``False`` (no readable member: keys without usable metadata).
    """
    try:
        return name in group
    except (ValueError, TypeError):  # json's and UTF-8's decoding errors, zarr's parsing of the fields
        return damaged


def remove_member(group: zarr.Group, name: str) -> None:
    """Delete a subgroup or array of ``group``, also one whose metadata a killed writer left unwritten."""
    with contextlib.suppress(KeyError):
        del group[name]
    # LocalStore deletes keys but may leave empty directories behind; and a
    # member without metadata is no node to zarr: its keys go as a prefix.
    store_path = getattr(group.store, "root", None)
    if store_path is not None:
        shutil.rmtree(os.path.join(str(store_path), group.path, name), ignore_errors=True)
    else:
        sync(group.store.delete_dir(f"{group.path}/{name}" if group.path else name))


class ModelSlots:
    """Models written beside the old ones and switched to (see the module docstring); a mix-in of ``FitStore``."""

    path: str

    def _current(self, root: zarr.Group, kind: str) -> tuple[tuple[Any, Any], str | None, bool]:
        """``(token, group name, whether the root says it records digests)`` of the current ``kind`` model.

        The token changes with every switch.  No pointer: the version-1 layout,
        the fixed group ``kind`` (maybe absent).  A pointer that cannot name a
        ``kind`` group is refused (:func:`~.modelrecord.check_pointer`).
        """
        attrs = root.attrs.asdict()
        name = check_pointer(self.path, kind, attrs.get(kind, kind))
        return ((attrs.get("format_version"), attrs.get(kind, "<absent>")), name,
                name is not None and attrs.get(digests_key(kind)) == name)

    def _switch(self, kind: str, name: str | None) -> None:
        """Point root attribute ``kind`` at group ``name`` (None: no model) in one write; then delete the rest.

        The other root attributes are kept (read-modify-write of a fresh read:
        the caller is the only writer); the old, version-1 and orphan groups go.
        """
        root = self.open_for_write()
        attrs = root.attrs.asdict()
        switch = {kind: name, digests_key(kind): name, "format_version": FORMAT_VERSION}
        if any(key not in attrs or attrs[key] != value for key, value in switch.items()):
            root.update_attributes(switch)  # one write, not one per key: readers see all of it or none
        for member in self.members():
            if member != name and (member == kind or member.startswith(f"{kind}.")):
                remove_member(root, member)

    def _withdraw(self, kind: str) -> None:
        root = self.open_for_write()
        if root.attrs.get(kind) is not None or root.attrs.get("format_version") != FORMAT_VERSION or any(
                m == kind or m.startswith(f"{kind}.") for m in self.members()):
            self._switch(kind, None)

    def _write_group(self, kind: str, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]],
                     attrs: dict) -> None:
        root = self.open_for_write()
        name = f"{kind}.{uuid.uuid4().hex}"
        g = root.create_group(name)
        written = {}
        for key, (data, chunks) in arrays.items():
            data = np.asarray(data)
            chunks = chunks or tuple(max(1, e) for e in data.shape)  # zarr wants chunk edges >= 1
            arr = create_array(g, key, shape=data.shape, chunks=chunks, dtype=data.dtype)
            arr[...] = data
            written[key] = (arr, data)
        # each array's shape, chunks, dtype and digest, checked by every read (modelrecord)
        g.update_attributes(json_safe({**attrs, **record(written, json_safe(attrs)), "complete": True}))
        self._switch(kind, name)

    def _read_group(self, kind: str, missing: str, also: Callable[[dict, dict], Any] | None = None,
                    ) -> tuple[dict[str, np.ndarray], dict[str, Any], Any]:
        for _ in range(READ_ATTEMPTS):
            root = self.open()
            token, name, recorded = self._current(root, kind)
            if name is None:
                raise ValueError(self._none(kind, missing))
            arrays, attrs, extra, error = None, {}, None, None
            try:
                arrays, attrs = read_group(self.path, root, kind, name, recorded)
                if arrays is not None:
                    extra = also(arrays, attrs) if also is not None else None
            except Exception as exc:  # judged once we know whether a refit switched meanwhile
                error = exc
            if self._current(self.open(), kind)[0] != token:
                continue  # switched while we read: what we read may be gone or mixed; read the new model
            if error is not None:
                raise error
            if arrays is None:
                if name == kind:  # the version-1 layout: no model yet, or its writer was killed
                    raise ValueError(self._none(kind, missing))
                # a pointer is switched only to a complete group, and a group deleted only after it left
                raise DamagedModelError(self.path, f"root attribute {kind!r}", f"names group {name!r}, which is "
                                        f"{'missing' if name not in root else 'not marked complete'}", kind)
            return arrays, attrs, extra
        raise ValueError(f"{self._none(kind, missing)} (It was replaced {READ_ATTEMPTS} times while being read; "
                         "retry.)")

    def _none(self, kind: str, missing: str) -> str:
        """The line for no complete ``kind`` model; a kernel PCA model's names a sparse model that is there."""
        there = kind == MODEL and self.model_group(SPARSE_MODEL) is not None
        hint = f"; the sparse model saved there loads with dkpca.SparseKernelPCA.load({self.path!r})" if there else ""
        return f"store {self.path!r} holds no complete {missing}{hint}."

    def model_group(self, kind: str = MODEL) -> str | None:
        """Name of the group holding the current ``kind`` (``model``/``sparse_model``) model, if any."""
        root = self.open()
        _, name, _ = self._current(root, kind)
        return name if name is not None and present(root, name) else None

    def model_attrs(self, kind: str = MODEL) -> dict[str, Any] | None:
        """The current ``kind`` model's attributes as they are (what callers compare with, not compute with: a
        load checks them), or None where there is none; ``{}`` where its metadata is unreadable (a load says so)."""
        name = self.model_group(kind)
        try:
            return None if name is None else self.open()[name].attrs.asdict()
        except (ValueError, TypeError):  # its zarr.json cut short or garbled: nothing to compare with
            return {}

    def remove_model(self) -> None:
        """Withdraw the model (data or Gram matrix replaced): readers then see "no complete model".

        The pointer is cleared (one atomic write) before any group is deleted;
        the caller holds the store lock.
        """
        self._withdraw(MODEL)
        self._withdraw(RITZ)

    def write_model(self, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]], attrs: dict) -> None:
        """Replace the model by ``arrays`` (name -> (data, chunks or None)) and JSON ``attrs``.

        Written beside the old one, then switched to; the caller is the only writer (``fit`` holds the lock).
        """
        self._write_group(MODEL, arrays, attrs)

    def read_model(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, attrs)`` of a complete model (``ValueError`` if there is none)."""
        return self.read_model_with(None)[:2]

    def read_model_with(self, also: Callable[[dict, dict], Any] | None) -> tuple[dict, dict[str, Any], Any]:
        """:meth:`read_model` plus ``also(arrays, attrs)``, read in the same window as the model.

        For reads that must match the model (the Gram matrix's kernel, the data): both are read again when a
        refit switches the model meanwhile; ``also``'s errors are raised if none did.
        """
        return self._read_group(MODEL, f"model; run dkpca fit with --store {self.path}", also)

    def write_ritz(self, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]], attrs: dict) -> None:
        """Replace the Ritz record (:data:`RITZ`), as a model is replaced; ``attrs`` name the model it belongs to."""
        self._write_group(RITZ, arrays, attrs)

    def withdraw_ritz(self) -> None:
        """No Ritz record (a model whose solver makes none replaced the one it belonged to)."""
        self._withdraw(RITZ)

    def read_ritz(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, attrs)`` of the Ritz record, checked as a model is (``ValueError`` if there is none)."""
        return self._read_group(RITZ, "record of Ritz pairs")[:2]

    def write_sparse_model(self, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]], attrs: dict) -> None:
        """Replace the sparse model (a :class:`~dkpca.sparse.SparseKernelPCA`) by ``arrays`` and ``attrs``.

        Under the store lock; a path that exists and is not a dkpca store is refused first.
        """
        self.check_target()
        with self.lock():
            self._write_group(SPARSE_MODEL, arrays, attrs)

    def read_sparse_model(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, attrs)`` of a complete sparse model (``ValueError`` if there is none)."""
        return self._read_group(SPARSE_MODEL, f"sparse model; fit one and call .save({self.path!r})")[:2]
