"""The store's lock: one fit writes into a store at a time, under a lease.

Two fits writing the same blocks would each be idempotent, but one could
delete what the other is building (``overwrite=True``) or record a model for
a Gram matrix it did not build, so concurrent writers are refused.

Batch jobs are killed at walltime and requeued on another node, so a lock
cannot be "held for ever": it is a *lease*.  ``<store>/.dkpca.lock`` is a
small JSON document::

    {"host": "node042", "pid": 12345, "token": "<uuid4 hex>", "heartbeat": 1763870000.5, "lease": 300.0}

A daemon thread rewrites it with a fresh ``heartbeat`` every ``lease / 3``
seconds while the fit runs.  A rerun, on any host, takes the lock over when

* the file is empty or unparsable (the lock is created by hard-linking a
  complete file into place, so a short file is debris of a crash, never a
  lock being written);
* its lease has run out: ``time.time() - heartbeat > lease`` (the holder's
  recorded lease).  Wall-clock time is compared across hosts: clocks are
  assumed to agree to well within a lease (NTP on a cluster: milliseconds,
  leases: minutes);
* its heartbeat lies more than a lease in the future: no live holder can
  have written it (clocks agree to well within a lease), so the file is
  corrupt or was edited -- and unlike an old heartbeat it would never run
  out, refusing every rerun for ever (a requeued batch job, unattended);
* or it names this host and a pid that is gone (a ``kill -9`` on this host
  is taken over at once, without waiting for the lease).

A heartbeat that is not a number, or not finite, is an unparsable lock (the
first case).

The lease length is the Dask config key ``dkpca.lease`` (seconds, default
300; environment ``DASK_DKPCA__LEASE``).

The same lease guards a store on an object store (``s3://...``): the lock
is the object ``<store>/.dkpca.lock``, and every operation below is one of
four file operations (:mod:`dkpca.storage.lockfiles`): create-if-absent,
read, replace whole, remove.  On a local filesystem they are POSIX calls; on
an object store, requests through fsspec, where create-if-absent is a
conditional write (``If-None-Match: *``) that the server decides.  A
version of the lock (below: "inode") is, on an object store, a digest of its
bytes.

Who may change the lock file (the race-free argument)
-----------------------------------------------------
Creating a lock where there is none is atomic (hard link, create-if-absent),
so only *changing or removing an existing* lock needs care: two reruns that
both judged the same lock stale must not both replace it, a release must not
delete a lock that a rerun has just put in its place, and a heartbeat must
not overwrite a lock that is no longer ours.  POSIX has no compare-and-swap
on a file, so every change goes through a *claim* of the exact version seen:

1. read the lock through one descriptor: its inode number and bytes (the
   bytes hold the holder's unique token and heartbeat, so a refreshed or
   replaced lock never reads the same as the version judged);
2. create ``<lock>.claim-<inode>.<round>`` exclusively (``O_EXCL``: of all
   processes trying, exactly one succeeds);
3. re-read the lock; go on only if it is still that inode with those bytes;
4. change it (``os.replace`` of a complete temporary file, or ``unlink``);
5. remove the claim.

Every writer of an existing lock -- takeover, heartbeat, release -- claims
first, and creation needs the path to be absent, so while a process holds the
claim of the version at the path and has seen it there (step 3), nobody else
can change it: step 4 changes exactly the version judged.  The loser of a
race fails step 2 (or 3), retries from the start and then sees the winner's
fresh lock: refused.  Claims are named by inode number, which the filesystem
may reuse, but step 3 also compares the bytes (a unique token and a
heartbeat), so a reused number never passes for the version judged.
(Renaming the stale file aside first, then checking what was moved, is not
enough: the rename moves whatever is at the path by then, possibly a winner's
fresh lock, and putting that back can collide with a third rerun.)  A claimer
killed between steps 2 and 5 leaves its claim file behind; a claim older than
a lease is such debris and the next *round* number is tried instead (and the
winner removes it), so no leftover blocks reruns for ever.  Like every lease,
this assumes no process stalls for longer than a lease in the middle of steps
2-5 (milliseconds of work).  On a filesystem without hard links the lock is
created with ``O_EXCL`` and written afterwards; a rerun that reads it in that
instant sees an empty lock and may take it over (the holder then notices at
its next heartbeat and logs a warning).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ..config import seconds_setting
from .lockfiles import LockFiles, Seen, UnlockableStoreError, lock_files

__all__ = ["LOCK_NAME", "StoreLockedError", "LeaseLostError", "Lease", "Fenced", "UnlockableStoreError",
           "exclusive", "lease_seconds"]

LOCK_NAME = ".dkpca.lock"
_ATTEMPTS = 30  # acquisition retries while other processes change the lock
_ROUNDS = 8  # claim rounds per lock version (each one skips a crashed claimer's debris)

logger = logging.getLogger("dkpca")


class StoreLockedError(RuntimeError):
    """Another fit is writing into the same store."""


class LeaseLostError(StoreLockedError):
    """A write refused: the fit that started it no longer holds the store's lock."""


