"""The dkpca store: one Zarr v3 group per fit, arrays + JSON attributes only.

This module and its siblings in :mod:`dkpca.storage` are the only code that
knows the store's layout::

    <store>/                attrs: format, format_version, dkpca_version
      .dkpca.lock           the writer's lock (:mod:`dkpca.storage.lock`)
      data/X                n x d copy of the training data (row-block chunks)
      gram/...              the Gram store (:mod:`dkpca.storage.gramstore`)
      solver/...            solver checkpoints (:mod:`dkpca.storage.checkpoint`)
      model/...             eigenpairs, centering statistics, solver report

Nothing is ever pickled.  A store that lacks the ``format`` attribute was not
written by dkpca and is refused.  Local paths are made absolute when a
:class:`FitStore` is made, so tasks running in another working directory (a
batch job's workers) read and write the same files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import zarr

from ..execution import compute
from ..version import __version__
from .lock import LOCK_NAME, exclusive

__all__ = ["FitStore", "FORMAT", "FORMAT_VERSION", "json_safe", "remove_member", "is_url", "free_bytes"]

FORMAT = "dkpca-store"
FORMAT_VERSION = 1

DATA = "data"
MODEL = "model"
SPARSE_MODEL = "sparse_model"


def is_url(path: str) -> bool:
    return "://" in str(path)


def json_safe(obj: Any) -> Any:
    """Convert numpy scalars/arrays nested in dicts and lists to JSON types."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def remove_member(group: zarr.Group, name: str) -> None:
    """Delete a subgroup or array of ``group``."""
    with contextlib.suppress(KeyError):
        del group[name]
    # LocalStore deletes keys but may leave empty directories behind.
    store_path = getattr(group.store, "root", None)
    if store_path is not None:
        shutil.rmtree(os.path.join(str(store_path), group.path, name), ignore_errors=True)


def free_bytes(path: str) -> int | None:
    """Free bytes on the filesystem that holds (or will hold) ``path``; None for URLs."""
    if is_url(path):
        return None
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return shutil.disk_usage(probe).free


