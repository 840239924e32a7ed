"""Shared test helpers: dense references, data, subprocess control and a real Dask cluster.

Test modules import helpers from here only (never from each other).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.linalg
import zarr

import dkpca
from dkpca.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def centered(K: np.ndarray) -> np.ndarray:
    """H K H with H = I - 11^T/n, the dense reference."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return H @ K @ H


def reference_eigh(K: np.ndarray, k: int):
    """Top-k eigenpairs of the dense centred kernel, descending."""
    Kc = centered(K)
    n = Kc.shape[0]
    lam, U = scipy.linalg.eigh(Kc, subset_by_index=(n - k, n - 1))
    return lam[::-1], U[:, ::-1]


def assert_rbf_eigenvalues(model, X: np.ndarray, gamma: float, k: int, atol: float = 1e-8) -> None:
    """``model`` fitted X's n rows, with the top-k eigenvalues of eigh of X's centred rbf kernel (``atol``: relative
    to lambda_1; 1e-8 where block Lanczos at tol 1e-6 solves a separated spectrum: errors ~ tol^2)."""
    from sklearn.metrics.pairwise import rbf_kernel

    lam, _ = reference_eigh(rbf_kernel(X, gamma=gamma), k)
    assert model.n_samples == len(X)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=atol * lam[0])


@pytest.fixture(scope="session", autouse=True)
def dask_scratch(tmp_path_factory):
    """Dask's scratch space (``dask-scratch-space``: a LocalCluster's lock files) in pytest's temporary directory.

    In this process through Dask's config, in subprocesses (the CLI, scripts) through the environment, so
    that the test run leaves nothing in the system's temporary directory.
    """
    import dask

    scratch = str(tmp_path_factory.mktemp("dask-scratch"))
    before = os.environ.get("DASK_TEMPORARY_DIRECTORY")
    os.environ["DASK_TEMPORARY_DIRECTORY"] = scratch
    try:
        with dask.config.set({"temporary-directory": scratch}):
            yield scratch
    finally:
        if before is None:
            os.environ.pop("DASK_TEMPORARY_DIRECTORY", None)
        else:
            os.environ["DASK_TEMPORARY_DIRECTORY"] = before


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def blobs(rng):
    """Well-separated spectrum: a few Gaussian clusters in 6-D."""
    centers = rng.standard_normal((4, 6)) * 3
    labels = rng.integers(0, 4, 600)
    return centers[labels] + 0.5 * rng.standard_normal((600, 6))


# -- data and subprocesses -----------------------------------------------------------
def make_data(n: int, seed: int = 0, d: int = 5) -> np.ndarray:
    """Four Gaussian clusters: a separated leading spectrum."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((4, d)) * 3
    return centers[rng.integers(0, 4, n)] + 0.5 * rng.standard_normal((n, d))


def write_data(path, X) -> str:
    zarr.create_array(str(path), data=X, chunks=(min(512, len(X)), X.shape[1]), overwrite=True)
    return str(path)


def dkpca_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dkpca.cli", *args]


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """A subprocess in its own process group (killable with its children)."""
    return subprocess.Popen(cmd, start_new_session=True, **kw)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def done_markers(store: str) -> dict[str, int]:
    """Gram done-marker chunk files -> mtime_ns (each written after its block)."""
    out = {}
    base = os.path.join(store, "gram", "done", "c")
    for dirpath, _, files in os.walk(base):
        for f in files:
            if not f.endswith(".partial") and not f.startswith("."):
                p = os.path.join(dirpath, f)
                with contextlib.suppress(FileNotFoundError):
                    out[p] = os.stat(p).st_mtime_ns
    return out


def gram_writers(path, lease=None):
    """A fresh Gram store at ``path`` of two 50-row blocks, and its block writers fenced by ``lease``:
    ``(GramStore, GramWriters, a block of ones, its row sums)``."""
    from dkpca.storage import FitStore, GramStore

    gs = GramStore(FitStore.at(path))
    gs.prepare({"fingerprint": {}, "kernel": {"name": "linear"}, "block": 50, "dtype": "float64", "n": 100}, False)
    return gs, gs.writers(False, lease), np.ones((50, 50)), np.full(50, 50.0)


def written_block(gs, path) -> tuple[bool, int]:
    """(K chunk (0, 1) on disk, its done marker) of a :func:`gram_writers` store at ``path``."""
    from dkpca.storage.gramstore import read_done_markers

    chunk = os.path.join(str(path), "gram", "K", "c", "0", "1")
    return os.path.exists(chunk), int(read_done_markers(gs.store.open()["gram"]["done"])[0, 1])


def blas_threads() -> set[int]:
    """The thread counts of this process's BLAS libraries now (threadpoolctl)."""
    from threadpoolctl import threadpool_info

    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def spy_calls(monkeypatch, module, name: str, record) -> list:
    """Replace ``module.name`` by a wrapper that appends ``record()`` at each call; the records.

    Called in another process (a worker's task), the wrapper appends to that process's copy: the list
    here stays as it was.
    """
    seen: list = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(record())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def spy_blas_threads(monkeypatch, module, name: str) -> list[set[int]]:
    """Replace ``module.name`` by a wrapper that records :func:`blas_threads` at each call; the records."""
    return spy_calls(monkeypatch, module, name, blas_threads)


