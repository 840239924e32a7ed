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
from typing import Any

import zarr

FORMAT = "dkpca-store"
FORMAT_VERSION = 1


def version() -> str:
    from . import __version__

    return __version__


def is_url(path: str) -> bool:
    return "://" in path


def create_or_open(path: str) -> zarr.Group:
    """Open the store for writing, creating it (and marking it ours) if new.

    Raises
    ------
    ValueError
        ``path`` exists but is not a dkpca store (we never write into it).
    """
    exists = is_url(path) or os.path.exists(path)
    if exists and not is_url(path) and os.path.isdir(path) and not os.listdir(path):
        exists = False
    if exists:
        try:
            root = zarr.open_group(path, mode="r+")
        except Exception as exc:
            raise ValueError(
                f"store {path!r} exists and is not a dkpca store; choose another store path."
            ) from exc
        _check_format(root, path)
        return root
    root = zarr.open_group(path, mode="w")
    root.attrs.update({"format": FORMAT, "format_version": FORMAT_VERSION, "dkpca_version": version()})
    return root


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

    lock = os.path.join(path, ".dkpca.lock")
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
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
        with os.fdopen(fd, "w") as f:
            f.write(me)
        break
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)


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
