"""Resume after the whole job is killed (SIGKILL of the `dkpca fit` process).

Gram blocks completed before the kill are recorded by per-block done markers
and are not recomputed on the rerun (their markers keep their mtime); the
randomized solver restarts from the subspace it saved after its last pass
(``<store>/solver``), not from scratch.  Both are checked on real
subprocesses and against scipy.linalg.eigh of the dense centred kernel.
"""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.io import as_dask
from dkpca.kernels import make_kernel
from dkpca.operator import MatrixFreeKernelOperator
from dkpca.solvers import randomized
from dkpca.storage import FitStore, SolverCheckpoint

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


def _rerun(args):
    proc = subprocess.run(dkpca_cmd(*args), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_job_killed_mid_build_resumes(tmp_path):
    X = make_data(1200, seed=5)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "d.dkpca.zarr")
    nb = 24
    total = nb * (nb + 1) // 2
    args = ("fit", data, "-k", "3", "--gamma", "0.2", "--chunk-size", "50", "--dtype", "float64",
            "--solver", "dense", "-q")
    proc = spawn(dkpca_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(done_markers(store)) >= total // 5, 120, what="20% of the Gram blocks")
        kill_group(proc)  # SIGKILL of the whole job
    finally:
        kill_group(proc)
    assert proc.returncode == -9
    before = done_markers(store)
    assert 0 < len(before) < total, "the build finished before the kill; the test proved nothing"
    assert os.path.exists(os.path.join(store, ".dkpca.lock"))  # left behind by the dead process

    out = _rerun(args)
    m = re.search(r"Gram blocks: (\d+) computed, (\d+) reused", out)
    computed, reused = int(m.group(1)), int(m.group(2))
    assert computed + reused == total and reused >= len(before) and computed > 0
    after = done_markers(store)
    assert len(after) == total
    # blocks completed before the kill were not recomputed (the marker is written last, per block)
    assert all(after[p] == t for p, t in before.items())
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam, rtol=1e-8)
    print(f"job kill mid-build: {len(before)}/{total} blocks done at the kill; rerun computed {computed}, "
          f"reused {reused}")


def test_job_killed_mid_solve_resumes_from_checkpoint(tmp_path):
    X = make_data(1200, seed=2)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "d.dkpca.zarr")
    args = ("fit", data, "-k", "3", "--gamma", "0.2", "--chunk-size", "100", "--dtype", "float64",
            "--solver", "randomized", "--tol", "1e-10", "-q")
    # checkpoint every pass (the default skips saves within 5 s of the last one)
    env = {**os.environ, "DASK_DKPCA__CHECKPOINT_INTERVAL": "0"}
    proc = spawn(dkpca_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_until(lambda: checkpoint_passes(store) >= 4, 120, what="solver pass 4 in the store")
        kill_group(proc)
    finally:
        kill_group(proc)
    assert proc.returncode == -9
    assert FitStore.at(store).model_group() is None, "the fit finished before the kill"
    saved = SolverCheckpoint(store, key={}).load  # any key: just check something is there
    assert saved() is None  # a different key is never trusted
    attrs = dict(zarr.open_group(store, path="solver", mode="r").attrs)
    assert attrs["passes"] >= 4

    out = subprocess.run(dkpca_cmd(*args[:-1]), capture_output=True, text=True, timeout=240, env=env)  # progress
    assert out.returncode == 0, out.stderr
    m = re.search(r"Solver: resumed at pass (\d+) from the checkpoint in the store \((\d+) passes in all\)",
                  out.stdout)
    assert m, out.stdout
    resumed, total_passes = int(m.group(1)), int(m.group(2))
    assert resumed == attrs["passes"]
    rerun_passes = [int(x) for x in re.findall(r"^dkpca: pass (\d+):", out.stderr, flags=re.M)]  # the pass log
    assert rerun_passes[0] == resumed + 1 and rerun_passes[-1] == total_passes
    assert "Gram blocks: 0 computed, 78 reused" in out.stdout
    model = dkpca.load(store)
    assert model.report["converged"] and model.report["solver_info"]["resumed_at_pass"] == resumed
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    # the checkpoint is cleared once the model is saved
    assert "solver" not in zarr.open_group(store, mode="r")
    print(f"job kill mid-solve: killed after pass {attrs['passes']}; rerun resumed at pass {resumed}, "
          f"{total_passes - resumed} more passes, all 78 Gram blocks reused")


# -- the checkpoint itself ------------------------------------------------------
@pytest.fixture
def small_problem(tmp_path):
    X = make_data(300, seed=7)
    path = str(tmp_path / "s.zarr")
    FitStore.at(path).open_for_write()
    kern = make_kernel("rbf", gamma=0.2)
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), kern, dtype=np.float64)
    return X, path, op