def _holds(seen: Seen | None, token: str) -> bool:
    """Whether the lock version ``seen`` is the one of the holder with ``token``."""
    doc = _holder(seen) if seen is not None else None
    return doc is not None and doc["token"] == token


@dataclasses.dataclass(frozen=True)
class Lease:
    """A held lock as the fit's writers carry it, to Dask workers too: the store and the holder's token.

    A task can outlive its fit: a local scheduler or a cluster gives up on a
    computation at its first error or an interrupt while tasks already
    running go on, and a batch job's workers keep running after its client
    was killed.  Such a straggler must not write into a store that is no
    longer its fit's -- after a refit with ``overwrite`` it would leave an
    old kernel's block there under a valid done marker -- so every block
    write checks the lease first (:meth:`check`: one read of the small lock
    file, beside a block's megabytes).
    """

    path: str
    token: str

    def check(self) -> None:
        """Raise :class:`LeaseLostError` unless the store's lock is still this lease's."""
        if not _holds(lock_files(self.path).read(LOCK_NAME), self.token):
            raise LeaseLostError(
                f"store {self.path!r}: write refused: the fit that started it no longer holds the store's lock "
                "(it was interrupted or failed, or its lease ran out and another fit took the store over).")


def lease_seconds() -> float:
    """The lease length: Dask config ``dkpca.lease`` (seconds; default in ``dkpca/dkpca.yaml``: 300)."""
    return seconds_setting("dkpca.lease")


def _holder(seen: Seen) -> dict | None:
    """The parsed lock, or None if it is empty, unparsable or incomplete."""
    try:
        doc = json.loads(seen.raw.decode())
        if not isinstance(doc, dict):
            return None
        doc["pid"], doc["heartbeat"], doc["lease"] = int(doc["pid"]), float(doc["heartbeat"]), float(doc["lease"])
        doc["host"], doc["token"] = str(doc["host"]), str(doc["token"])
    except (UnicodeDecodeError, ValueError, TypeError, KeyError):
        return _legacy(seen)
    # A lease that never runs out (NaN, negative, infinite) would be a lock for ever: treat as debris.
    ok = math.isfinite(doc["heartbeat"]) and math.isfinite(doc["lease"]) and doc["lease"] > 0
    return doc if ok else None


def _legacy(seen: Seen) -> dict | None:
    # dkpca before leases wrote "host pid" and never refreshed it: its
    # heartbeat is the file's mtime, so a live old-version fit on this host
    # is still refused (pid check), and one elsewhere until a lease passes.
    parts = seen.raw.decode(errors="replace").split()
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    return {"host": parts[0], "pid": int(parts[1]), "token": "", "heartbeat": seen.mtime, "lease": lease_seconds()}


@dataclasses.dataclass
class _Holding:
    """Our side of a held lock (the heartbeat thread's state)."""

    files: LockFiles
    token: str
    lease: float
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def lock(self) -> str:
        """The lock's location, for messages."""
        return f"{self.files.where.rstrip('/')}/{LOCK_NAME}"

    def document(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                           "heartbeat": time.time(), "lease": self.lease}).encode()


@dataclasses.dataclass(frozen=True)
class Fenced:
    """A target of ``dask.array.store`` whose every chunk write checks ``lease`` first (see :class:`Lease`)."""

    target: Any
    lease: Lease

    def __setitem__(self, index: Any, value: Any) -> None:
        self.lease.check()
        self.target[index] = value


@contextlib.contextmanager
def exclusive(path: str, what: str = "store", by: str = "fit") -> Iterator[Lease]:
    """Hold ``<path>/.dkpca.lock`` for the duration of the block (``path``: a local directory or a URL).

    Yields the :class:`Lease` the fit's writers check before they write.
    ``what`` and ``by`` name the directory and its writer in a refusal (a
    transform's output is locked alike: ``what="output", by="transform"``).

    Raises
    ------
    StoreLockedError
        Another fit holds a live lease on the store.
    UnlockableStoreError
        ``path`` is a URL whose store cannot create a file race-free (see :mod:`dkpca.storage.lockfiles`).
    ValueError
        The Dask config ``dkpca.lease`` is not a positive number.
    """
    lease = lease_seconds()
    files = lock_files(path)
    # Two fits may create the same new store at once: the directory is made
    # first (idempotent) so that the lock decides between them.
    files.prepare()
    me = _Holding(files, uuid.uuid4().hex, lease)
    _acquire(f"{what} {path!r}", me, by)
    beat = threading.Thread(target=_heartbeat, args=(me,), name="dkpca-lease", daemon=True)
    beat.start()
    try:
        yield Lease(path, me.token)
    finally:
        me.stop.set()
        beat.join()  # no heartbeat may claim our version while we release it
        _release(me)


