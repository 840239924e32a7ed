"""Reach a running Dask scheduler (an address or a scheduler file): a client, or one :class:`ClusterError`.

Whatever distributed raises on the way -- no scheduler there, TLS asked of a
plain one or the reverse, ``tls://`` without the certificates that
``distributed.comm.tls.*`` should name (distributed: a ``TypeError`` about an
``ssl_context``), a protocol this machine lacks (``ucx://`` without UCX) -- is
a setting or an address the user can fix: it is said in one error naming the
address and the settings, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import dask.config
from dask.utils import parse_timedelta
from distributed import Client, Security
from distributed.comm import connect

from .config import ClusterConfigError, ClusterError

__all__ = ["reach", "one_line", "connect_timeout"]

#: the Dask setting that bounds a connection, as users set it (YAML key; environment variable)
TIMEOUT_KEY = "distributed.comm.timeouts.connect"


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (its type where it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def connect_timeout() -> float:
    """Seconds to wait for a scheduler: the Dask setting, refused by name where it is not a duration."""
    value = dask.config.get(TIMEOUT_KEY)
    try:
        return float(parse_timedelta(value))
    except (KeyError, ValueError, TypeError):
        raise ClusterConfigError(f"the Dask setting {TIMEOUT_KEY} is {value!r}, not a duration; use e.g. '30s' "
                                 "(environment: DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT).") from None


def _check_scheduler_file(path: str, timeout: float) -> str:
    """The scheduler's address the file names, once it exists (waited for up to ``timeout``)."""
    if os.path.isdir(path):  # nothing will write a file there: no wait
        raise ClusterError(f"scheduler file {path!r} is a directory; pass the file 'dask scheduler "
                           "--scheduler-file FILE' writes.")
    end = time.monotonic() + timeout  # the scheduler may still be writing it
    while not os.path.isfile(path) and time.monotonic() < end:
        time.sleep(0.1)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"scheduler file {path!r} does not exist (waited {timeout:g}s); start "
                                "the scheduler with 'dask scheduler --scheduler-file FILE' or fix the path.")
    try:  # distributed would fail on another file with an AssertionError or TypeError, naming neither
        with open(path, encoding="utf-8") as f:
            address = json.load(f).get("address")
    except OSError as exc:  # the file is there: what stops its reading is said (permissions), not its contents
        raise ClusterError(f"cannot read scheduler file {path!r} ({exc.strerror}); give this user read access "
                           "to it, or pass the scheduler's address instead.") from None
    except (ValueError, AttributeError):
        address = None
    if not isinstance(address, str):
        raise ClusterError(f"scheduler file {path!r} is not one a Dask scheduler wrote (JSON with its "
                           "'address'); pass the file 'dask scheduler --scheduler-file FILE' writes.")
    return address


def _handshake(address: str, timeout: float) -> None:
    """Connect to ``address`` and take its handshake, all within ``timeout`` (in a thread of its own loop).

    distributed bounds the connection but not the handshake read after it (``distributed.comm.core.connect``):
    a service that accepts and never answers (an HTTP server) held ``dkpca fit --scheduler`` 757 s and more,
    and one that sends a banner (SSH, a proxy's 400) was read as a frame of 2.8 EiB, a ``MemoryError``
    traceback.  Raises ``TimeoutError`` or what the connection raised.
    """
    args = Security().get_connection_args("client")  # distributed.comm.tls.*, as the client's own

    async def probe() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(probe())
        except BaseException as exc:  # handed to the caller's thread, whatever it is
            failed.append(exc)

    thread = threading.Thread(target=run, name="dkpca-handshake", daemon=True)
    thread.start()
    thread.join(timeout + 5)  # wait_for ends it at timeout; the margin is the loop's own start and close
    if thread.is_alive() or (failed and isinstance(failed[0], asyncio.TimeoutError)):
        raise TimeoutError(f"no Dask handshake within {timeout:g}s: something answers there that is not a Dask "
                           "scheduler")
    if failed:
        raise failed[0]


def reach(address: str | None = None, scheduler_file: str | None = None) -> Client:
    """A client of a running scheduler (its TLS settings from ``distributed.comm.tls.*``)."""
    timeout, written = connect_timeout(), None
    if scheduler_file is not None:
        scheduler_file = os.path.abspath(os.path.expanduser(os.fspath(scheduler_file)))
        written = _check_scheduler_file(scheduler_file, timeout)
    where, start = address or f"the address in {scheduler_file}", time.monotonic()
    try:
        if address or written:  # a file's too: the scheduler that wrote it may be gone, its port reused
            _handshake(address or written, timeout)
        return Client(address, scheduler_file=scheduler_file, timeout=timeout, set_as_default=True)
    except MemoryError:  # a banner's bytes read as a frame's length
        raise ClusterError(f"{where} answers, but not as a Dask scheduler (what it sent is no Dask message); check "
                           "the address and port.") from None
    # OSError, TimeoutError: nothing answers; TypeError: tls:// without certificates, or a protocol not installed;
    # ValueError, RuntimeError: an address distributed cannot parse, TLS asked of a plain-TCP scheduler
    except (OSError, TimeoutError, TypeError, ValueError, RuntimeError) as exc:
        waited = time.monotonic() - start >= 0.9 * timeout  # else it failed at once: no wait to name
        within, setting = ((f" within {timeout:g}s", f"; the wait is the Dask setting {TIMEOUT_KEY}") if waited
                           else ("", ""))
        raise ClusterError(
            f"could not reach the Dask scheduler at {where}{within} ({one_line(exc)}); check that it runs and the "
            "address, and for tls:// that distributed.comm.tls.* names your certificates (ca-file, client.cert, "
            f"client.key{setting})."
        ) from None
