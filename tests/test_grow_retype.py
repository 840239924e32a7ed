"""An update whose stored K is float32 where ``dtype="auto"`` holds the grown data's K in float64 builds K anew.

The old fit's sample said float32 (40 rows of N(0, I): ~4e-8 relative error in its top 10 eigenvalues); the
grown data's says float64 (2,000 more rows in a tight cluster: ~1e-3, above tol) -- as a fresh fit of it
decides.  Before, the update was refused for a dtype the user never named ("dtype differs (store: 'float32',
now: 'float64')"); keeping float32 would have answered less accurately than a fresh fit.  Now K is built anew in
float64, the old model still starting the solver.  References: eigh of the centred kernel (``reference_eigh``),
eigenvalues to tol = 1e-6 of the largest (a residual r bounds an eigenvalue's error by |r|); which precision K
is held in, from the report.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import growth as update_module
from dkpca.cli import main
from dkpca.planning import precision as precision_module

from .conftest import reference_eigh

K, D = 10, 6
KC = 5  # components of the cluster


class Killed(BaseException):
    """A kill: nothing in dkpca catches it (as nothing runs after a SIGKILL)."""


@pytest.fixture
def grown(tmp_path):
    """``(X, store)``: the store holds an auto fit (float32 K) of X's first 40 rows."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((40, D)), 1e-3 * rng.standard_normal((2000, D))])
    store = str(tmp_path / "s.dkpca.zarr")
    old = dkpca.fit(X[:40], n_components=K, store=store)
    assert old.report["gram"]["dtype"] == "float32"
    return X, store


def _check(model, X, k=K):
    lam, _ = reference_eigh(rbf_kernel(X, gamma=1.0 / D), k)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-6 * lam[0])


def test_an_update_auto_finds_short_of_float32_builds_k_anew_in_float64(grown):
    X, store = grown
    model = dkpca.fit(X, n_components=K, store=store)
    _check(model, X)
    u = model.report["update"]
    assert u["dtype"] == ["float32", "float64"] and u["blocks_reused"] == 0
    assert u["tile"] == [40, 2040]  # 51 row blocks in the store's tile: K is re-tiled too
    assert model.report["gram"]["dtype"] == "float64" and "above 1e-06: float64" in model.report["solver_reason"]
    assert "old model's 10 eigenvectors extended" in u["warm_start"]
    again = dkpca.fit(X, n_components=K, store=store)  # a refit reuses the float64 K
    assert "update" not in again.report and again.report["gram"]["computed_blocks"] == 0


@pytest.fixture
def clustered_float32(tmp_path):
    """``(X, store)``: X 2,000 rows of one tight cluster (rbf there is about quadratic: D leading eigenvalues,
    the rest ~1e-6 of them); the store holds a fit of its first 100 with dtype='float32' named (warned) in tiles
    of 100, which an update keeps."""
    X = 1e-3 * np.random.default_rng(2).standard_normal((2000, D))
    store = str(tmp_path / "s.dkpca.zarr")
    with pytest.warns(dkpca.planning.precision.PrecisionWarning):
        dkpca.fit(X[:100], n_components=KC, store=store, dtype="float32", chunk_size=100)
    return X, store


def test_at_the_stores_tile_k_goes_for_its_precision_alone(clustered_float32):
    X, store = clustered_float32
    model = dkpca.fit(X, n_components=KC, store=store, chunk_size=100)
    _check(model, X, KC)
    u = model.report["update"]
    assert u["dtype"] == ["float32", "float64"] and u["tile"] is None and u["blocks_reused"] == 0
    assert model.report["gram"]["block"] == 100 and model.report["gram"]["dtype"] == "float64"


def test_an_update_float32_still_suffices_for_grows_k(grown):
    """The same old fit grown by rows like its own: float32 kept, the old blocks reused."""
    X, store = grown
    Y = np.vstack([X[:40], np.random.default_rng(1).standard_normal((20, D))])
    model = dkpca.fit(Y, n_components=K, store=store)
    _check(model, Y)
    assert model.report["update"]["dtype"] is None and model.report["gram"]["dtype"] == "float32"


def test_an_update_asked_a_tol_float32_misses_builds_k_anew_in_float64(grown, tmp_path):
    """The same growth asked for tol=1e-10, which float32 (~1e-8 here) misses: a fresh fit holds K in float64, and
    so does the update now.  Before: the stored float32 K was kept (the reuse of a refit with a tighter tol),
    its eigenvalues ~5e-8 of lambda_1 from the fresh fit's."""
    X, store = grown
    Y = np.vstack([X[:40], np.random.default_rng(1).standard_normal((20, D))])
    model = dkpca.fit(Y, n_components=K, store=store, tol=1e-10)
    fresh = dkpca.fit(Y, n_components=K, store=str(tmp_path / "fresh.zarr"), tol=1e-10)
    assert model.report["gram"]["dtype"] == fresh.report["gram"]["dtype"] == "float64"
    assert model.report["update"]["dtype"] == ["float32", "float64"]
    lam, _ = reference_eigh(rbf_kernel(Y, gamma=1.0 / D), K)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-10 * lam[0])


def test_the_plan_and_info_say_k_is_rebuilt_in_float64(grown, capsys):
    X, store = grown
    assert "K built anew in float64" in dkpca.plan(X, n_components=K, store=store).update
    dkpca.fit(X, n_components=K, store=store)
    assert main(["info", store]) == 0
    assert "K rebuilt from float32 to float64" in capsys.readouterr().out


def test_an_explicit_dtype_float32_update_keeps_float32(clustered_float32):
    """dtype='float32' named: kept (warned as any lossy float32 request), the old block grown."""
    X, store = clustered_float32
    with pytest.warns(dkpca.planning.precision.PrecisionWarning, match="above 1e-06"):
        model = dkpca.fit(X, n_components=KC, store=store, dtype="float32", chunk_size=100)
    assert model.report["update"]["dtype"] is None and model.report["update"]["blocks_reused"] == 1


def test_a_retyping_update_killed_before_k_goes_resumes(clustered_float32, monkeypatch):
    X, store = clustered_float32
    with monkeypatch.context() as m:
        m.setattr(update_module, "retire_gram", lambda *a: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            dkpca.fit(X, n_components=KC, store=store, chunk_size=100)
    assert dkpca.load(store).n_samples == 100  # the old model stays the store's
    model = dkpca.fit(X, n_components=KC, store=store, chunk_size=100)
    _check(model, X, KC)
    assert model.report["gram"]["dtype"] == "float64"


def test_an_update_measures_the_precision_once(grown, monkeypatch):
    """The update's check (float32 short of tol?) is the fit's own precision decision, reused: its sample's chunks
    read and its eigh made once, not again by the plan."""
    X, store = grown
    calls = []
    real = precision_module.measure_precision
    monkeypatch.setattr(precision_module, "measure_precision", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    model = dkpca.fit(X, n_components=K, store=store)
    assert model.report["update"]["dtype"] == ["float32", "float64"] and len(calls) == 1


def test_a_plan_of_sizes_only_reads_nothing_of_the_grown_data(grown, monkeypatch):
    X, store = grown
    calls = []
    monkeypatch.setattr(precision_module, "measure_precision", lambda *a, **kw: calls.append(1))
    p = dkpca.plan(X, n_components=K, store=store, measure=False)
    assert calls == [] and "would update the store's fit of 40 rows" in p.update