def _acquire(named: str, me: _Holding, by: str) -> None:
    for attempt in range(_ATTEMPTS):
        doc = me.document()
        if me.files.create(LOCK_NAME, doc):
            try:
                me.files.check_conditional(LOCK_NAME, doc)
            except UnlockableStoreError:
                me.files.remove(LOCK_NAME)
                raise
            return
        seen = me.files.read(LOCK_NAME)
        if seen is None:
            continue  # released meanwhile: try to create it again
        holder = _holder(seen)
        why = _stale_reason(holder)
        if why is None:
            assert holder is not None
            age = max(0.0, time.time() - holder["heartbeat"])  # a holder's clock a little ahead: just now
            raise StoreLockedError(
                f"{named} is in use by another {by} (process {holder['pid']} on {holder['host']}, heartbeat "
                f"{age:.0f} s ago, lease {holder['lease']:g} s); wait for it to finish, or for its lease to run "
                f"out if it was killed."
            )
        if _change(me.files, seen, me.lease, me.document()):
            logger.warning("took over the lock %s: %s", me.lock, why)
            return
        # Another process is changing this lock (taking it over too): look again shortly.
        time.sleep(min(0.01 * (attempt + 1), 0.2))
    raise StoreLockedError(
        f"{named}: could not take {me.lock} (other processes keep changing it); retry."
    )


def _stale_reason(doc: dict | None) -> str | None:
    """Why a lock may be taken over, or None if its holder is alive."""
    if doc is None:
        return "the lock file is empty or unreadable"
    age = time.time() - doc["heartbeat"]
    if age > doc["lease"]:
        return f"the lease of process {doc['pid']} on {doc['host']} ran out ({age:.0f} s > {doc['lease']:g} s)"
    if -age > doc["lease"]:
        # A batch user's rerun expects a corrupt lock to be taken over, as an unparsable one is, rather than a
        # refusal no wait can cure. Should a live holder's clock really run ahead by more than a lease (against
        # the assumption above), its writers then find the lease lost (LeaseLostError) and write nothing more.
        return (f"its heartbeat is {-age:.0f} s in the future, more than its lease ({doc['lease']:g} s): no live "
                "holder writes that, so the lock file is corrupt")
    if doc["host"] == socket.gethostname() and not _pid_alive(doc["pid"]):
        return f"process {doc['pid']} on this host is gone"
    return None


def _heartbeat(me: _Holding) -> None:
    """Refresh our lock's heartbeat every lease/3 s, until told to stop or the lock is no longer ours."""
    while not me.stop.wait(me.lease / 3):
        try:
            seen = me.files.read(LOCK_NAME)
            if not _holds(seen, me.token):
                break
            assert seen is not None
            # A failed change is not proof of loss (a rerun may be claiming an
            # older lock whose inode number ours reuses): the next beat's read decides.
            _change(me.files, seen, me.lease, me.document())
        except Exception as exc:  # a transient filesystem or network error: keep the fit going, try again
            logger.warning("could not refresh the lock %s: %s", me.lock, exc)
    else:
        return
    logger.warning("the lock %s was taken over by another fit (our lease ran out); this fit no longer holds "
                   "the store exclusively", me.lock)


def _release(me: _Holding) -> None:
    """Remove the lock only if it is still ours (compare, under a claim, before delete)."""
    for attempt in range(_ATTEMPTS):
        seen = me.files.read(LOCK_NAME)
        if not _holds(seen, me.token):
            return  # taken over after our lease ran out: it is someone else's now
        assert seen is not None
        if _change(me.files, seen, me.lease, None):
            return
        time.sleep(min(0.01 * (attempt + 1), 0.2))  # a claim is in flight: look again
    logger.warning("could not remove the lock %s; it expires with its lease", me.lock)


def _claim_name(seen: Seen, rnd: int) -> str:
    return f"{LOCK_NAME}.claim-{seen.version}.{rnd}"


def _change(files: LockFiles, seen: Seen, lease: float, new: bytes | None) -> bool:
    """Replace the lock by ``new`` (remove it if None) if it is still the version ``seen``.

    False if another process holds the claim of that version or the lock
    changed since it was read (see the module docstring for the protocol).
    """
    rnd = _claim(files, seen, lease)
    if rnd is None:
        return False
    try:
        if new is None:
            files.remove(LOCK_NAME)
        else:
            files.replace(LOCK_NAME, new)
    finally:
        # Our claim, and the debris of killed claimers of this version that we stepped over.
        for r in range(rnd + 1):
            files.remove(_claim_name(seen, r))
    return True


def _claim(files: LockFiles, seen: Seen, lease: float) -> int | None:
    """Claim the right to change version ``seen`` of the lock: the claim's round, or None."""
    for rnd in range(_ROUNDS):
        name = _claim_name(seen, rnd)
        if not files.claim(name):
            age = files.claim_age(name)
            if age is None:
                return None  # its owner just finished: the lock has changed
            if age <= lease:
                return None  # a live process is changing this version
            continue  # debris of a claimer killed mid-change: use the next round
        now = files.read(LOCK_NAME)
        if now is not None and now.version == seen.version and now.raw == seen.raw:
            return rnd
        files.remove(name)
        return None
    return None


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
