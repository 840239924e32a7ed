"""The four file operations the store's lock is made of, on a local filesystem or an object store.

The lease protocol (:mod:`dkpca.storage.lock`) needs only: create a file if
it is absent, atomically (exactly one of any number of racing creators
succeeds, and the file appears complete or not at all); read a file and a
*version* of it; replace a file whole; remove a file.  :class:`LocalFiles`
does this with POSIX calls (hard link / ``O_EXCL``, ``os.replace``);
:class:`ObjectFiles` through fsspec, for stores given as URLs.

Object stores have no ``O_EXCL``.  What they have is a *conditional write*:
``PutObject`` with ``If-None-Match: *`` fails with 412 when the key exists,
decided by the server, so it is race-free across hosts (Amazon S3 since
August 2024, MinIO, Ceph RGW, and moto's server, which the tests run).
fsspec asks for it with ``pipe_file(..., mode="create")``; s3fs sends the
header.  fsspec also accepts that mode on other back ends, where "whether it
is atomic is implementation-dependent" (its documentation), so only the
protocols known to do it on the server are accepted (:data:`ATOMIC_CREATE`),
and a server that ignores the header (an older S3-compatible one) is caught
when the lock is taken: a second conditional create of the lock just created
must fail, or the store is refused (:meth:`ObjectFiles.check_conditional`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
import uuid
from typing import Any

from .paths import S3_PROTOCOLS, url_fs

__all__ = ["Seen", "LockFiles", "LocalFiles", "ObjectFiles", "lock_files", "ATOMIC_CREATE",
           "UnlockableStoreError"]

#: fsspec protocols whose ``pipe_file(mode="create")`` is a conditional write decided by the server
ATOMIC_CREATE = S3_PROTOCOLS


class UnlockableStoreError(ValueError):
    """The store's location offers no race-free create-if-absent, so concurrent fits cannot be refused."""


@dataclasses.dataclass(frozen=True)
class Seen:
    """One version of a file as read: an identity of that version, its bytes and its modification time."""

    version: str
    raw: bytes
    mtime: float


class LockFiles:
    """File operations on names inside one store directory (see the module docstring)."""

    where: str

    def prepare(self) -> None:
        """Make sure the directory exists (two fits may create the same new store at once)."""

    def create(self, name: str, data: bytes) -> bool:  # pragma: no cover - abstract
        """Create ``name`` holding ``data`` unless it exists; False if it does."""
        raise NotImplementedError

    def read(self, name: str) -> Seen | None:  # pragma: no cover - abstract
        """The file's version, bytes and mtime, or None if it is absent."""
        raise NotImplementedError

    def replace(self, name: str, data: bytes) -> None:  # pragma: no cover - abstract
        """Replace ``name`` by ``data`` whole (readers see the old bytes or the new ones)."""
        raise NotImplementedError

    def remove(self, name: str) -> None:  # pragma: no cover - abstract
        """Remove ``name`` if it exists."""
        raise NotImplementedError

    def claim(self, name: str) -> bool:  # pragma: no cover - abstract
        """Create the claim file ``name`` exclusively; False if it exists."""
        raise NotImplementedError

    def claim_age(self, name: str) -> float | None:  # pragma: no cover - abstract
        """Seconds since claim ``name`` was made, or None if it is gone."""
        raise NotImplementedError

    def check_conditional(self, name: str, data: bytes) -> None:
        """Raise :class:`UnlockableStoreError` if ``create`` just proved not exclusive (``name`` exists)."""