class PrecisionSpy:
    """An operator's products as a solver sees them, recording whether each was asked in single precision
    (``asked``); ``noise``: each single product gets an error of that 2-norm added in a random direction
    (seeded) -- as large as block Lanczos's bound allows, where it is the operator's ``single_error`` times
    sqrt(width)."""

    def __init__(self, op, noise: float = 0.0):
        self.op, self.n, self.dtype, self.single_error, self.noise = op, op.n, op.dtype, op.single_error, noise
        self.asked: list[bool] = []
        self.rng = np.random.default_rng(7)

    @property
    def passes(self) -> int:
        return self.op.passes

    @property
    def single(self) -> int:
        return sum(self.asked)

    def matmat(self, V, single=False):
        self.asked.append(bool(single))
        out = self.op.matmat(V, single=single)
        if single and self.noise:
            G = self.rng.standard_normal(out.shape)
            out = out + self.noise * G / np.linalg.norm(G, 2)
        return out


def wait_until(cond, timeout: float, interval: float = 0.01, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class ProcCluster:
    """``dask scheduler`` + ``dask worker`` subprocesses on 127.0.0.1."""

    def __init__(self, tmp: str, n_workers: int = 2, worker_env: dict[str, str] | None = None) -> None:
        self.procs: list[subprocess.Popen] = []
        self.tmp = tmp
        sched_file = os.path.join(tmp, "scheduler.json")
        self.logs = []
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self._start([os.path.join(BIN, "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--dashboard-address", "127.0.0.1:0", "--scheduler-file", sched_file], env, "scheduler")
        wait_until(lambda: os.path.exists(sched_file) and os.path.getsize(sched_file) > 0, 60,
                   what="scheduler file")
        with open(sched_file) as f:
            self.address = json.load(f)["address"]
        for i in range(n_workers):
            self._start([os.path.join(BIN, "dask"), "worker", self.address, "--nthreads", "1", "--nworkers", "1",
                         "--host", "127.0.0.1", "--no-dashboard", "--memory-limit", "2GiB",
                         "--local-directory", os.path.join(tmp, f"w{i}")], {**env, **(worker_env or {})},
                        f"worker{i}")
        from distributed import Client

        self.client = Client(self.address, timeout="30s")
        self.client.wait_for_workers(n_workers, timeout=60)
        self.n_workers = n_workers

    def _start(self, cmd, env, name):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")  # noqa: SIM115 - closed in close()
        self.logs.append(log)
        self.procs.append(spawn(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))

    def worker_pids(self) -> dict[str, int]:
        """Worker process (not nanny) pids by worker address."""
        return self.client.run(os.getpid)

    def wait_workers(self, n: int | None = None, timeout: float = 60) -> None:
        self.client.wait_for_workers(n or self.n_workers, timeout=timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close(timeout=5)
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_group(p)
            kill_group(p)  # any orphaned child left in the group
        for log in self.logs:
            log.close()


def start_proc_cluster(tmp_path_factory):
    """Fixture body (modules bind it with ``pytest.fixture(scope="module")``)."""
    c = ProcCluster(str(tmp_path_factory.mktemp("dask-cluster")))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def proc_cluster(tmp_path_factory):
    """A real two-worker Dask cluster (subprocesses), one per test module that asks for it."""
    yield from start_proc_cluster(tmp_path_factory)


@pytest.fixture
def worker_process():
    """A fresh LocalCluster of one single-thread worker process, its client the active one (a test's own: what
    the test leaves in the worker, an import or a compilation, dies with it)."""
    from distributed import Client, LocalCluster

    with (LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
          Client(cluster) as client):
        yield client


@pytest.fixture
def nothing_compiled(monkeypatch):
    """This process as if no test before had run the compiled loops (planning weighs the compilation then)."""
    from dkpca.kernels import fastexp

    monkeypatch.setattr(fastexp, "_READY", set())


def checkpoint_passes(store: str) -> int:
    """Passes recorded by the solver checkpoint in ``store`` (0 if none yet).

    Fault tests time their kills on this store state, which the solver writes
    before reporting a pass, rather than on printed text.
    """
    try:
        return int(zarr.open_group(store, path="solver", mode="r").attrs.get("passes", 0))
    except Exception:  # not created yet, or being replaced: not there yet
        return 0


@pytest.fixture
def fitted(tmp_path):
    """A small fitted store ``s.dkpca.zarr`` from ``d.zarr`` (300 x 4), the CLI's way."""
    X = make_data(300, d=4)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "s.dkpca.zarr")
    assert main(["fit", data, "-k", "3", "--gamma", "0.2", "--store", store, "--dtype", "float64", "-q",
                 "--no-progress"]) == 0
    return X, data, store


def cli_error(capsys, argv) -> str:
    """Run the CLI in-process; assert exit 2 and one ``dkpca: error:`` line on stderr; that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dkpca: error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def stored_fit(tmp_path):
    """``(X, store, refit)``: a dense fit of 300 x 4 points with K stored as 3 x 3 blocks; ``refit()`` reruns it."""
    X = make_data(300, d=4)
    store = tmp_path / "s.dkpca.zarr"
    kw = dict(n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64", solver="dense", gram="store")
    dkpca.fit(X, **kw)
    return X, store, lambda: dkpca.fit(X, **kw)


def cli_subparsers() -> dict:
    """The ``dkpca`` command's subcommand parsers by name (``fit``, ``plan``, ...), walked from ``build_parser``."""
    import argparse

    from dkpca.cli import build_parser

    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- object storage ------------------------------------------------------------------
#: what s3fs (botocore) needs to reach the loopback server; subprocesses and Dask workers inherit it
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 API on 127.0.0.1 (moto's server, in a thread), reached through the AWS_* environment.

    Credentials and endpoint go where s3fs users put them (``AWS_ENDPOINT_URL``
    and the key variables), so dkpca is tested with no configuration of its
    own; worker and CLI subprocesses inherit them.
    """
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
                mp.setenv(key, value)
            for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
                mp.delenv(key, raising=False)
            yield endpoint
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint, request):
    """A new, empty bucket on the loopback S3 server: its ``s3://`` URL."""
    import s3fs

    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-") \
        + f"-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return f"s3://{name}"


def s3_keys(url: str) -> list[str]:
    """Every object key under ``url`` (fresh from the server), relative to it."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    root = url.split("://", 1)[1].rstrip("/")
    try:
        return sorted(k[len(root) + 1:] for k in fs.find(root))
    except FileNotFoundError:
        return []


def race_in_rounds(script: str, argv, rounds: int, sync_dir, timeout: float = 60) -> None:
    """Run two racer processes (``python -c script *argv(name)``, names "a" and "b") in lockstep rounds.

    Round ``i`` starts when ``go{i}`` appears in ``sync_dir``; each racer
    writes ``r{i}.{name}`` ("won" or "lost") and waits for ``done{i}``.
    Asserts exactly one winner per round and that both racers exit 0.
    """
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    racers = [subprocess.Popen([sys.executable, "-c", script, *argv(name)], env=env, stderr=subprocess.PIPE,
                               text=True) for name in ("a", "b")]
    try:
        for i in range(rounds):
            (sync_dir / f"go{i}").touch()
            results = [sync_dir / f"r{i}.{name}" for name in ("a", "b")]
            wait_until(lambda rs=results: all(r.exists() for r in rs) or any(p.poll() for p in racers), timeout,
                       what=f"both racers' answers in round {i}")
            assert sorted(r.read_text() for r in results) == ["lost", "won"], f"round {i}"
            (sync_dir / f"done{i}").touch()
        errs = [p.communicate(timeout=60)[1] for p in racers]
    finally:
        for p in racers:
            p.kill()
    assert [p.returncode for p in racers] == [0, 0], errs
