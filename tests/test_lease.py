"""The store lock as a lease: stale locks are taken over, live ones refused, releases compare before delete."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time

import dask
import pytest

from dkpca.storage.lock import LOCK_NAME, StoreLockedError, exclusive, lease_seconds

from .conftest import gram_writers, race_in_rounds, wait_until, written_block


def _lock(store) -> str:
    return os.path.join(str(store), LOCK_NAME)


def _write_lock(store, host="node042", pid=12345, age=0.0, lease=300.0, token="theirs") -> str:
    """A lock as another holder writes it, with a heartbeat ``age`` seconds old."""
    os.makedirs(str(store), exist_ok=True)
    path = _lock(store)
    doc = {"host": host, "pid": pid, "token": token, "heartbeat": time.time() - age, "lease": lease}
    with open(path + ".w", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".w", path)
    return path


def _read_lock(store) -> dict:
    with open(_lock(store)) as f:
        return json.load(f)


def _assert_ours(store) -> None:
    doc = _read_lock(store)
    assert doc["host"] == socket.gethostname() and doc["pid"] == os.getpid() and doc["token"] != "theirs"


def test_lock_records_host_pid_token_heartbeat_and_lease(tmp_path):
    store = tmp_path / "s"  # does not exist yet: exclusive creates it
    with dask.config.set({"dkpca.lease": 60}):
        with exclusive(str(store)):
            doc = _read_lock(store)
    assert set(doc) == {"host", "pid", "token", "heartbeat", "lease"}
    assert doc["lease"] == 60 and abs(doc["heartbeat"] - time.time()) < 30 and len(doc["token"]) == 32
    assert os.listdir(store) == []  # released: no lock, no temporary or claim files


def test_expired_lease_of_another_host_is_taken_over(tmp_path):
    _write_lock(tmp_path, host="node042", age=10.0, lease=0.5)
    with exclusive(str(tmp_path)):
        _assert_ours(tmp_path)
    assert not os.path.exists(_lock(tmp_path))


def test_fresh_lease_of_another_host_is_refused(tmp_path):
    path = _write_lock(tmp_path, host="node042", pid=12345, age=1.0, lease=300.0)
    before = open(path).read()
    with pytest.raises(StoreLockedError, match=r"in use by another fit \(process 12345 on node042") as exc:
        with exclusive(str(tmp_path)):
            pytest.fail("took a live lock")
    assert "lease 300 s" in str(exc.value) and "\n" not in str(exc.value)
    assert open(path).read() == before  # untouched


def test_empty_lock_is_stale(tmp_path):
    open(_lock(tmp_path), "w").close()
    with exclusive(str(tmp_path)):
        _assert_ours(tmp_path)


def test_unparsable_lock_is_stale(tmp_path):
    with open(_lock(tmp_path), "wb") as f:
        f.write(b"\x00\xff{not json")
    with exclusive(str(tmp_path)):
        _assert_ours(tmp_path)


def test_dead_pid_on_this_host_is_taken_over(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    _write_lock(tmp_path, host=socket.gethostname(), pid=dead, age=0.0, lease=300.0)  # fresh heartbeat
    with exclusive(str(tmp_path)):
        _assert_ours(tmp_path)


def test_live_pid_on_this_host_with_fresh_heartbeat_is_refused(tmp_path):
    _write_lock(tmp_path, host=socket.gethostname(), pid=os.getpid(), age=0.0, lease=300.0)
    with pytest.raises(StoreLockedError, match=f"process {os.getpid()} on {socket.gethostname()}"):
        with exclusive(str(tmp_path)):
            pytest.fail("took a live lock")


def test_heartbeat_advances_while_held(tmp_path):
    with dask.config.set({"dkpca.lease": 0.3}):  # refreshed every 0.1 s
        with exclusive(str(tmp_path)):
            first = _read_lock(tmp_path)
            wait_until(lambda: _read_lock(tmp_path)["heartbeat"] > first["heartbeat"], 10, what="a heartbeat")
            assert _read_lock(tmp_path)["token"] == first["token"]


def test_release_leaves_another_holders_lock(tmp_path):
    with dask.config.set({"dkpca.lease": 300}):
        with exclusive(str(tmp_path)):
            _write_lock(tmp_path, token="other")  # someone took it over meanwhile
    assert _read_lock(tmp_path)["token"] == "other"


def test_heartbeat_stops_when_lock_is_no_longer_ours(tmp_path, caplog):
    with dask.config.set({"dkpca.lease": 0.3}), caplog.at_level(logging.WARNING, logger="dkpca"):
        with exclusive(str(tmp_path)):
            def taken() -> bool:
                # this write takes no claim, as a real takeover does: a heartbeat that had claimed our version
                # just before it may replace it once (CI, 2026-11-28), so it is written again until seen
                if _read_lock(tmp_path)["token"] != "other":
                    _write_lock(tmp_path, token="other", age=0.0, lease=0.3)
                return "taken over" in caplog.text

            wait_until(taken, 10, what="the lost-lock warning")
            time.sleep(0.3)  # several heartbeat periods: none may overwrite the other's lock
            assert _read_lock(tmp_path)["token"] == "other"
    assert _read_lock(tmp_path)["token"] == "other"


def test_claim_left_by_a_killed_claimer_does_not_block(tmp_path):
    path = _write_lock(tmp_path, age=10.0, lease=0.5)
    claim = f"{path}.claim-{os.stat(path).st_ino}.0"
    open(claim, "w").close()
    os.utime(claim, (time.time() - 1000, time.time() - 1000))  # older than any lease: debris
    with dask.config.set({"dkpca.lease": 5}):
        with exclusive(str(tmp_path)):
            _assert_ours(tmp_path)
    assert os.listdir(tmp_path) == []  # the debris claim was cleared by the takeover


@pytest.mark.parametrize("bad", ["soon", 0, -3, float("nan"), float("inf"), True, None])
def test_invalid_lease_is_refused(tmp_path, bad):
    with dask.config.set({"dkpca.lease": bad}):
        with pytest.raises(ValueError, match="dkpca.lease"):
            with exclusive(str(tmp_path / "s")):
                pytest.fail("locked with an invalid lease")
    assert not os.path.exists(tmp_path / "s")


def test_default_lease_is_minutes():
    assert 60 <= lease_seconds() <= 900


_RACER = r"""
import os, sys, time
from dkpca.storage.lock import StoreLockedError, exclusive
root, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