@dataclasses.dataclass(frozen=True)
class LocalFiles(LockFiles):
    """A local (or shared POSIX) directory."""

    where: str

    def _path(self, name: str) -> str:
        return os.path.join(self.where, name)

    def prepare(self) -> None:
        os.makedirs(self.where, exist_ok=True)

    def create(self, name: str, data: bytes) -> bool:
        """The file is written under a private name and hard-linked into place, so it appears complete
        or not at all.  Filesystems without hard links fall back to an exclusive create (written after)."""
        path = self._path(name)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        _write(tmp, data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def read(self, name: str) -> Seen | None:
        """Version: the inode number, read through the same descriptor as the bytes."""
        try:
            with open(self._path(name), "rb") as f:
                st = os.fstat(f.fileno())
                return Seen(str(st.st_ino), f.read(65536), st.st_mtime)
        except FileNotFoundError:
            return None

    def replace(self, name: str, data: bytes) -> None:
        path = self._path(name)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            _write(tmp, data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(name))

    def claim(self, name: str) -> bool:
        try:
            os.close(os.open(self._path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True

    def claim_age(self, name: str) -> float | None:
        try:
            return time.time() - os.stat(self._path(name)).st_mtime
        except FileNotFoundError:
            return None


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # a lock that survives a node crash is read whole, or not at all


@dataclasses.dataclass(frozen=True)
class ObjectFiles(LockFiles):
    """A "directory" (key prefix) of an object store, reached through fsspec.

    Objects are written whole by one request, so every write is atomic; the
    version of an object is a digest of its bytes (a lock's bytes hold a
    unique token and a heartbeat, so two versions never read the same).  A
    claim records its creation time (the claimer's clock, like a lease's
    heartbeat) in its body, as object stores have no settable mtime.
    """

    where: str
    fs: Any
    url: str

    def _path(self, name: str) -> str:
        return f"{self.where.rstrip('/')}/{name}"

    def create(self, name: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self._path(name), data, mode="create")
        except FileExistsError:  # s3fs: 412 Precondition Failed
            return False
        except FileNotFoundError as exc:  # the first write into a store: its bucket is missing
            raise FileNotFoundError(f"cannot write into the store {self.url!r} ({exc}); create the bucket first, "
                                    "or choose another store.") from exc
        return True

    def read(self, name: str) -> Seen | None:
        try:
            raw = self.fs.cat_file(self._path(name))
        except FileNotFoundError:
            return None
        # no mtime needed: leases written before object-store locks existed are local files only
        return Seen(hashlib.blake2b(raw, digest_size=16).hexdigest(), raw, 0.0)

    def replace(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(name), data)

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))

    def claim(self, name: str) -> bool:
        return self.create(name, json.dumps({"created": time.time()}).encode())

    def claim_age(self, name: str) -> float | None:
        seen = self.read(name)
        if seen is None:
            return None
        try:
            return time.time() - float(json.loads(seen.raw.decode())["created"])
        except (UnicodeDecodeError, ValueError, TypeError, KeyError):
            return float("inf")  # not a claim we wrote: debris

    def check_conditional(self, name: str, data: bytes) -> None:
        # ``name`` exists (we just created it), so a create that succeeds
        # again shows that the server ignored If-None-Match.  It rewrote the
        # same bytes, so nothing is lost; the caller removes the lock.
        if self.create(name, data):
            raise UnlockableStoreError(
                f"the object store of {self.url!r} ignored a conditional write (If-None-Match), so dkpca cannot "
                "refuse concurrent fits into this store; use an object store that supports conditional writes "
                "(Amazon S3, MinIO, Ceph RGW), or a store on a local or shared filesystem."
            )


def lock_files(path: str) -> LockFiles:
    """The lock's file operations for a store at ``path`` (a local directory or an fsspec URL).

    Raises
    ------
    UnlockableStoreError
        An fsspec protocol with no known server-side create-if-absent.
    """
    if "://" not in path:
        return LocalFiles(path)
    fs, where = url_fs(path)
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if "file" in protocols or "local" in protocols:
        return LocalFiles(where)
    if not set(protocols) & set(ATOMIC_CREATE):
        raise UnlockableStoreError(
            f"dkpca cannot lock the store {path!r}: refusing concurrent fits needs a create-if-absent decided by "
            f"the server, known for {', '.join(p + '://' for p in ATOMIC_CREATE)} and local paths, not for "
            f"{protocols[0]}://; choose a store there."
        )
    return ObjectFiles(where, fs, path)
