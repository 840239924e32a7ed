"""The ``dkpca`` command end to end, as a user runs it (real subprocesses)."""

import subprocess
import sys

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca

from .conftest import reference_eigh


def run(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "dkpca.cli", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"dkpca {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def data_path(tmp_path, blobs):
    path = tmp_path / "data.zarr"
    zarr.create_array(str(path), data=blobs, chunks=(128, blobs.shape[1]))
    return path


def test_fit_info_transform(tmp_path, data_path, blobs):
    out = run("fit", str(data_path), "--n-components", "4", "--gamma", "0.1", "--dtype", "float64",
              "--chunk-size", "200", "--solver", "randomized", "--tol", "1e-10", "--no-progress")
    store = tmp_path / "data.dkpca.zarr"
    assert str(store) in out.stdout and "Gram blocks: 6 computed, 0 reused" in out.stdout
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 4)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam_ref, rtol=1e-8)

    again = run("fit", str(data_path), "--n-components", "4", "--gamma", "0.1", "--dtype", "float64",
                "--chunk-size", "200", "--no-progress")
    assert "Gram blocks: 0 computed, 6 reused" in again.stdout

    info = run("info", str(store))
    assert "eigenvalue" in info.stdout and "rbf" in info.stdout

    run("transform", str(store), str(data_path), str(tmp_path / "z.zarr"))
    Z = zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[:]
    np.testing.assert_allclose(Z, dkpca.load(store).embedding_, atol=1e-8)


@pytest.mark.parametrize(
    "args, message",
    [
        (["fit", "/no/such/input.zarr"], "does not exist"),
        (["fit", "{data}", "--n-components", "100000"], "n_components=100000"),
        (["fit", "{data}", "--gamma", "-1"], "gamma=-1.0"),
        (["fit", "{data}", "--kernel", "gauss"], "unknown kernel 'gauss'"),
        (["info", "/no/such/store.zarr"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_error(data_path, args, message):
    args = [a.format(data=data_path) for a in args]
    proc = run(*args, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dkpca: error:") and message in lines[0], proc.stderr


def test_fingerprint_mismatch_names_overwrite(tmp_path, data_path, blobs):
    run("fit", str(data_path), "--no-progress")
    zarr.create_array(str(data_path), data=blobs + 1, chunks=(128, blobs.shape[1]), overwrite=True)
    proc = run("fit", str(data_path), "--no-progress", check=False)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
    run("fit", str(data_path), "--no-progress", "--overwrite")


def test_demo_runs_on_local_cluster(tmp_path):
    out = run("demo", "--dir", str(tmp_path), "--n-samples", "3000", "--n-components", "3", "--workers", "2")
    assert out.stderr.count("dashboard: http://127.0.0.1") == 1  # the link, once
    assert "eigenvalue" in out.stdout and "explained" in out.stdout
    model = dkpca.load(tmp_path / "shells.dkpca.zarr")
    assert model.n_samples == 3000 and model.report["converged"]