def report(i, what):
    tmp = os.path.join(root, f".r{i}.{me}")
    with open(tmp, "w") as f:
        f.write(what)
    os.replace(tmp, os.path.join(root, f"r{i}.{me}"))

def wait(name):
    while not os.path.exists(os.path.join(root, name)):
        time.sleep(0.001)

for i in range(rounds):
    wait(f"go{i}")
    try:
        with exclusive(os.path.join(root, f"s{i}")):
            report(i, "won")
            wait(f"done{i}")  # hold the lock until the other racer has answered
    except StoreLockedError:
        report(i, "lost")
"""


def test_racing_takeovers_have_exactly_one_winner(tmp_path):
    rounds = 5
    for i in range(rounds):
        _write_lock(tmp_path / f"s{i}", host="node042", age=1000.0, lease=300.0)  # stale, of a requeued job
    race_in_rounds(_RACER, lambda name: [str(tmp_path), name, str(rounds)], rounds, tmp_path)
    for i in range(rounds):  # the winner released; nothing else left behind
        assert os.listdir(tmp_path / f"s{i}") == []


# -- fencing: a write whose fit no longer holds the store ---------------------------------------------------------

def test_a_block_write_after_its_fit_let_the_store_go_writes_nothing(tmp_path):
    """A block task still running after its fit ended (an interrupt, a failure, a killed client) finds the lease
    gone: it raises LeaseLostError and leaves neither K's chunk nor a done marker."""
    from dkpca.storage import FitStore, LeaseLostError

    with FitStore.at(tmp_path / "s.zarr").lock() as lease:
        gs, out, blk, sums = gram_writers(tmp_path / "s.zarr", lease)
    with pytest.raises(LeaseLostError, match="no longer holds the store's lock"):
        out.write_block(0, 1, blk, sums, sums)
    assert written_block(gs, tmp_path / "s.zarr") == (False, 0)


