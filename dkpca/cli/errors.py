"""The CLI's one error line, and which exceptions are the user's to fix (:func:`explain`).

Every error a user causes and can fix is one line on stderr, ``dkpca: error:
...``, exit status 2, nothing printed before it; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import errno
import inspect
import logging
import sys
from typing import Any

__all__ = ["error", "error_line", "explain", "hush_abandoned_io"]


#: system errors a user causes and can fix, with what to do
_USER_ERRNOS = {
    errno.ENOSPC: "the filesystem is full; free space, or write the store (--store) or transform's output on a larger "
                  "filesystem, then rerun to resume",
    errno.EDQUOT: "the disk quota is exceeded; free space or choose another store (--store), then rerun to resume",
    # a read (the input) or a write (the store, an output): the path the error names says which
    errno.EACCES: "dkpca may not read or write it: check its permissions, or choose another path",
    errno.EPERM: "dkpca may not read or write it: check its permissions, or choose another path",
    errno.EROFS: "the filesystem is read-only; choose a writable store or output path",
}


def error_line(message: str) -> str:
    """The one ``dkpca: error:`` line (a message never spans lines)."""
    return "dkpca: error: " + " ".join(message.split()) + "\n"


def error(message: str) -> int:
    """Print the one error line; exit status 2."""
    sys.stderr.write(error_line(message))
    return 2


#: what asyncio says at exit of work a command left unfinished when it stopped (an error, Ctrl-C, SIGTERM): zarr's
#: reads and writes, distributed's comms, still pending on their event loops' threads, or failed unread (an exclusive
#: create whose file another create made first, which zarr would have taken as done)
_ABANDONED = ("Task was destroyed but it is pending!", "Future exception was never retrieved")


def _not_abandoned(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_ABANDONED)


def hush_abandoned_io() -> None:
    """Once a command has stopped early, what it left in flight is garbage at exit, and Python would print each piece
    after the one line: zarr's reads still pending when one of them failed (an unreachable endpoint, whose client
    retries), as "Exception ignored in: <coroutine ...>", and asyncio's reports of tasks destroyed while pending.
    Those, and only those, are dropped (installed once, for the process)."""
    previous = sys.unraisablehook
    if getattr(previous, "dkpca", False):
        return

    def hook(unraisable: Any) -> None:
        obj = unraisable.object
        if inspect.iscoroutine(obj) and "/zarr/" in obj.cr_code.co_filename.replace("\\", "/"):
            return
        previous(unraisable)

    hook.dkpca = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_not_abandoned)


def explain(exc: BaseException) -> str | None:
    """The one-line message for an error the user caused and can fix; None for a bug (keep the traceback)."""
    # imported only once an error happened: importing them costs ``dkpca --help`` seconds
    from distributed.scheduler import KilledWorker
    from scipy.sparse.linalg import ArpackNoConvergence

    from ..cluster import ClusterError
    from ..execution import LostComputationError
    from ..request import StoreBesideInputError
    from ..storage import InsufficientDiskSpace, StoreLockedError
    from ..storage.paths import no_credentials, unreachable

    if isinstance(exc, ImportError) and (exc.name or "").startswith("dkpca"):
        return None  # dkpca's own import failing is a bug, not a missing extra
    if isinstance(exc, (ValueError, FileNotFoundError, FileExistsError, InsufficientDiskSpace, StoreLockedError,
                        NotADirectoryError, ImportError, ClusterError, LostComputationError, StoreBesideInputError)):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in _USER_ERRNOS:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}: {_USER_ERRNOS[exc.errno]}"
    if isinstance(exc, PermissionError):  # no errno: an object store's refusal (s3fs: an unknown key, a denied bucket)
        return (f"permission denied ({exc}); check the credentials fsspec uses for the URL (for s3://, the AWS_* "
                "variables or profile) and that they may read the input and write the store, or choose another path")
    if no_credentials(exc):  # before unreachable, which it is too
        return (f"no credentials for the storage ({exc}); give them as fsspec's back end reads them (for s3://: "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), then rerun")
    if unreachable(exc):
        return (f"cannot reach the storage ({exc}); check the endpoint (for s3://, AWS_ENDPOINT_URL) and the "
                "network, then rerun")
    if isinstance(exc, ArpackNoConvergence):  # --solver arpack asked for by name (auto moves to block Lanczos)
        return (f"{exc}: ARPACK's tolerance is relative to each eigenvalue, which near-zero ones never meet; use "
                "--solver lanczos (or auto), or ask for fewer components")
    if isinstance(exc, KilledWorker):
        return (f"a task kept killing its worker ({exc}); it probably ran out of memory: use a smaller "
                "--chunk-size or give the workers more memory, then rerun (finished blocks are kept)")
    return None
