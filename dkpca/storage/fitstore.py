"""The dkpca store: one Zarr v3 group per fit, arrays + JSON attributes only.

This module and its siblings in :mod:`dkpca.storage` are the only code that
knows the store's layout::

    <store>/                attrs: format, format_version, dkpca_version
      .dkpca.lock           the writer's lock (:mod:`dkpca.storage.lock`)
      data/X                n x d copy of the training data (row-block chunks)
      gram/...              the Gram store (:mod:`dkpca.storage.gramstore`)
      solver/...            solver checkpoints (:mod:`dkpca.storage.checkpoint`)
      model.<hex>/...       eigenpairs, centering statistics, solver report; root attribute
                            ``model`` names the current one (see "Models" below)
      sparse_model.<hex>/   a saved :class:`~dkpca.sparse.SparseKernelPCA`; root attribute
                            ``sparse_model`` names the current one
      ritz.<hex>/           the model's leading Ritz pairs and K times them (an update's start,
                            :mod:`dkpca.growth`); root attribute ``ritz`` names the current one

Every array is created by :func:`dkpca.storage.chunks.create_array`: each
chunk carries a CRC-32C, verified on every read, and a chunk that is missing,
truncated or corrupt raises :class:`~dkpca.storage.chunks.CorruptChunkError`
naming the array and the chunk.  The copy of the data (written and read by
the mix-in :class:`~dkpca.storage.datacopy.StoredData`) also records each
chunk's digest, checked by every read.

Nothing is ever pickled.  A store that lacks the ``format`` attribute was not
written by dkpca and is refused.  Local paths are made absolute when a
:class:`FitStore` is made, so tasks running in another working directory (a
batch job's workers) read and write the same files.

A store may also be an fsspec URL that zarr opens (``s3://bucket/s.dkpca.zarr``),
which workers sharing no disk with the client reach over the network, with
fsspec's own credentials and endpoint (s3fs: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``~/.config/fsspec``).  The
local-only steps are skipped for URLs: the free-space check, the removal of
a killed writer's temporary chunk files (an object is written in one
request: there are none), raw chunk files and O_DIRECT (zarr's path is
taken).  The lock is the same lease as on disk, on the server's conditional
write (:mod:`dkpca.storage.lock`).

The models (``model.<hex>``, ``sparse_model.<hex>``, ``ritz.<hex>``) are switched by a root
attribute each, so readers never see half a model: the mix-in :class:`~dkpca.storage.slots.ModelSlots`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import zarr

from ..jsonsafe import json_safe
from ..version import __version__
from .datacopy import DATA, StoredData
from .lock import LOCK_NAME, Lease, exclusive
from .paths import check_segments, free_bytes, is_url, url_fs, without_local_scheme
from .slots import FORMAT_VERSION, MODEL, RITZ, SPARSE_MODEL, ModelSlots, present, remove_member

__all__ = ["DATA", "FitStore", "FORMAT", "FORMAT_VERSION", "MODEL", "RITZ", "SPARSE_MODEL", "json_safe",
           "remove_member"]

FORMAT = "dkpca-store"
#: versions this dkpca reads (version 1: the model in a fixed ``model`` group; see :mod:`.slots`)
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class FitStore(StoredData, ModelSlots):
    """A dkpca store at ``path`` (absolute local path or URL); small, so tasks carry it."""

    path: str

    @classmethod
    def at(cls, path: str | os.PathLike | FitStore) -> FitStore:
        """The store at ``path``; local paths (``file://`` URLs too: fsspec's spelling of one) made absolute, once."""
        if isinstance(path, FitStore):
            return path
        p = check_segments(without_local_scheme(path), "store")
        return cls(p if is_url(p) else os.path.abspath(p))

    @property
    def is_url(self) -> bool:
        return is_url(self.path)

    # -- open / create -------------------------------------------------------
    def _listing(self) -> list[str] | None:
        """Names directly under the store, files and directories alike (None: nothing there)."""
        if not self.is_url:
            if not os.path.exists(self.path):
                return None
            return os.listdir(self.path) if os.path.isdir(self.path) else [""]
        fs, where = url_fs(self.path)
        fs.invalidate_cache(where)  # zarr's own fs instance, or other processes, may have written since
        try:
            names = [e["name"].rstrip("/") for e in fs.ls(where, detail=True)]
        except FileNotFoundError:
            return None
        # an object at the store's key itself (not a prefix) lists as itself: a foreign file
        return [name.rsplit("/", 1)[-1] if name != where.rstrip("/") else "" for name in names] or None

    def _headless(self) -> str | None:
        """The refusal of a store whose root metadata is lost (missing or unreadable) but whose parts are dkpca's
        (``data``, ``gram``, a model): said as that, not as a foreign path; None if it does not look like one."""
        names = set(self._listing() or ())
        if not ({DATA, "gram"} & names or any(n.startswith(("model", "ritz")) for n in names)):
            return None
        return (f"store {self.path!r} holds a dkpca fit's parts ({', '.join(sorted(names - {''}))}) but its root "
                "metadata (zarr.json) is missing or unreadable, so dkpca cannot tell that it is its own and writes "
                "nothing into it: restore that file from a backup, or move the directory away (or remove it) to "
                "fit afresh.")

    def is_new(self) -> bool:
        """Absent, or a directory (key prefix) holding nothing but our lock (and its temporary files)."""
        names = self._listing()
        return names is None or all(name.startswith(LOCK_NAME) for name in names)

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
                root = zarr.open_group(self.path, mode=mode, use_consolidated=False)  # (see open)
            except Exception as exc:
                raise ValueError(self._headless() or f"store {self.path!r} exists and is not a dkpca store; choose "
                                 "another store path.") from exc
            self._check_format(root)
            return root
        # "a", not "w": the directory may already hold the lock of the fit creating it.
        # The attributes go into the group's first metadata write, so nobody ever
        # sees a group without them (it would look like a foreign store).
        return zarr.open_group(self.path, mode="a", attributes={"format": FORMAT, "format_version": FORMAT_VERSION,
                                                               "dkpca_version": __version__})

    def open(self, mode: str = "r") -> zarr.Group:
        """Open a store that dkpca wrote (``FileNotFoundError`` / ``ValueError`` otherwise)."""
        if self.is_new():  # nothing there, or an empty directory (a fit takes either as a new store)
            there = "does not exist" if self._listing() is None else "is empty"
            raise FileNotFoundError(f"store {self.path!r} {there}; fit a model first (dkpca fit ... --store "
                                    f"{self.path}).")
        try:  # each array's own metadata: a consolidated copy someone made of the store goes stale as it grows
            root = zarr.open_group(self.path, mode=mode, use_consolidated=False)
        except Exception as exc:
            # zarr's words name its store classes and paths; what the path holds instead is the user's to hear
            what = "is a Zarr array" if isinstance(exc, zarr.errors.ContainsArrayError) else \
                "holds no Zarr group" if isinstance(exc, zarr.errors.GroupNotFoundError) else \
                f"is no readable Zarr group ({exc})"
            raise ValueError(self._headless() or f"{self.path!r} is not a dkpca store (the Zarr group that 'dkpca "
                                                 f"fit --store' writes): it {what}.") from exc
        self._check_format(root)
        return root

    def _check_format(self, root: zarr.Group) -> None:
        fmt = root.attrs.get("format")
        if fmt != FORMAT:
            raise ValueError(f"{self.path!r} is a Zarr group but not a dkpca store (no 'format: {FORMAT}' attribute).")
        fv = root.attrs.get("format_version")
        if fv not in READABLE_VERSIONS:
            raise ValueError(f"store {self.path!r} has format_version {fv}; this dkpca reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))}.")

    @contextlib.contextmanager
    def lock(self) -> Iterator[Lease]:
        """Hold the store's writer lock (:mod:`dkpca.storage.lock`; on an object store too); yields its lease.

        A store path that is a dangling symbolic link is followed: the store
        goes where the link points (that directory is created, as a new
        store's is), never over the link.
        """
        if not self.is_url and os.path.islink(self.path) and not os.path.exists(self.path):
            target = os.path.realpath(self.path)
            try:
                os.makedirs(target, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"store {self.path!r} is a symbolic link to {os.readlink(self.path)!r}, which "
                                 f"cannot be created ({exc.strerror}); fix the link or choose another store path."
                                 ) from None
        with exclusive(self.path) as lease:
            yield lease

    def free_bytes(self) -> int | None:
        return free_bytes(self.path)

    def members(self) -> list[str]:
        """Names under the root: members, groups whose metadata a crash left unwritten, files (never a model's)."""
        return self._listing() or []

    def recopy_orphan(self, root: zarr.Group, fingerprint: dict, why: str) -> bool:
        """Whether the store's K (complete or part built) is of data of ``fingerprint``: then the data copy whose
        record is lost (``why``) is removed -- the fit copies its input again -- and K and the model are kept.

        Nothing else says what data such a copy held; K's record does, as a refit's reuse of K trusts it.
        """
        # K's group record, read where zarr can parse it (where its arrays' cannot, the build then makes K anew)
        ours = present(root, "gram", damaged=False) and root["gram"].attrs.get("fingerprint") == fingerprint
        if ours:
            logging.getLogger("dkpca").warning("store %s: the data copy %s; copied again from the input, whose "
                                               "fingerprint is its Gram matrix's (kept)", self.path, why)
            remove_member(root, DATA)
        return ours

    def discard_data(self, root: zarr.Group) -> None:
        """Before new data is copied in: withdraw the model, safely for readers, then delete the old copy and K.

        All three derive from the old data; the caller holds the store lock.
        """
        self.remove_model()
        for member in (DATA, "gram"):
            remove_member(root, member)