def test_checkpoint_roundtrip_and_trust(small_problem):
    _, path, _ = small_problem
    ck = SolverCheckpoint(path, {"k": 3, "kernel": {"name": "rbf"}}, interval=0)
    assert ck.load() is None
    Q1 = np.random.default_rng(0).standard_normal((300, 13))
    ck.save(2, [1.0, 0.1], Q=Q1)
    Q2 = Q1 * 2
    ck.save(3, [1.0, 0.1, 0.01], Q=Q2)
    st = ck.load()
    assert st.passes == 3 and st.history == [1.0, 0.1, 0.01]
    np.testing.assert_array_equal(st.arrays["Q"], Q2)
    # another fit's key: ignored
    assert SolverCheckpoint(path, {"k": 4, "kernel": {"name": "rbf"}}).load() is None
    # a torn state (array not matching its recorded checksum) is never trusted
    g = zarr.open_group(path, path="solver", mode="r+")
    g[g.attrs["slot"]]["Q"][0, 0] = 42.0
    assert ck.load() is None
    # a pointer to a missing slot (killed between writes) is never trusted either
    attrs = dict(g.attrs)
    g.attrs.put({**attrs, "slot": "s9"})
    assert ck.load() is None
    ck.clear()
    assert "solver" not in zarr.open_group(path, mode="r")


def test_resumed_solve_equals_uninterrupted(small_problem):
    """Stop after 3 passes (as a killed job would), resume: identical to one uninterrupted run."""
    _, path, op = small_problem
    ref = randomized.solve(op, 3, tol=1e-12, max_passes=40, rng=1)
    ck = SolverCheckpoint(path, {"k": 3}, interval=0)
    part = randomized.solve(op, 3, tol=1e-12, max_passes=3, rng=1, checkpoint=ck)
    assert not part.converged and ck.load().passes == 3
    rest = randomized.solve(op, 3, tol=1e-12, max_passes=40, rng=999, checkpoint=ck)  # rng unused on resume
    assert rest.info["resumed_at_pass"] == 3 and rest.passes == ref.passes
    assert rest.history[:3] == part.history
    np.testing.assert_allclose(rest.eigenvalues, ref.eigenvalues, rtol=1e-13)
    np.testing.assert_allclose(np.abs(rest.eigenvectors), np.abs(ref.eigenvectors), atol=1e-10)


def test_fit_clears_checkpoint_and_ignores_foreign_one(tmp_path, blobs):
    store = tmp_path / "s.zarr"
    FitStore.at(store).open_for_write()
    # a checkpoint of some other problem in the store must not be used
    SolverCheckpoint(str(store), {"k": 99}).save(5, [0.5] * 5, Q=np.ones((600, 13)))
    model = dkpca.fit(blobs, n_components=3, gamma=0.1, solver="randomized", chunk_size=200, dtype="float64",
                      tol=1e-10, store=store)
    assert "resumed_at_pass" not in model.report["solver_info"]
    assert "solver" not in zarr.open_group(str(store), mode="r")
    lam, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_checkpoint_interval_throttles_saves(small_problem, monkeypatch):
    _, path, _ = small_problem
    clock = [100.0]
    monkeypatch.setattr("dkpca.storage.checkpoint.time.monotonic", lambda: clock[0])
    ck = SolverCheckpoint(path, {"k": 1}, interval=5.0)
    assert ck.load() is None
    Q = np.ones((10, 2))
    clock[0] += 4.0
    assert ck.save(1, [0.1], Q=Q) is False and ck.saves == 0  # within 5 s of the start: skipped
    clock[0] += 2.0
    assert ck.save(2, [0.1, 0.01], Q=Q) is True and ck.saves == 1
    assert ck.load().passes == 2
    assert ck.save(3, [0.1, 0.01, 0.001], Q=Q) is False  # just saved
    assert SolverCheckpoint(path, {"k": 1}, interval=0).save(3, [0.1], Q=Q) is True


class _Killed(BaseException):
    """A kill: nothing in dkpca catches it."""


@pytest.mark.parametrize("after", ["K", "diag", "done"])
def test_a_fit_killed_while_creating_the_gram_arrays_resumes(tmp_path, monkeypatch, after):
    """Killed between two arrays of a new Gram group (no block built yet): the same fit completes the group and
    gives eigh's answer (dense solve, float64 K: 1e-8 relative); dkpca verify says a rerun builds K."""
    from dkpca.storage import gramstore, verify_store

    X = make_data(300, d=4)
    store = str(tmp_path / "s.dkpca.zarr")
    kw = dict(n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64", solver="dense", gram="store")
    real, made = gramstore.create_array, []

    def create(group, name, **options):
        if made and made[-1] == after:
            raise _Killed
        made.append(name)
        return real(group, name, **options)
    real_K = gramstore._create_K

    def create_K(group, *a):
        made.append("K")
        return real_K(group, *a)
    with monkeypatch.context() as m:
        m.setattr(gramstore, "create_array", create)
        m.setattr(gramstore, "_create_K", create_K)
        with pytest.raises(_Killed):
            dkpca.fit(X, **kw)
    assert all(f.ok for f in verify_store(store))
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(dkpca.fit(X, **kw).eigenvalues_, lam, rtol=1e-8)