def test_a_block_write_after_another_fit_took_the_store_over_is_refused(tmp_path):
    """Fit A's lease ran out and fit B holds the store: A's straggler is refused, B's own writes go through."""
    from dkpca.storage import FitStore, LeaseLostError

    store = FitStore.at(tmp_path / "s.zarr")
    with store.lock() as a:
        gs, out_a, blk, sums = gram_writers(tmp_path / "s.zarr", a)
    with store.lock() as b:
        with pytest.raises(LeaseLostError):
            out_a.write_block(0, 1, blk, sums, sums)
        assert written_block(gs, tmp_path / "s.zarr") == (False, 0)
        gs.writers(False, b).write_block(0, 1, blk, sums, sums)
        chunk, marker = written_block(gs, tmp_path / "s.zarr")
        assert chunk and marker != 0


def test_a_lease_lost_while_the_block_is_written_leaves_no_marker(tmp_path):
    """The lease is checked again before the marker, the write's commit: lost while K's chunk was written
    (here from inside the write), the block is not marked done, so the next fit computes it again."""
    from dkpca.storage import FitStore, LeaseLostError

    store = FitStore.at(tmp_path / "s.zarr")
    held = store.lock()
    lease = held.__enter__()
    gs, out, blk, sums = gram_writers(tmp_path / "s.zarr", lease)
    with pytest.raises(LeaseLostError):
        out.write_block(0, 1, blk, sums, sums, visit=lambda s, e: held.__exit__(None, None, None) if s == 0 else None)
    assert written_block(gs, tmp_path / "s.zarr") == (True, 0)


def test_a_fit_hands_its_lease_to_the_gram_build(tmp_path, monkeypatch):
    """dkpca.fit's block tasks carry the lease of the lock it holds (so the checks above guard a real fit)."""
    import numpy as np

    import dkpca
    from dkpca.storage import GramStore

    seen = []
    writers = GramStore.writers
    monkeypatch.setattr(GramStore, "writers", lambda self, direct, lease=None: seen.append(lease) or
                        writers(self, direct, lease))
    X = np.random.default_rng(0).standard_normal((300, 4))
    dkpca.fit(X, n_components=2, store=tmp_path / "f.zarr", gram="store", chunk_size=100, solver="dense")
    assert len(seen) == 1 and seen[0] is not None and seen[0].path == str(tmp_path / "f.zarr")


def test_a_data_copy_task_after_its_fit_let_the_store_go_writes_nothing(tmp_path):
    """The copy of X into ``data/X`` is fenced too: a copy made with a lease no longer held (the graph's tasks
    then run like stragglers of an ended fit) is refused at its first chunk and leaves no chunk written."""
    import dask.array as da
    import numpy as np

    from dkpca.storage import FitStore, LeaseLostError

    store = FitStore.at(tmp_path / "s.zarr")
    with store.lock() as lease:
        pass
    X = da.from_array(np.ones((100, 3)), chunks=(50, 3))
    with store.lock(), pytest.raises(LeaseLostError):
        store.store_data(X, {"checksum": "x"}, False, lease=lease)
    assert not list((tmp_path / "s.zarr" / "data" / "X").rglob("c/*/*"))


def test_a_data_copy_under_its_lease_is_complete(tmp_path):
    """A fenced copy (the fit's own lease, held) writes every chunk: the stored X equals the input."""
    import dask.array as da
    import numpy as np

    from dkpca.storage import FitStore

    X = np.arange(300.0).reshape(100, 3)
    store = FitStore.at(tmp_path / "s.zarr")
    with store.lock() as lease:
        got = store.store_data(da.from_array(X, chunks=(50, 3)), {"checksum": "x"}, False, lease=lease)
    np.testing.assert_array_equal(got.compute(), X)
