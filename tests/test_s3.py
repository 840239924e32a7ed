"""Stores and inputs on object storage: ``s3://`` URLs against a real S3 API on loopback.

The server is moto's (``s3_endpoint`` in conftest), reached through s3fs with
the standard ``AWS_*`` environment, so every request is a real HTTP S3 call
and every Dask worker is another process that shares no disk with the
client.  References: the dense centred kernel's eigenpairs
(``scipy.linalg.eigh``); the lock's refusals are checked against the server's
conditional writes (``If-None-Match: *``), not simulated.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import s3fs
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.storage import LOCK_NAME, FitStore, SolverCheckpoint, StoreLockedError, lockfiles
from dkpca.storage.lock import exclusive
from dkpca.storage.lockfiles import UnlockableStoreError

from .conftest import ROOT, cli_error, kill_group, make_data, race_in_rounds, reference_eigh, s3_keys, spawn, wait_until

GAMMA = 0.2


def _fs() -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True)


def _put_data(url: str, X: np.ndarray) -> str:
    zarr.create_array(url, data=X, chunks=(min(256, len(X)), X.shape[1]))
    return url


def _put_lock(store: str, **fields) -> None:
    doc = {"host": "node042", "pid": 12345, "token": "theirs", "heartbeat": time.time(), "lease": 300.0, **fields}
    _fs().pipe_file(f"{store.split('://', 1)[1]}/{LOCK_NAME}", json.dumps(doc).encode())


def _read_lock(store: str) -> dict:
    return json.loads(_fs().cat_file(f"{store.split('://', 1)[1]}/{LOCK_NAME}"))


def _aligned(Z: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``Z`` with each column's sign matched to ``ref`` (eigenvectors are defined up to sign)."""
    return Z * np.sign(np.sum(Z * ref, axis=0))


@pytest.fixture(scope="module")
def process_cluster(s3_endpoint):
    """Two single-threaded worker processes (LocalCluster); started after the AWS_* environment is set."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture
def client(process_cluster):
    from distributed import Client

    with Client(process_cluster) as c:
        yield c


# -- end to end ----------------------------------------------------------------------
def test_fit_load_transform_on_s3_with_worker_processes(s3_bucket, client):
    X = make_data(600, seed=3)
    data = _put_data(f"{s3_bucket}/X.zarr", X)
    store = f"{s3_bucket}/fit.dkpca.zarr"
    model = dkpca.fit(data, n_components=3, gamma=GAMMA, store=store, chunk_size=200, dtype="float64",
                      solver="lanczos", gram="store", tol=1e-10, random_state=0)
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert model.report["gram"]["computed_blocks"] == 6  # K's 3 x 3 upper blocks, written by the workers
    assert model.report["passes"] > 1  # an iterative solve: passes read K back from the bucket

    loaded = dkpca.load(store)
    Z = loaded.transform(data)  # the input read from S3 by the workers too
    ref = U * np.sqrt(lam)  # training projections of the dense reference
    np.testing.assert_allclose(_aligned(Z, ref), ref, atol=1e-6 * np.abs(ref).max())
    keys = s3_keys(store)
    assert "gram/K/c/2/2" in keys and not any(k.startswith(LOCK_NAME) for k in keys)


_KILLED_FIT = r"""
import sys
from distributed import Client, LocalCluster
import dkpca
from dkpca.cli import main
if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, Client(c):
        dkpca.fit(sys.argv[1], n_components=3, gamma=float(sys.argv[3]), store=sys.argv[2], chunk_size=100,
                  dtype="float64", solver="dense", gram="store")
