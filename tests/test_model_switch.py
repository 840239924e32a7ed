"""A refit writes the new model beside the old one and switches atomically.

Readers loading a store while it is refitted used to see "holds no complete
model" or ``KeyError: 'eigenvectors'``: the old model was deleted before the
new one was written.  Now each model is a fresh ``model.<hex>`` group and the
root attribute ``model`` is switched to it in one atomic write (see
``dkpca/storage/fitstore.py``, "Models").  Readers run in a separate process
(the real situation: another job loads the store) and synchronise on store
state, never on printed text.
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import numpy as np
import pytest
import zarr

import dkpca
from dkpca.sparse import SparseKernelPCA
from dkpca.storage import FitStore, GramStore

from .conftest import kill_group, make_data, spawn, wait_until

GAMMAS = [0.05 * (i + 1) for i in range(12)]

# Loads the store in a loop until <stop> exists; writes what it saw to <out>.
# After each attempt it replaces <out>.count with the number of attempts so far,
# so the writer can wait for a load between two refits (under a loaded CI host
# the reader may otherwise get too few turns to prove anything).
# Every model loaded is checked against the kernel it names: its eigenpairs
# must be eigenpairs of the centred K of that kernel (a model mixed from two
# fits, or with zero-filled arrays, fails this).
READER = r"""
import json, os, sys
import numpy as np
import dkpca
from sklearn.metrics.pairwise import rbf_kernel

store, data, ready, stop, out = sys.argv[1:6]
X = np.load(data)
n = len(X)
H = np.eye(n) - 1.0 / n
seen, errors, worst = [], [], 0.0
open(ready, "w").close()
while not os.path.exists(stop):
    try:
        m = dkpca.load(store)
        gamma = m.kernel.to_dict()["gamma"]
        lam, U = m.eigenvalues_, m.eigenvectors_
        Kc = H @ rbf_kernel(X, gamma=gamma) @ H
        U = U / np.linalg.norm(U, axis=0)
        worst = max(worst, float(np.abs(Kc @ U - U * lam).max() / lam[0]))
        seen.append([gamma, lam.tolist()])
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    with open(out + ".tmp", "w") as f:
        f.write(str(len(seen) + len(errors)))
    os.replace(out + ".tmp", out + ".count")
with open(out, "w") as f:
    json.dump({"seen": seen, "errors": errors, "worst_residual": worst}, f)
"""


def model_groups(store) -> list[str]:
    """The store's top-level directories that hold (or held) a model."""
    return sorted(e for e in os.listdir(store) if e == "model" or e.startswith("model."))


def fit(X, store, gamma, **kw):
    return dkpca.fit(X, n_components=3, kernel="rbf", gamma=gamma, solver="dense", dtype="float64",
                     store=store, **kw)


def attempts(out: str) -> int:
    """How many loads the reader writing <out> has finished (0 before its first)."""
    try:
        with open(out + ".count") as f:
            return int(f.read())
    except FileNotFoundError:
        return 0


def load_while_refitting(tmp_path, **fit_kw) -> tuple[dict, dict]:
    """Refit 12 times with different gammas while a reader process loads; (what it saw, gamma -> eigenvalues).

    Before each refit the writer waits for the reader to finish one more load, so
    every refit has at least one load before it, however the host shares its cores.
    """
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    np.save(tmp_path / "X.npy", X)
    fits = {GAMMAS[0]: fit(X, store, GAMMAS[0], **fit_kw).eigenvalues_.tolist()}
    paths = [str(tmp_path / name) for name in ("ready", "stop", "out.json")]
    proc = spawn([sys.executable, "-c", READER, store, str(tmp_path / "X.npy"), *paths])
    try:
        wait_until(lambda: os.path.exists(paths[0]), 120, what="the reader process to start")
        for gamma in GAMMAS[1:]:
            done = attempts(paths[2])
            wait_until(lambda done=done: attempts(paths[2]) > done, 120, what="the reader to finish a load")
            fits[gamma] = fit(X, store, gamma, **fit_kw).eigenvalues_.tolist()
        open(paths[1], "w").close()
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    with open(paths[2]) as f:
        return json.load(f), fits


def test_readers_never_see_a_half_model_while_the_model_is_replaced(tmp_path):
    # gram="recompute": the refit keeps the store's data and only replaces the model,
    # so every load succeeds (the old model until the switch, then the new one)
    seen, fits = load_while_refitting(tmp_path, gram="recompute")
    assert seen["errors"] == []
    assert len(seen["seen"]) >= len(GAMMAS) - 1  # a load before each refit (the writer waits for it)
    assert len({g for g, _ in seen["seen"]}) >= 2
    for gamma, lam in seen["seen"]:  # each loaded model is exactly one of the fits
        assert lam == fits[gamma]
    assert seen["worst_residual"] < 1e-8


def test_readers_see_only_no_complete_model_while_the_gram_matrix_is_rebuilt(tmp_path):
    # gram="store" with a new gamma rebuilds K and withdraws the model first: a reader
    # then sees "holds no complete model" (and nothing else) until the new model is switched in
    seen, fits = load_while_refitting(tmp_path, gram="store", overwrite=True)
    assert [e for e in seen["errors"] if "holds no complete model" not in e] == []
    assert len({g for g, _ in seen["seen"]}) >= 2
    for gamma, lam in seen["seen"]:
        assert lam == fits[gamma]
    assert seen["worst_residual"] < 1e-8


