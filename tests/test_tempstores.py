"""Nothing left behind: the store of a fit without ``store=`` lives exactly as long as its model.

A fit of in-memory data (numpy, dask) without ``store=`` writes its Gram
matrix into a new directory under the temporary directory.  It is removed by
``model.close()`` (or leaving ``with model:``), when the model and every
lazy result reading it are garbage-collected, at interpreter exit, or when
the fit fails; a store the user named is never removed.  Each test points the
temporary directory at its own empty folder and lists it.
"""

import gc
import os
import pickle
import subprocess
import sys
import tempfile

import dask.array as da
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

import dkpca
from dkpca import KernelPCA

from .conftest import make_data


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """An empty temporary directory that ``tempfile`` (so dkpca) uses during the test."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def left(tmp) -> list[str]:
    gc.collect()  # finalizers of unreachable models run now, not at some later collection
    return sorted(os.listdir(tmp))


X = make_data(150, seed=5, d=4)


def test_close_removes_the_temporary_store(tmp):
    model = dkpca.fit(X, n_components=2)
    assert model.store.startswith(str(tmp)) and len(left(tmp)) == 1
    Z = model.transform(X[:5])
    model.close()
    assert left(tmp) == []
    np.testing.assert_array_equal(model.embedding_[:5], model.embedding_[:5])  # the arrays stay usable
    assert Z.shape == (5, 2)
    with pytest.raises(ValueError, match=r"removed by close\(\).*store="):
        model.transform(X[:5])


def test_a_lazy_transform_computed_after_close_says_close_removed_the_store(tmp):
    """It said the store did not exist and to 'fit a model first'."""
    import dask.array as da

    model = dkpca.fit(X, n_components=2)
    Z = model.transform(da.from_array(X[:50], chunks=25))
    model.close()
    with pytest.raises(ValueError, match=r"removed by close\(\).*store="):
        Z.compute()


def test_leaving_with_removes_the_temporary_store(tmp):
    with dkpca.fit(X, n_components=2) as model:
        assert len(left(tmp)) == 1 and os.path.isdir(model.store)
    assert left(tmp) == []


def test_garbage_collection_removes_the_temporary_store(tmp):
    model = dkpca.fit(da.from_array(X, chunks=(50, 4)), n_components=2)
    assert len(left(tmp)) == 1
    del model
    assert left(tmp) == []


def test_lazy_transform_keeps_the_store_until_it_is_dropped(tmp):
    model = dkpca.fit(X, n_components=2, dtype="float64")
    expected = model.transform(X[:20])
    Z = model.transform(da.from_array(X[:20], chunks=(10, 4)))
    del model
    assert len(left(tmp)) == 1, "a lazy result still reads the store"
    np.testing.assert_allclose(Z.compute(), expected, atol=1e-12)
    del Z
    assert left(tmp) == []


def test_interpreter_exit_removes_the_temporary_store(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import numpy as np, dkpca\n"
            "model = dkpca.fit(np.random.default_rng(0).standard_normal((60, 3)), n_components=2)\n"
            "print(model.store)\n")  # the model is still referenced when the interpreter exits
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(tmp))
    assert os.listdir(tmp) == []


def test_failed_fit_leaves_no_temporary_store(tmp):
    bad = X.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        dkpca.fit(bad, n_components=2)  # refused after the temporary store was made
    assert left(tmp) == []


def test_named_store_is_always_kept(tmp, tmp_path):
    store = tmp_path / "mine.dkpca.zarr"
    model = dkpca.fit(X, n_components=2, store=store)
    assert model.temporary is None
    model.close()
    del model
    assert left(tmp) == [] and dkpca.load(store).n_components == 2


def test_refit_of_estimator_removes_the_previous_store(tmp):
    est = KernelPCA(2, kernel="rbf").fit(da.from_array(X, chunks=(50, 4)))
    first = est.model_.store
    est.fit(da.from_array(X[:100], chunks=(50, 4)))
    assert left(tmp) == [os.path.basename(os.path.dirname(est.model_.store))]
    assert not os.path.exists(first)


def test_grid_search_over_out_of_core_leaves_nothing(tmp):
    y = (X[:, 0] > np.median(X[:, 0])).astype(int)
    search = GridSearchCV(make_pipeline(KernelPCA(2, kernel="rbf"), LogisticRegression()),
                          {"kernelpca__gamma": [0.05, 0.5]}, cv=2)
    search.fit(da.from_array(X, chunks=(50, 4)), y)  # 4 fold fits and the refit, each out of core
    assert len(left(tmp)) == 1, "only the refitted best estimator's store is alive"
    del search
    assert left(tmp) == []


def test_pickling_an_estimator_with_a_temporary_store_is_refused(tmp):
    est = KernelPCA(2, kernel="rbf").fit(da.from_array(X, chunks=(50, 4)))
    with pytest.raises(pickle.PicklingError, match=r"store='path.dkpca.zarr'"):
        pickle.dumps(est)
    with pytest.raises(pickle.PicklingError, match=r"store='path.dkpca.zarr'"):
        pickle.dumps(est.model_)


def test_pickled_estimator_with_a_named_store_refers_to_it(tmp_path):
    est = KernelPCA(2, kernel="rbf", dtype="float64", store=str(tmp_path / "s.dkpca.zarr"))
    est.fit(da.from_array(X, chunks=(50, 4)))
    again = pickle.loads(pickle.dumps(est))
    assert again.model_.store == est.model_.store
    np.testing.assert_array_equal(again.transform(X[:10]), est.transform(X[:10]))


def test_a_temporary_store_gets_the_model_only_when_saved():
    """The model of a temporary store lives in memory (nobody else can load it); save() writes it there."""
    X = np.random.default_rng(0).standard_normal((60, 3))
    with dkpca.fit(X, n_components=2, dtype="float64") as model:
        with pytest.raises(ValueError, match="model"):
            dkpca.load(model.store)
        assert model.save() == model.store
        np.testing.assert_allclose(dkpca.load(model.store).transform(X[:5]), model.transform(X[:5]), rtol=1e-12)