"""


@pytest.mark.slow  # two clusters started, a build killed and finished against moto: minutes on 2 cores
def test_build_killed_on_s3_resumes_on_worker_processes(s3_bucket, client):
    X = make_data(900, seed=4)
    data = _put_data(f"{s3_bucket}/X.zarr", X)
    store = f"{s3_bucket}/fit.dkpca.zarr"
    total = 9 * 10 // 2
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = spawn([sys.executable, "-c", _KILLED_FIT, data, store, str(GAMMA)], env=env,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def markers() -> list[str]:
        return [k for k in s3_keys(f"{store}/gram/done") if k.startswith("c/")]

    try:
        wait_until(lambda: len(markers()) >= 5 or proc.poll() is not None, 180, interval=0.2,
                   what="5 Gram blocks done in the bucket")
    finally:
        kill_group(proc)  # SIGKILL of the client and its worker processes
    before = len(markers())
    assert 0 < before < total, "the build finished before the kill; the test proved nothing"
    assert LOCK_NAME in s3_keys(store)  # the dead client's lease, left behind

    model = dkpca.fit(data, n_components=3, gamma=GAMMA, store=store, chunk_size=100, dtype="float64",
                      solver="dense", gram="store")
    gram = model.report["gram"]
    assert gram["reused_blocks"] >= before and gram["computed_blocks"] > 0
    assert gram["reused_blocks"] + gram["computed_blocks"] == total
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_refit_on_s3_switches_to_the_new_model_and_deletes_the_old(s3_bucket):
    X = make_data(120, seed=7)
    store = f"{s3_bucket}/s.dkpca.zarr"
    dkpca.fit(X, n_components=2, store=store, solver="dense")
    old = {k.split("/")[0] for k in s3_keys(store) if k.startswith("model.")}
    dkpca.fit(X, n_components=3, store=store, solver="dense")
    new = {k.split("/")[0] for k in s3_keys(store) if k.startswith("model.")}
    assert len(old) == len(new) == 1 and old != new  # a new group, the old one gone
    assert dkpca.load(store).n_components == 3


def test_refit_on_s3_deletes_a_model_group_a_killed_writer_left(s3_bucket):
    X = make_data(120, seed=8)
    store = f"{s3_bucket}/s.dkpca.zarr"
    dkpca.fit(X, n_components=2, store=store, solver="dense")
    orphan = f"{store.split('://', 1)[1]}/model.0123456789abcdef0123456789abcdef"
    _fs().pipe_file(f"{orphan}/eigenvalues/c/0", b"half")  # arrays written, metadata and switch never were
    dkpca.fit(X, n_components=3, store=store, solver="dense")
    assert not any(k.startswith("model.0123456789abcdef") for k in s3_keys(store))


def test_solver_checkpoint_round_trips_through_s3(s3_bucket):
    store = FitStore.at(f"{s3_bucket}/s.dkpca.zarr")
    with store.lock():
        store.open_for_write()
        Q = np.random.default_rng(0).standard_normal((500, 7))
        SolverCheckpoint(store, {"fit": 1}, chunk_rows=128, interval=0).save(4, [0.5, 0.1], Q=Q)
        state = SolverCheckpoint(store, {"fit": 1}).load()
    assert state.passes == 4 and state.history == [0.5, 0.1]
    np.testing.assert_array_equal(state.arrays["Q"], Q)  # written chunk by chunk, checksummed, read back


def _cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dkpca: error: ") and err.count("\n") == 1, err
    return err


def test_cli_fits_and_transforms_with_s3_urls(s3_bucket):
    X = make_data(300, seed=5)
    data = _put_data(f"{s3_bucket}/X.zarr", X)
    store, out = f"{s3_bucket}/s.dkpca.zarr", f"{s3_bucket}/Z.zarr"
    assert main(["fit", data, "--store", store, "-k", "2", "--gamma", str(GAMMA), "--solver", "dense", "-q",
                 "--no-progress"]) == 0
    assert main(["transform", store, data, out, "-q"]) == 0
    assert main(["info", store]) == 0
    np.testing.assert_allclose(zarr.open_array(out, mode="r")[...], dkpca.load(store).transform(X), rtol=1e-10,
                               atol=1e-12)


def test_cli_refuses_an_existing_s3_output(s3_bucket, capsys):
    X = make_data(100, seed=6)
    data = _put_data(f"{s3_bucket}/X.zarr", X)
    store, out = f"{s3_bucket}/s.dkpca.zarr", f"{s3_bucket}/results"
    dkpca.fit(data, n_components=2, store=store, solver="dense")
    _fs().pipe_file(f"{out.split('://', 1)[1]}/notes.txt", b"mine")
    assert "not a dkpca transform output" in _cli_error(capsys, ["transform", store, data, out])
    assert "not a dkpca transform output" in _cli_error(capsys, ["transform", store, data, out, "--overwrite"])
    assert s3_keys(out) == ["notes.txt"]


# -- refusals --------------------------------------------------------------------------
def test_second_fit_into_a_locked_s3_store_is_refused(s3_bucket):
    store = f"{s3_bucket}/s.dkpca.zarr"
    with FitStore.at(store).lock():
        with pytest.raises(StoreLockedError, match=rf"in use by another fit \(process {os.getpid()}"):
            dkpca.fit(make_data(100), n_components=2, store=store, solver="dense")
    assert s3_keys(store) == []  # nothing written by the refused fit, the lock released


def test_lock_on_s3_is_a_lease_released_after_use(s3_bucket):
    store = f"{s3_bucket}/s.dkpca.zarr"
    with dask.config.set({"dkpca.lease": 60}), exclusive(store):
        doc = _read_lock(store)
    assert set(doc) == {"host", "pid", "token", "heartbeat", "lease"}
    assert doc["host"] == socket.gethostname() and doc["pid"] == os.getpid() and doc["lease"] == 60
    assert s3_keys(store) == []  # no lock, no claim left


def test_heartbeat_refreshes_the_lock_on_s3(s3_bucket):
    store = f"{s3_bucket}/s.dkpca.zarr"
    with dask.config.set({"dkpca.lease": 0.6}), exclusive(store):
        first = _read_lock(store)
        wait_until(lambda: _read_lock(store)["heartbeat"] > first["heartbeat"], 10, interval=0.05,
                   what="a heartbeat")
        assert _read_lock(store)["token"] == first["token"]


def test_expired_lease_on_s3_is_taken_over(s3_bucket):
    store = f"{s3_bucket}/s.dkpca.zarr"
    _put_lock(store, heartbeat=time.time() - 100, lease=5.0)
    with exclusive(store):
        assert _read_lock(store)["pid"] == os.getpid()
    assert s3_keys(store) == []


def test_live_lease_of_another_host_on_s3_is_refused(s3_bucket):
    store = f"{s3_bucket}/s.dkpca.zarr"
    _put_lock(store)
    with pytest.raises(StoreLockedError, match="process 12345 on node042"):
        with exclusive(store):
            pytest.fail("took a live lease")
    assert _read_lock(store)["token"] == "theirs"


_RACER = r"""
import os, sys, time
from dkpca.storage.lock import StoreLockedError, exclusive
bucket, me, rounds, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def wait(name):
    while not os.path.exists(os.path.join(flags, name)):
        time.sleep(0.001)

