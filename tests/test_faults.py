"""Injected failures: lost workers (kill -9 mid-build, mid-solve), a full disk,
concurrent writers, foreign stores, and nothing pickled.

Every fit runs as a real ``dkpca fit`` subprocess; workers are real ``dask
worker`` processes killed with SIGKILL (their nanny restarts them).  Kills are
timed on the store's per-block done markers (build) and on the solver's
per-pass progress lines (solve), and each test checks that the failure really
happened while that stage was running before judging the result against
scipy.linalg.eigh of the dense centred kernel.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import threading

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import gram as _gram

from .conftest import reference_eigh
from .test_cluster import (
    dkpca_cmd,
    done_markers,
    kill_group,
    make_data,
    spawn,
    start_proc_cluster,
    wait_until,
    write_data,
)

_proc_cluster = pytest.fixture(scope="module", name="proc_cluster")(start_proc_cluster)


class LineReader:
    """Collect a subprocess's stdout lines in a thread (for timing kills)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._run, args=(proc,), daemon=True)
        self._t.start()

    def _run(self, proc):
        for line in proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        self._t.join(timeout=30)
        return "".join(self.lines)

    def has(self, needle: str) -> bool:
        return any(needle in line for line in list(self.lines))


def _kill_one_worker(cluster) -> int:
    addr, pid = sorted(cluster.worker_pids().items())[0]
    os.kill(pid, signal.SIGKILL)
    return pid


def _check_eigenvalues(store, X, gamma, k, rtol=1e-7):
    lam, _ = reference_eigh(rbf_kernel(X, gamma=gamma), k)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam, rtol=rtol)


