"""The store's lock: one fit writes into a store at a time.

Two fits writing the same blocks would each be idempotent, but one could
delete what the other is building (``overwrite=True``) or record a model for
a Gram matrix it did not build, so concurrent writers are refused.  A lock
left by a killed process on this host is detected (its pid is gone) and taken
over, so a rerun after ``kill -9`` resumes instead of failing.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

__all__ = ["LOCK_NAME", "StoreLockedError", "exclusive"]

LOCK_NAME = ".dkpca.lock"


class StoreLockedError(RuntimeError):
    """Another fit is writing into the same store."""


@contextlib.contextmanager
def exclusive(path: str) -> Iterator[None]:
    """Hold ``<path>/.dkpca.lock`` for the duration of the block (``path`` is a local directory)."""
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
