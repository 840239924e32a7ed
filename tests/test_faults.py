"""Injected failures: lost workers (kill -9 mid-build, mid-solve), a full disk,
concurrent writers, foreign stores, and nothing pickled.

Every fit runs as a real ``dkpca fit`` subprocess; workers are real ``dask
worker`` processes killed with SIGKILL (their nanny restarts them).  Kills are
timed on store state -- the per-block done markers (build) and the solver
checkpoint's pass count (solve) -- never on printed text, and each test checks
that the failure really happened while that stage was running before judging
the result against scipy.linalg.eigh of the dense centred kernel.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import storage
from dkpca.storage import paths

from .conftest import (
    checkpoint_passes,
    dkpca_cmd,
    done_markers,
    kill_group,
    make_data,
    reference_eigh,
    spawn,
    wait_until,
    write_data,
)


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
    # checkpoint every pass, so that the store says how far the solver is
    env = {**os.environ, "DASK_DKPCA__CHECKPOINT_INTERVAL": "0"}
    proc = spawn(dkpca_cmd("fit", data, "-k", "3", "--gamma", "0.2", "--solver", "randomized", "--chunk-size", "100",
                           "--dtype", "float64", "--tol", "1e-10", "--scheduler", proc_cluster.address, "-q"),
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until(lambda: checkpoint_passes(store) >= 3, 120, what="solver pass 3 in the store")
        pid = _kill_one_worker(proc_cluster)
        passes_at_kill = checkpoint_passes(store)
        proc.wait(timeout=240)
        err = proc.stderr.read()
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err
    model = dkpca.load(store)
    assert model.report["passes"] > passes_at_kill, "the solver had finished before the kill"
    assert "KilledWorker" not in err
    assert model.report["converged"]
    _check_eigenvalues(store, X, 0.2, 3)
    proc_cluster.wait_workers()
    print(f"worker kill mid-solve: killed pid {pid} after pass {passes_at_kill}; "
          f"fit completed after {model.report['passes']} passes")


def test_full_disk_is_refused_with_numbers(tmp_path, monkeypatch, blobs, capsys):
    """Simulated full filesystem: a clear error with both sizes, nothing of K written."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(paths.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 12345, 12345))
    store = tmp_path / "s.zarr"
    with pytest.raises(storage.InsufficientDiskSpace) as exc:
        dkpca.fit(blobs, n_components=2, store=store, chunk_size=200, dtype="float64", gram="store")
    # the whole footprint (K, sums, markers, data copy, model, checkpoints, temporaries), subspace 2 + 10
    need = storage.fit_footprint(600, 6, 200, np.float64, 12, 8)
    assert need > storage.gram_bytes(600, 200, np.float64)
    msg = str(exc.value)
    assert f"needs {need / 1e9:.3g} GB" in msg and "has 1.23e-05 GB free" in msg and "--store" in msg
    assert not os.path.exists(store / "gram")
    # the CLI: one line, exit status 2
    from dkpca.cli import main

    data = write_data(tmp_path / "d.zarr", blobs)
    assert main(["fit", data, "--chunk-size", "200", "--gram", "store", "-q"]) == 2
    err = capsys.readouterr().err
    # before: "[Errno 28] the fit's store needs ...", OSError's prefix
    assert err.startswith("dkpca: error: the fit's store needs ") and "GB free" in err and err.count("\n") == 1


def test_load_refuses_foreign_stores(tmp_path):
    g = zarr.open_group(str(tmp_path / "other.zarr"), mode="w")
    g.create_array("model", shape=(3,), dtype="f8")
    with pytest.raises(ValueError, match="not a dkpca store"):
        dkpca.load(tmp_path / "other.zarr")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"is not a dkpca store \(the Zarr group that 'dkpca fit --store' writes\): "
                                         "it holds no Zarr group"):
        dkpca.load(tmp_path / "plain")
    zarr.save_array(str(tmp_path / "array.zarr"), np.zeros(3))
    with pytest.raises(ValueError, match="it is a Zarr array"):  # before: zarr's 'An array already exists in store'
        dkpca.load(tmp_path / "array.zarr")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        dkpca.load(tmp_path / "missing.zarr")
    # a dkpca store whose fit never finished has no model
    storage.FitStore.at(tmp_path / "empty.zarr").open_for_write()
    with pytest.raises(ValueError, match="holds no complete model") as exc:
        dkpca.load(tmp_path / "empty.zarr")
    assert "SparseKernelPCA" not in str(exc.value)  # named only where a sparse model is there (test_sparse)
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
                    kinds = ("float32", "float64", "uint8", "uint64", "int64")
                    assert meta["data_type"] in kinds, (p, meta["data_type"])
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
