"""HDF5 input (h5py, the ``h5`` extra): a dataset ``file.h5:/group/X`` read by rows, each read opening the file.

A damaged file -- its superblock, an object header, a link's name -- is refused in one line naming it: h5py
says so in an ``OSError``, a ``RuntimeError`` (a visit of the file's objects) or a ``KeyError`` (an object that
cannot be opened), and a link name that is no longer UTF-8 comes back as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .members import READABLE, file_stamp, pick_member, two_dimensional, warn_absent
from .optional import require

__all__ = ["H5Dataset", "open_h5", "warn_unwritten_h5"]


@dataclass(frozen=True)
class H5Dataset:
    """An HDF5 dataset read by rows: each read opens the file (h5py objects do not travel to workers)."""

    path: str
    name: str  # the path the user named in ``path``: a link's own target may lie in another file
    shape: tuple[int, ...]
    dtype: np.dtype
    stamp: tuple[int, ...]  # the file's and, through an external link, the target file's

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        h5py = require("h5py", "h5", "HDF5 files")
        with h5py.File(self.path, "r") as f:
            try:
                return f[self.name][key]
            except (OSError, RuntimeError) as exc:  # HDF5's own errors (no errno): a chunk or its filter damaged
                if getattr(exc, "errno", None) is not None:
                    raise  # the system's (a permission, a full disk): the CLI says those as they are
                raise ValueError(f"HDF5 file {self.path!r}: dataset {self.name!r} cannot be read ({exc}): the file "
                                 "is damaged, or was being written while it was read.") from None


def open_h5(path: str, member: str | None, source: str) -> H5Dataset:
    """The dataset ``member`` of the HDF5 file at ``path`` (None: picked, :func:`~.members.pick_member`), its
    metadata read; ``source`` as the user wrote it, for messages."""
    h5py = require("h5py", "h5", "HDF5 files")
    try:
        with h5py.File(path, "r") as f:
            return _h5_dataset(h5py, f, path, member, source)
    except (OSError, RuntimeError, KeyError) as exc:  # h5py's errors of a damaged file or object header
        raise ValueError(f"input {source!r} is not a readable HDF5 file ({exc}); dkpca reads {READABLE}.") from None


def _datasets(h5py: Any, f: Any) -> dict[str, Any]:
    """Every dataset of the file by path; a name that is not UTF-8 (h5py gives its bytes) shown as it decodes."""
    found: dict[str, Any] = {}

    def visit(name: str | bytes, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found["/" + (name.decode("utf-8", "replace") if isinstance(name, bytes) else name)] = obj

    f.visititems(visit)
    return found


def _h5_dataset(h5py: Any, f: Any, path: str, member: str | None, source: str) -> H5Dataset:
    if member is None:
        found = _datasets(h5py, f)
        every = {m: f"of records {list(d.dtype.names)}" if d.dtype.names else "empty" if d.shape is None else
                 d.shape for m, d in found.items()}
        member = pick_member(source, "HDF5", "dataset", every)
    node = f.get(member)
    if not isinstance(node, h5py.Dataset):
        raise ValueError(f"input {source!r}: the HDF5 file has no dataset {member!r}; its datasets are "
                         f"{sorted(_datasets(h5py, f))}.")
    if node.shape is None:  # a null dataspace: h5py's Empty, no values at all
        raise ValueError(f"input {source!r}: the HDF5 dataset {node.name!r} is empty (a null dataspace: no values).")
    if not node.dtype.names:  # records: as_dask names their fields as the columns to stack
        two_dimensional(source, "dataset", member, node.shape)
    warn_unwritten_h5(node, source)
    # an external link's dataset lives in another file under its own name: keep the path named here
    stamp = file_stamp(path) + (file_stamp(node.file.filename) if node.file.filename != f.filename else ())
    return H5Dataset(path, member, tuple(node.shape), node.dtype, stamp)


def warn_unwritten_h5(node: Any, source: str, kind: str = "HDF5 dataset") -> None:
    """Warn where parts of an HDF5 dataset ``node`` (h5py's) were never written (h5py stores every chunk written,
    fill values too: one not stored was never written, and reads as the fill value); ``kind`` names it."""
    if node.chunks is None:  # contiguous: its storage is allocated when first written
        absent, total = int(node.id.get_storage_size() == 0 and node.size > 0), 1
    else:
        total = int(np.prod([-(-s // c) for s, c in zip(node.shape, node.chunks, strict=True)]))
        absent = total - node.id.get_num_chunks()
    if absent:  # the fill value read only then: h5py crashed (SIGSEGV) reading a damaged one
        warn_absent(source, kind, absent, total, node.fillvalue, "HDF5 stores every chunk written, so "
                    "those were never written (a writer that stopped part way, or space only reserved)")