def test_a_refit_leaves_one_model_group(tmp_path):
    # the old model's group is deleted once the pointer has left it
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    for gamma in GAMMAS[:3]:
        fit(X, store, gamma, gram="recompute")
    assert model_groups(store) == [FitStore.at(store).model_group()]


def test_an_orphan_model_group_is_ignored_by_readers(tmp_path):
    # a writer killed after writing its group but before the switch: readers follow the pointer only
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    lam = fit(X, store, 0.1).eigenvalues_
    orphan = zarr.open_group(store, mode="r+").create_group(f"model.{uuid.uuid4().hex}")
    orphan.create_array("eigenvalues", data=np.ones(3))
    orphan.attrs.update({"complete": True})
    np.testing.assert_array_equal(dkpca.load(store).eigenvalues_, lam)
    assert len(model_groups(store)) == 2  # readers never delete anything


def test_the_next_fit_removes_an_orphan_model_group(tmp_path):
    # orphans are cleaned up by the next writer
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    fit(X, store, 0.1, gram="recompute")
    orphan = zarr.open_group(store, mode="r+").create_group(f"model.{uuid.uuid4().hex}")
    orphan.create_array("eigenvalues", data=np.ones(3))
    fit(X, store, 0.2, gram="recompute")
    assert model_groups(store) == [FitStore.at(store).model_group()]


def test_load_after_the_gram_matrix_was_rebuilt_says_no_complete_model(tmp_path):
    # rebuilding K (a refit with another kernel, interrupted before its model) withdraws the old model
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    fit(X, store, 0.1, gram="store")
    want = dict(zarr.open_group(store, path="gram", mode="r").attrs)
    want["kernel"] = {**want["kernel"], "gamma": 0.7}
    GramStore(FitStore.at(store)).prepare(want, overwrite=True)
    with pytest.raises(ValueError, match="holds no complete model"):
        dkpca.load(store)
    assert model_groups(store) == []


def as_version_1(store: str) -> None:
    """Rewrite a fitted store into the version-1 layout: the model in a fixed "model" group, no pointer."""
    os.rename(os.path.join(store, FitStore.at(store).model_group()), os.path.join(store, "model"))
    meta_path = os.path.join(store, "zarr.json")
    with open(meta_path) as f:
        meta = json.load(f)
    del meta["attributes"]["model"]
    meta["attributes"]["format_version"] = 1
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def test_a_version_1_store_still_loads(tmp_path):
    # version 1 kept the model in a fixed "model" group and had no pointer: it is read as before
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    lam = fit(X, store, 0.1, gram="recompute").eigenvalues_
    as_version_1(store)
    np.testing.assert_array_equal(dkpca.load(store).eigenvalues_, lam)


def test_a_refit_upgrades_a_version_1_store(tmp_path):
    # the first switch writes format_version 2 with the pointer, then deletes the fixed group
    X = make_data(200, seed=3, d=3)
    store = str(tmp_path / "s.zarr")
    fit(X, store, 0.1, gram="recompute")
    as_version_1(store)
    lam = fit(X, store, 0.2, gram="recompute").eigenvalues_
    assert zarr.open_group(store, mode="r").attrs["format_version"] == 2
    assert model_groups(store) == [FitStore.at(store).model_group()] and "model" not in model_groups(store)
    np.testing.assert_array_equal(dkpca.load(store).eigenvalues_, lam)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # the fit's quality is not at stake
def test_saving_a_sparse_model_again_leaves_one_group(tmp_path):
    # the sparse model is switched the same way: one group, the latest model
    X = make_data(120, seed=4, d=3)
    store = str(tmp_path / "sp.zarr")
    for k in (2, 3):
        SparseKernelPCA(n_components=k, random_state=0).fit(X).save(store)
    groups = [e for e in os.listdir(store) if e.startswith("sparse_model")]
    assert groups == [FitStore.at(store).model_group("sparse_model")]
    assert SparseKernelPCA.load(store).n_components == 3


def test_a_live_model_whose_store_was_refit_on_other_data_says_so(tmp_path):
    """A store-backed estimator fitted on A, then its store refit on B: its transform said "the store is damaged or
    was edited"; the store is sound, so the line now says it was refit and how to go on."""
    import dask.array as da

    store = tmp_path / "s.dkpca.zarr"
    A, B = make_data(400, d=4), make_data(400, seed=1, d=4) + 3
    est = dkpca.KernelPCA(n_components=3, gamma=0.2, store=store).fit(da.from_array(A, chunks=200))
    dkpca.fit(B, n_components=3, gamma=0.2, store=store, overwrite=True)
    with pytest.raises(ValueError, match="was refit since this model was loaded: .*load the store's model again"):
        est.transform(A[:5])
    np.testing.assert_allclose(dkpca.load(store).transform(B[:5]), dkpca.load(store).embedding_[:5], atol=1e-4)