def report(i, what):
    tmp = os.path.join(flags, f".r{i}.{me}")
    with open(tmp, "w") as f:
        f.write(what)
    os.replace(tmp, os.path.join(flags, f"r{i}.{me}"))

for i in range(rounds):
    wait(f"go{i}")
    try:
        with exclusive(f"{bucket}/s{i}"):
            report(i, "won")
            wait(f"done{i}")  # hold the lock until the other racer has answered
    except StoreLockedError:
        report(i, "lost")
"""


def test_racing_fits_on_s3_have_exactly_one_winner(s3_bucket, tmp_path):
    """Two processes take the same store's lock at once: a new store (two creates), then a stale lease
    (two takeovers); the server's conditional write lets exactly one through each time."""
    rounds = 4
    for i in range(rounds // 2, rounds):
        _put_lock(f"{s3_bucket}/s{i}", heartbeat=time.time() - 1000)  # a dead job's lease
    race_in_rounds(_RACER, lambda name: [s3_bucket, name, str(rounds), str(tmp_path)], rounds, tmp_path, timeout=120)
    assert s3_keys(s3_bucket) == []  # every winner released; no claim left behind


class _IgnoresConditionalWrites:
    """An S3 filesystem talking to a server that ignores If-None-Match (every write overwrites)."""

    def __init__(self, fs) -> None:
        self.fs = fs

    def __getattr__(self, name):
        return getattr(self.fs, name)

    def pipe_file(self, path, value, mode="overwrite", **kw):
        return self.fs.pipe_file(path, value, **kw)


def test_server_ignoring_conditional_writes_is_refused(s3_bucket, monkeypatch):
    real = lockfiles.url_fs
    monkeypatch.setattr(lockfiles, "url_fs", lambda url: (_IgnoresConditionalWrites(real(url)[0]), real(url)[1]))
    store = f"{s3_bucket}/s.dkpca.zarr"
    with pytest.raises(UnlockableStoreError, match="ignored a conditional write"):
        with exclusive(store):
            pytest.fail("locked without a race-free create")
    assert s3_keys(store) == []  # the lock it wrote is removed again


def test_store_on_a_protocol_without_conditional_writes_is_refused():
    with pytest.raises(ValueError, match=r"cannot lock the store 'memory://.*not for memory://"):
        dkpca.fit(make_data(50), n_components=2, store="memory://dkpca-test/s.dkpca.zarr", solver="dense")


def test_foreign_objects_at_the_store_url_are_refused(s3_bucket):
    store = f"{s3_bucket}/notes"
    _fs().pipe_file(f"{store.split('://', 1)[1]}/todo.txt", b"mine")
    with pytest.raises(ValueError, match="not a dkpca store"):
        dkpca.fit(make_data(50), n_components=2, store=store, solver="dense")
    assert s3_keys(store) == ["todo.txt"]


def test_loading_a_missing_s3_store_names_it(s3_bucket):
    with pytest.raises(FileNotFoundError, match="does not exist; fit a model first"):
        dkpca.load(f"{s3_bucket}/nothing.dkpca.zarr")


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv", [["info", "s3://b/s.dkpca.zarr"], ["fit", "s3://b/X.zarr", "-k", "2"]],
                         ids=["store", "input"])