def test_worker_killed_mid_build(proc_cluster, tmp_path):
    """SIGKILL a worker while Gram blocks are being written: the fit completes."""
    X = make_data(1200, seed=1)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "d.dkpca.zarr")
    nb = 24
    total = nb * (nb + 1) // 2
    proc = spawn(dkpca_cmd("fit", data, "-k", "4", "--gamma", "0.2", "--solver", "dense", "--chunk-size", "50",
                           "--dtype", "float64", "--scheduler", proc_cluster.address, "-q"),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(done_markers(store)) >= total // 10, 120, what="10% of the Gram blocks")
        pid = _kill_one_worker(proc_cluster)
        at_kill = len(done_markers(store))
        out, err = proc.communicate(timeout=240)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err
    assert at_kill < total, "the build finished before the worker was killed; the test proved nothing"
    assert f"Gram blocks: {total} computed, 0 reused" in out
    assert len(done_markers(store)) == total
    _check_eigenvalues(store, X, 0.2, 4)
    # the nanny brought the worker back (a new process)
    proc_cluster.wait_workers()
    assert pid not in proc_cluster.worker_pids().values()
    print(f"worker kill mid-build: killed pid {pid} with {at_kill}/{total} blocks done; fit completed")


def test_worker_killed_mid_solve(proc_cluster, tmp_path):
    """SIGKILL a worker during the solver's passes: the fit completes, same answer."""
    X = make_data(1200, seed=2)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "d.dkpca.zarr")
    proc_cluster.wait_workers()
    proc = spawn(dkpca_cmd("fit", data, "-k", "3", "--gamma", "0.2", "--solver", "randomized", "--chunk-size", "100",
                           "--dtype", "float64", "--tol", "1e-10", "--scheduler", proc_cluster.address, "-q"),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    reader = LineReader(proc)
    try:
        wait_until(lambda: reader.has("pass   3:"), 120, what="solver pass 3")
        pid = _kill_one_worker(proc_cluster)
        passes_at_kill = sum("  pass " in line for line in reader.lines)
        proc.wait(timeout=240)
        err = proc.stderr.read()
    finally:
        kill_group(proc)
    out = reader.text()
    assert proc.returncode == 0, err
    passes = [line for line in out.splitlines() if line.startswith("  pass ")]
    assert len(passes) > passes_at_kill, "the solver had finished before the kill"
    assert "KilledWorker" not in err
    assert "converged=True" in out
    _check_eigenvalues(store, X, 0.2, 3)
    proc_cluster.wait_workers()
    print(f"worker kill mid-solve: killed pid {pid} after pass {passes_at_kill}; "
          f"fit completed after {len(passes)} passes")


def test_full_disk_is_refused_with_numbers(tmp_path, monkeypatch, blobs, capsys):
    """Simulated full filesystem: a clear error with both sizes, nothing of K written."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(_gram.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 12345, 12345))
    store = tmp_path / "s.zarr"
    with pytest.raises(_gram.InsufficientDiskSpace) as exc:
        dkpca.fit(blobs, n_components=2, store=store, chunk_size=200, dtype="float64", gram="store")
    need = _gram.gram_bytes(600, 200, np.float64)
    msg = str(exc.value)
    assert f"needs {need / 1e9:.2f} GB" in msg and "has 0.00 GB free" in msg and "store=" in msg
    assert not os.path.exists(store / "gram")
    # the CLI: one line, exit status 2
    from dkpca.cli import main

    data = write_data(tmp_path / "d.zarr", blobs)
    assert main(["fit", data, "--chunk-size", "200", "--gram", "store", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dkpca: error: ") and "GB free" in err and err.count("\n") == 1


def test_load_refuses_foreign_stores(tmp_path):
    g = zarr.open_group(str(tmp_path / "other.zarr"), mode="w")
    g.create_array("model", shape=(3,), dtype="f8")
    with pytest.raises(ValueError, match="not a dkpca store"):
        dkpca.load(tmp_path / "other.zarr")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a Zarr group written by dkpca"):
        dkpca.load(tmp_path / "plain")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        dkpca.load(tmp_path / "missing.zarr")
    # a dkpca store whose fit never finished has no model
    from dkpca import store as _store

    _store.create_or_open(str(tmp_path / "empty.zarr"))
    with pytest.raises(ValueError, match="holds no complete model"):
        dkpca.load(tmp_path / "empty.zarr")
    # a store from a future format version
    g = zarr.open_group(str(tmp_path / "future.zarr"), mode="w")
    g.attrs.update({"format": "dkpca-store", "format_version": 99})
    with pytest.raises(ValueError, match="format_version 99"):
        dkpca.load(tmp_path / "future.zarr")
    # fit refuses to write into a foreign Zarr group
    with pytest.raises(ValueError, match="not a dkpca store"):
        dkpca.fit(np.random.default_rng(0).standard_normal((20, 2)), store=tmp_path / "other.zarr")


def test_nothing_pickled(tmp_path, blobs, monkeypatch):
    store = tmp_path / "s.zarr"
    model = dkpca.fit(blobs, n_components=3, gamma=0.1, store=store, solver="randomized", chunk_size=200)
    # Only Zarr metadata (JSON), raw chunks and the lock-free tree; no pickle codecs or object dtypes.
    for dirpath, _, files in os.walk(store):
        for f in files:
            p = os.path.join(dirpath, f)
            if f == "zarr.json":
                meta = json.load(open(p))
                text = json.dumps(meta)
                assert "pickle" not in text.lower() and '"object"' not in text, p
                if meta.get("node_type") == "array":
                    assert meta["data_type"] in ("float32", "float64", "uint8", "int64"), (p, meta["data_type"])
            else:
                assert "/c/" in p.replace(os.sep, "/") or "/c" in p, f"unexpected file {p}"
    # loading never unpickles
    def refuse(*a, **k):
        raise AssertionError("dkpca tried to unpickle")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    again = dkpca.load(store)
    np.testing.assert_array_equal(again.eigenvalues_, model.eigenvalues_)


def test_concurrent_fits_are_refused(tmp_path):
    """Two real `dkpca fit` processes started together on one store: one fits, the other is refused.

    Both reach the store lock within about a second of each other (same
    start-up work), while the winner holds it for its whole build and solve.
    """
    X = make_data(1500, seed=4)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "d.dkpca.zarr")
    args = ("fit", data, "-k", "3", "--gamma", "0.2", "--chunk-size", "50", "--dtype", "float64", "--solver",
            "dense", "-q")
    procs = [spawn(dkpca_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [o[1] for o in outs]
    win = next(i for i, p in enumerate(procs) if p.returncode == 0)
    lose = 1 - win
    assert "is in use by another fit" in outs[lose][1] and f"process {procs[win].pid}" in outs[lose][1]
    assert outs[lose][1].count("\n") == 1  # one line, no traceback
    nb = 30
    assert f"Gram blocks: {nb * (nb + 1) // 2} computed, 0 reused" in outs[win][0]
    _check_eigenvalues(store, X, 0.2, 3)
    assert not os.path.exists(os.path.join(store, ".dkpca.lock"))
    print("concurrent writer: refused with", outs[lose][1].strip())
