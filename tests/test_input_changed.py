"""An input that changes while a fit reads it is refused, and the rerun fits the data as it then is.

A fit reads its input twice: the scan (finite? the fingerprint) and the copy into the store.  A file still
being written, or rewritten meanwhile, gives two different reads; before, the store recorded the scan's
fingerprint over a copy of other data -- a later fit of the scanned data would have reused that copy, its K
and its model without a word.  Simulated here by writing a changed row into the Zarr input right after the
fit's scan.  Reference: ``scipy.linalg.eigh`` of the dense centred kernel (``conftest.assert_rbf_eigenvalues``;
block Lanczos at tol 1e-6 on this separated spectrum: eigenvalues within 1e-8 lambda_1).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import dkpca
from dkpca import pipeline
from dkpca.storage import FitStore

from .conftest import assert_rbf_eigenvalues, cli_error, make_data

GAMMA, K = 0.2, 3
KW = dict(n_components=K, gamma=GAMMA, chunk_size=64, dtype="float64", solver="lanczos")
SAID = "the input changed while this fit read it: its rows 320 to 383 differ between dkpca's check of them and its copy"


def _written_after_the_scan(monkeypatch, path: str, row: int) -> np.ndarray:
    """Make the fit's scan be followed by a write of a changed ``row`` into the Zarr input at ``path``; the data
    as it then is."""
    real, changed = pipeline.scan, zarr.open_array(path)[:]
    changed[row] += 1.0

    def scan(X, *a, **kw):
        fp = real(X, *a, **kw)
        zarr.open_array(path, mode="r+")[row] = changed[row]
        return fp
    monkeypatch.setattr(pipeline, "scan", scan)
    return changed


def _refused_mid_fit(tmp_path, monkeypatch, X: np.ndarray, store: str) -> tuple[str, np.ndarray]:
    """X as a Zarr input, changed in row 350 right after the fit's scan: the fit into ``store`` is refused.
    The input's path and its data as it then is."""
    path = str(tmp_path / "x.zarr")
    zarr.create_array(path, data=X, chunks=(100, X.shape[1]))
    with monkeypatch.context() as m:
        changed = _written_after_the_scan(m, path, 350)
        with pytest.raises(ValueError, match=SAID):
            dkpca.fit(path, store=store, **KW)
    return path, changed


def test_a_fit_whose_input_changes_after_its_scan_is_refused_and_the_rerun_fits_it_as_it_is(tmp_path, monkeypatch):
    X, store = make_data(400, seed=3), str(tmp_path / "s.dkpca.zarr")
    path, changed = _refused_mid_fit(tmp_path, monkeypatch, X, store)
    assert "data" not in FitStore.at(store).open()  # the copy of neither reading is kept
    assert_rbf_eigenvalues(dkpca.fit(path, store=store, **KW), changed, GAMMA, K)
    # the store's fingerprint is its copy's: the data the first scan read is other data now
    with pytest.raises(ValueError, match="was fitted on different data"):
        dkpca.fit(X, store=store, **KW)


def test_an_update_whose_new_rows_change_after_its_scan_is_refused_and_the_rerun_finishes_it(tmp_path, monkeypatch):
    X, store = make_data(400, seed=3), str(tmp_path / "s.dkpca.zarr")
    old = dkpca.fit(X[:300], store=store, **KW)
    path, changed = _refused_mid_fit(tmp_path, monkeypatch, X, store)
    # as after a kill mid-copy: the old model is the store's and reads its own rows
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, old.eigenvalues_, rtol=0, atol=0)
    model = dkpca.fit(path, store=store, **KW)
    assert model.report["update"]["rows_before"] == 300
    assert_rbf_eigenvalues(model, changed, GAMMA, K)


def test_the_cli_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    """Found after the copy (the progress of which, where shown, comes before it): one line, exit 2."""
    X = make_data(400, seed=3)
    path = str(tmp_path / "x.zarr")
    zarr.create_array(path, data=X, chunks=(100, X.shape[1]))
    _written_after_the_scan(monkeypatch, path, 350)
    err = cli_error(capsys, ["fit", path, "--store", str(tmp_path / "s.dkpca.zarr"), "-k", "3", "--chunk-size", "64",
                                    "--no-progress"])
    assert SAID in err and "rerun once it is complete" in err