@dataclass(frozen=True)
class FitStore:
    """A dkpca store at ``path`` (absolute local path or URL); small, so tasks carry it."""

    path: str

    @classmethod
    def at(cls, path: str | os.PathLike | FitStore) -> FitStore:
        """The store at ``path``; local paths are made absolute here, once."""
        if isinstance(path, FitStore):
            return path
        p = os.fspath(path)
        return cls(p if is_url(p) else os.path.abspath(p))

    @property
    def is_url(self) -> bool:
        return is_url(self.path)

    # -- open / create -------------------------------------------------------
    def is_new(self) -> bool:
        """Absent, or a directory holding nothing but our lock (and its temporary file)."""
        if self.is_url:
            return False
        if not os.path.exists(self.path):
            return True
        return os.path.isdir(self.path) and all(name.startswith(LOCK_NAME) for name in os.listdir(self.path))

    def check_target(self) -> None:
        """Raise ``ValueError`` now, writing nothing, if the path exists and is not a dkpca store."""
        if not self.is_new():
            self.open_for_write(mode="r")

    def open_for_write(self, mode: str = "r+") -> zarr.Group:
        """Open the store for writing, creating it (and marking it ours) if new.

        Raises
        ------
        ValueError
            The path exists but is not a dkpca store (we never write into it).
        """
        if not self.is_new():
            try:
                root = zarr.open_group(self.path, mode=mode)
            except Exception as exc:
                raise ValueError(
                    f"store {self.path!r} exists and is not a dkpca store; choose another store path."
                ) from exc
            self._check_format(root)
            return root
        # "a", not "w": the directory may already hold the lock of the fit creating it.
        # The attributes go into the group's first metadata write, so nobody ever
        # sees a group without them (it would look like a foreign store).
        return zarr.open_group(self.path, mode="a", attributes={"format": FORMAT, "format_version": FORMAT_VERSION,
                                                               "dkpca_version": __version__})

    def open(self, mode: str = "r") -> zarr.Group:
        """Open a store that dkpca wrote (``FileNotFoundError`` / ``ValueError`` otherwise)."""
        if not self.is_url and not os.path.exists(self.path):
            raise FileNotFoundError(
                f"store {self.path!r} does not exist; fit a model first (dkpca fit ... --store {self.path}).")
        try:
            root = zarr.open_group(self.path, mode=mode)
        except Exception as exc:
            raise ValueError(f"{self.path!r} is not a Zarr group written by dkpca ({exc}).") from exc
        self._check_format(root)
        return root

    def _check_format(self, root: zarr.Group) -> None:
        fmt = root.attrs.get("format")
        if fmt != FORMAT:
            raise ValueError(f"{self.path!r} is a Zarr group but not a dkpca store (no 'format: {FORMAT}' attribute).")
        fv = root.attrs.get("format_version")
        if fv != FORMAT_VERSION:
            raise ValueError(f"store {self.path!r} has format_version {fv}; this dkpca reads version {FORMAT_VERSION}.")

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's writer lock (object-store URLs are not locked: no atomic create there)."""
        if self.is_url:
            yield
            return
        with exclusive(self.path):
            yield

    def remove(self, name: str) -> None:
        """Delete a top-level member (``data``, ``gram``, ``model``, ``solver``) if present."""
        remove_member(self.open_for_write(), name)

    def free_bytes(self) -> int | None:
        return free_bytes(self.path)

    # -- training data ---------------------------------------------------------
    def store_data(self, X: da.Array, fingerprint: dict, overwrite: bool, progress: bool = False) -> da.Array:
        """Copy X into ``data/X`` once (kept if the fingerprint matches); return the copy, lazily.

        A copy of other data is an error unless ``overwrite``; then the data,
        the Gram store and the model (all derived from it) are replaced.
        """
        root = self.open_for_write()
        if DATA in root:
            attrs = dict(root[DATA].attrs)
            if attrs.get("fingerprint") == fingerprint and attrs.get("complete") and not overwrite:
                return self.training_data()
            if attrs.get("fingerprint") != fingerprint and not overwrite:
                old = attrs.get("fingerprint", {})
                raise ValueError(
                    f"store {self.path!r} was fitted on different data (store: shape {old.get('shape')}, "
                    f"checksum {old.get('checksum')}; now: shape {fingerprint.get('shape')}, checksum "
                    f"{fingerprint.get('checksum')}). Pass overwrite=True (CLI: --overwrite) to replace it, or "
                    "choose another store."
                )
            for member in (DATA, "gram", MODEL):
                remove_member(root, member)
        g = root.create_group(DATA)
        g.attrs.update({"fingerprint": fingerprint, "complete": False})
        arr = g.create_array("X", shape=X.shape, chunks=(X.chunks[0][0], X.shape[1]), dtype=X.dtype,
                             compressors=None)
        compute(da.store(X, arr, lock=False, compute=False), label="copying X into the store", progress=progress)
        g.attrs.update({"complete": True})
        return self.training_data()

    def training_array(self) -> zarr.Array:
        """The stored training data as a zarr array (for tasks reading rows)."""
        return zarr.open_array(self.path, path=f"{DATA}/X", mode="r")

    def training_data(self) -> da.Array:
        """The stored training data, lazily."""
        return da.from_zarr(self.training_array())

    # -- models ----------------------------------------------------------------
    def _write_group(self, name: str, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]],
                     attrs: dict) -> None:
        root = self.open_for_write()
        remove_member(root, name)
        g = root.create_group(name)
        for key, (data, chunks) in arrays.items():
            g.create_array(key, data=data, **({"chunks": chunks} if chunks else {}))
        g.attrs.update(json_safe({**attrs, "complete": True}))

    def _read_group(self, name: str, missing: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        root = self.open()
        if name not in root or not root[name].attrs.get("complete"):
            raise ValueError(f"store {self.path!r} holds no complete {missing}")
        g = root[name]
        return {key: arr[...] for key, arr in g.arrays()}, dict(g.attrs)

    def write_model(self, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]], attrs: dict) -> None:
        """Replace ``model/`` by ``arrays`` (name -> (data, chunks or None)) and JSON ``attrs``."""
        self._write_group(MODEL, arrays, attrs)

    def read_model(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, attrs)`` of a complete model (``ValueError`` if there is none)."""
        return self._read_group(MODEL, f"model; run dkpca fit with --store {self.path}.")

    def write_sparse_model(self, arrays: dict[str, tuple[np.ndarray, tuple[int, ...] | None]], attrs: dict) -> None:
        """Replace ``sparse_model/`` (a :class:`~dkpca.sparse.SparseKernelPCA`) by ``arrays`` and ``attrs``."""
        self._write_group(SPARSE_MODEL, arrays, attrs)

    def read_sparse_model(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, attrs)`` of a complete sparse model (``ValueError`` if there is none)."""
        return self._read_group(SPARSE_MODEL, f"sparse model; fit one and call .save({self.path!r}).")
