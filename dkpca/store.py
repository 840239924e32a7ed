"""The dkpca store: one Zarr v3 group per fit, arrays + JSON attributes only.

Layout (see README, "The store")::

    <store>/                attrs: format, format_version, dkpca_version
      data/X                n x d copy of the training data (row-block chunks)
      gram/K                n x n kernel, square chunks, blocks i <= j only
      gram/partial_sums     nb x n: [J, rows of I] = sum over columns of block J
      gram/diag             n: k(x_i, x_i) as stored
      gram/done             nb x nb uint8 completion markers, one chunk per block
      gram/row_sums         n, float64 (written once every block is done)
      model/...             eigenpairs, centering statistics, solver report

Nothing is ever pickled.  A store that lacks the ``format`` attribute was not
written by dkpca and is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from typing import Any

import zarr

FORMAT = "dkpca-store"
FORMAT_VERSION = 1


def version() -> str:
    from . import __version__

    return __version__


def is_url(path: str) -> bool:
    return "://" in path


LOCK_NAME = ".dkpca.lock"


def _is_new(path: str) -> bool:
    """Absent, or a directory holding nothing but our lock (and its temporary file): a store being created."""
    if is_url(path):
        return False
    if not os.path.exists(path):
        return True
    return os.path.isdir(path) and all(name.startswith(LOCK_NAME) for name in os.listdir(path))


def check_target(path: str) -> None:
    """Raise ``ValueError`` now, writing nothing, if ``path`` exists and is not a dkpca store."""
    if not _is_new(path):
        create_or_open(path, mode="r")


def create_or_open(path: str, mode: str = "r+") -> zarr.Group:
    """Open the store for writing, creating it (and marking it ours) if new.

    Raises
    ------
    ValueError
        ``path`` exists but is not a dkpca store (we never write into it).
    """
    if not _is_new(path):
        try:
            root = zarr.open_group(path, mode=mode)
        except Exception as exc:
            raise ValueError(
                f"store {path!r} exists and is not a dkpca store; choose another store path."
            ) from exc
        _check_format(root, path)
        return root
    # "a", not "w": the directory may already hold the lock of the fit creating it.
    # The attributes go into the group's first metadata write, so nobody ever
    # sees a group without them (it would look like a foreign store).
    return zarr.open_group(path, mode="a", attributes={"format": FORMAT, "format_version": FORMAT_VERSION,
                                                       "dkpca_version": version()})


def open_existing(path: str, mode: str = "r") -> zarr.Group:
    """Open a store that dkpca wrote (``FileNotFoundError`` / ``ValueError`` otherwise)."""
    if not is_url(path) and not os.path.exists(path):
        raise FileNotFoundError(f"store {path!r} does not exist; fit a model first (dkpca fit ... --store {path}).")
    try:
        root = zarr.open_group(path, mode=mode)
    except Exception as exc:
        raise ValueError(f"{path!r} is not a Zarr group written by dkpca ({exc}).") from exc
    _check_format(root, path)
    return root


def _check_format(root: zarr.Group, path: str) -> None:
    fmt = root.attrs.get("format")
    if fmt != FORMAT:
        raise ValueError(f"{path!r} is a Zarr group but not a dkpca store (no 'format: {FORMAT}' attribute).")
    fv = root.attrs.get("format_version")
    if fv != FORMAT_VERSION:
        raise ValueError(
            f"store {path!r} has format_version {fv}; this dkpca reads version {FORMAT_VERSION}."
        )


def remove_member(root: zarr.Group, name: str) -> None:
    """Delete a subgroup or array (used for ``overwrite=True``)."""
    with contextlib.suppress(KeyError):
        del root[name]
    # LocalStore deletes keys but may leave empty directories behind.
    store_path = getattr(root.store, "root", None)
    if store_path is not None:
        shutil.rmtree(os.path.join(str(store_path), root.path, name), ignore_errors=True)


def json_safe(obj: Any) -> Any:
    """Convert numpy scalars/arrays nested in dicts and lists to JSON types."""
    import numpy as np

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


class StoreLockedError(RuntimeError):
    """Another fit is writing into the same store."""


@contextlib.contextmanager
def exclusive(path: str):
    """Hold ``<store>/.dkpca.lock`` for the duration of a fit.

    Two fits writing the same blocks would each be idempotent, but one could
    delete what the other is building (``overwrite=True``) or record a model for
    a Gram matrix it did not build, so concurrent writers are refused.  A lock
    left by a killed process on this host is detected (its pid is gone) and
    taken over, so a rerun after ``kill -9`` resumes instead of failing.
    Object-store URLs are not locked (no atomic create-if-absent there).
    """
    if is_url(path):
        yield
        return
    import socket

    # Two fits may create the same new store at once: the directory is made
    # first (idempotent) so that the lock decides between them.
    os.makedirs(path, exist_ok=True)
    lock = os.path.join(path, LOCK_NAME)
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        if _create_with(lock, me):
            break
        try:
            with open(lock) as f:
                host, pid = f.read().split()
        except (OSError, ValueError):
            host, pid = "", "0"
        if host == socket.gethostname() and not _pid_alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
            continue
        raise StoreLockedError(
            f"store {path!r} is in use by another fit (process {pid} on {host or 'unknown host'}); "
            f"wait for it to finish, or remove {lock} if that process is gone."
        ) from None
    else:
        raise StoreLockedError(f"store {path!r}: could not take {lock} (another fit keeps replacing it); retry.")
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)


def _create_with(path: str, text: str) -> bool:
    """Create ``path`` holding ``text`` unless it exists; False if it does.

    The file is written under a private name and hard-linked into place, so
    it appears complete or not at all: a competing fit never reads an empty
    lock (it would name no owner).  Filesystems without hard links fall back
    to an exclusive create.
    """
    import socket

    tmp = f"{path}.{socket.gethostname()}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
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
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def chunk_file(arr: zarr.Array, coords: tuple[int, ...]) -> str | None:
    """Path of chunk ``coords`` if it is a plain native-order file we may use directly.

    Only for arrays whose single codec is ``bytes`` (no compression, no
    transposition) in a LocalStore with the default ``c/I/J`` keys -- exactly
    how :mod:`dkpca.gram` lays out K.  Anything else (object stores, other
    codecs) returns None and goes through zarr.  zarr's own read and write
    paths cost about twice a plain ``readinto``/``write`` of a 64 MB chunk
    (measured), and every solver pass reads all of K.
    """
    import sys

    from zarr.storage import LocalStore

    if not isinstance(arr.store, LocalStore) or sys.byteorder != "little":
        return None
    meta = arr.metadata.to_dict()
    codecs = meta.get("codecs", ())
    if len(codecs) != 1 or codecs[0].get("name") != "bytes":
        return None
    enc = meta.get("chunk_key_encoding", {})
    if enc.get("name") != "default" or enc.get("configuration", {}).get("separator", "/") != "/":
        return None
    return os.path.join(str(arr.store.root), arr.path, "c", *map(str, coords))


@dataclass(frozen=True)
class ChunkWriter:
    """Writes whole chunks of one array; small and plain, so tasks carry it.

    A task holding a writer opens no zarr metadata per block (measured ~7 ms a
    block for the four arrays a Gram task touches).  On a plain local layout
    (see :func:`chunk_file`) a full, C-contiguous chunk is written straight
    from its buffer to a temporary file renamed into place, so a reader or a
    crash never sees half a chunk; anything else (edge chunks, object stores,
    compressed arrays) goes through zarr, which also writes whole chunks.
    """

    store: str
    path: str
    chunks: tuple[int, ...]
    dtype: str
    raw_dir: str | None
    direct: bool = False

    @classmethod
    def of(cls, store: str, arr: zarr.Array, direct: bool = False) -> ChunkWriter:
        """Writer for ``arr``, an array of the store opened from path or URL ``store``.

        ``direct=True`` writes whole raw chunks with ``O_DIRECT`` (see
        :func:`_write_direct`), for arrays larger than the page cache absorbs.
        """
        return cls(store=store, path=arr.path, chunks=tuple(arr.chunks), dtype=str(arr.dtype),
                   raw_dir=chunk_file(arr, ()), direct=direct)

    def write(self, coords: tuple[int, ...], data: Any, visit: Any = None, strip_bytes: int = 1 << 20) -> None:
        """Write chunk ``coords``; ``data`` covers its region (smaller at the edges).

        ``visit(s, e)``, if given, is called on each row strip ``data[s:e]``
        just before that strip is written, while it is in cache: a caller
        reducing over the block (row and column sums) then reads it from
        memory once instead of twice.
        """
        import threading

        import numpy as np

        rows = data.shape[0] if data.ndim < 2 else max(1, strip_bytes // max(1, data[0].nbytes))
        strips = [(s, min(s + rows, data.shape[0])) for s in range(0, data.shape[0], rows)]
        raw = (self.raw_dir is not None and tuple(data.shape) == self.chunks and data.dtype == self.dtype
               and data.flags.c_contiguous)
        if raw:
            path = os.path.join(self.raw_dir, *map(str, coords))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.partial"
        if raw and not self.direct:
            # buffered: each strip is visited just before it is copied out
            with open(tmp, "wb", buffering=0) as f:
                for s, e in strips:
                    if visit is not None:
                        visit(s, e)
                    f.write(memoryview(np.asarray(data[s:e])).cast("B"))
            os.replace(tmp, path)
            return
        if visit is not None:
            for s, e in strips:
                visit(s, e)
        if raw:
            if not _write_direct(tmp, data):
                with open(tmp, "wb", buffering=0) as f:
                    f.write(memoryview(data).cast("B"))
            os.replace(tmp, path)
            return
        arr = zarr.open_array(self.store, path=self.path, mode="r+")
        arr[tuple(slice(c * s, c * s + e) for c, s, e in zip(coords, self.chunks, data.shape, strict=True))] = data


def _write_direct(path: str, data: Any) -> bool:
    """Write ``data``'s bytes to a new file with ``O_DIRECT``; False if unsupported here.

    Measured on this project's machine: a Gram build whose K (7.7 GB at n =
    60,000) outgrows what the page cache absorbs before writeback throttles
    it writes 2x faster this way (the device DMAs from our buffer, no copy
    through the page cache, no dirty-page throttling).  For a K that fits
    comfortably in memory buffered writes are as fast and leave K cached for
    the solver's passes, so the caller decides (:mod:`dkpca.gram`).  The
    buffer must be page-aligned (dkpca's scratch buffers are); a tail that is
    not a multiple of 4 KiB is written by an ordinary write.
    """
    from ._workspace import ALIGN

    flag = getattr(os, "O_DIRECT", 0)
    if not flag or not data.flags.c_contiguous or data.ctypes.data % ALIGN:
        return False
    mv = memoryview(data).cast("B")
    head = len(mv) - len(mv) % ALIGN
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o644)
    except OSError:  # e.g. tmpfs: EINVAL
        return False
    try:
        done = 0
        while done < head:
            done += os.write(fd, mv[done:head])
    except OSError:
        os.close(fd)
        return False
    os.close(fd)
    if head < len(mv):
        with open(path, "r+b", buffering=0) as f:
            f.seek(head)
            f.write(mv[head:])
    return True