def test_an_unreachable_endpoint_is_one_error_line(argv, tmp_path):
    """botocore's EndpointConnectionError was a traceback (and, for an input, "not Zarr" followed by "Exception
    ignored in: <coroutine ...>" blocks); now one line naming the endpoint setting, exit 2."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
           "AWS_MAX_ATTEMPTS": "2"}
    if argv[0] == "fit":
        argv = [*argv, "--store", str(tmp_path / "s.dkpca.zarr")]
    p = subprocess.run([sys.executable, "-m", "dkpca", *argv], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("dkpca: error: cannot reach the storage (Could not connect to the endpoint URL") \
        and p.stderr.count("\n") == 1, p.stderr


def test_refused_credentials_are_one_error_line_not_a_format_question(monkeypatch, capsys):
    """s3fs raises PermissionError without an errno for an unknown key: said as such, for a store and an input."""
    from dkpca.io import formats

    def refuse(*args, **kwargs):
        raise PermissionError("The AWS Access Key Id you provided does not exist in our records.")

    monkeypatch.setattr(formats.zarr, "open", refuse)
    err = cli_error(capsys, ["fit", "s3://b/X.zarr", "-k", "2"])
    assert "permission denied (The AWS Access Key Id you provided does not exist" in err
    assert "check the credentials fsspec uses for the URL (for s3://, the AWS_* variables or profile)" in err


def test_missing_credentials_are_said_as_credentials_not_the_network(monkeypatch, capsys):
    """Before: "cannot reach the storage (Unable to locate credentials); check the endpoint ... and the network"."""
    from botocore.exceptions import NoCredentialsError

    from dkpca.io import formats

    def refuse(*args, **kwargs):
        raise NoCredentialsError()

    monkeypatch.setattr(formats.zarr, "open", refuse)
    err = cli_error(capsys, ["fit", "s3://b/X.zarr", "-k", "2"])
    assert "no credentials for the storage (Unable to locate credentials); give them as fsspec's back end reads " \
        "them (for s3://: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)" in err
    assert "network" not in err


def test_s3a_and_s3_urls_name_the_same_place(s3_bucket, capsys):
    """s3fs serves both spellings of one bucket: a store inside the input, or an output inside the store, written
    with the other spelling, was allowed (and would write into what is being read)."""
    data = _put_data(f"{s3_bucket}/X.zarr", make_data(60))
    other = data.replace("s3://", "s3a://", 1)
    err = cli_error(capsys, ["fit", data, "-k", "2", "--store", f"{other}/s.dkpca.zarr"])
    assert f"store '{other}/s.dkpca.zarr' is or lies inside the input '{data}'" in err
    assert not [k for k in s3_keys(data) if k.startswith("s.dkpca.zarr")]  # nothing written


@pytest.mark.parametrize("where", ["store", "output"])
def test_a_url_with_an_empty_segment_is_refused_before_any_write(s3_bucket, where, tmp_path, capsys):
    """zarr wrote 'bucket//s.dkpca.zarr/...' keys, after which the store read as "does not exist"."""
    bucket = s3_bucket.split("://", 1)[1]
    np.save(tmp_path / "x.npy", make_data(60))
    if where == "store":
        argv = ["fit", str(tmp_path / "x.npy"), "-k", "2", "--store", f"s3://{bucket}//s.dkpca.zarr"]
    else:
        dkpca.fit(make_data(60), n_components=2, store=tmp_path / "s.dkpca.zarr", solver="dense")
        argv = ["transform", str(tmp_path / "s.dkpca.zarr"), str(tmp_path / "x.npy"), f"s3://{bucket}//out.zarr"]
    err = cli_error(capsys, argv)
    assert f"has an empty path segment ('//'), which object stores keep in the key but their listings drop; " \
           f"write it as 's3://{bucket}/" in err
    assert s3_keys(s3_bucket) == []


def test_damage_on_s3_is_named_by_its_url(s3_bucket, capsys):
    """Before: "chunk (0, 0) of array 'data/X' in '<FsspecStore(S3FileSystem, ...)>'"; now the store's URL."""
    store = f"{s3_bucket}/s.dkpca.zarr"
    dkpca.fit(make_data(60), n_components=2, store=store, solver="dense")
    _fs().rm(f"{store.split('://', 1)[1]}/data/X/c/0/0")
    assert main(["verify", store]) == 1
    assert f"BAD  data/X: chunk (0, 0) of array 'data/X' in '{store}' is missing" in capsys.readouterr().out


def test_a_parquet_directory_and_a_gzipped_csv_on_s3_fit_like_the_array(s3_bucket, tmp_path):
    """Read through fsspec as local files are: the parts in dask's order (part.10 after part.9), the CSV in one task."""
    import pandas as pd

    X = make_data(240, seed=5)
    names = [f"f{j}" for j in range(X.shape[1])]
    for i, rows in enumerate(np.array_split(np.arange(len(X)), 11)):
        pd.DataFrame(X[rows], columns=names).to_parquet(tmp_path / f"part.{i}.parquet")
        _fs().put(str(tmp_path / f"part.{i}.parquet"), f"{s3_bucket}/parts/part.{i}.parquet")
    pd.DataFrame(X, columns=names).to_csv(tmp_path / "x.csv.gz", index=False, float_format="%.17g")
    _fs().put(str(tmp_path / "x.csv.gz"), f"{s3_bucket}/x.csv.gz")
    reference = dkpca.fit(X, n_components=2, gamma=GAMMA, dtype="float64")
    for source in (f"{s3_bucket}/parts", f"{s3_bucket}/x.csv.gz"):
        model = dkpca.fit(source, n_components=2, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr",
                          overwrite=True)
        np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
        np.testing.assert_allclose(np.abs(model.transform(source)), np.abs(reference.transform(X)), atol=1e-10)
        assert model.feature_names == tuple(names)
