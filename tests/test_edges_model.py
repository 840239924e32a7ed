"""Issue 37, the saved model: trust nothing read back from a store's model group or its attributes.

A model's chunks carry a CRC-32C, but a CRC only proves a chunk is what *some*
writer wrote: eigenvalues rewritten through zarr (a valid CRC), or an array
whose ``crc32c`` codec was dropped from its ``zarr.json``, used to load,
transform and verify as intact.  Now every model group records each array's
shape, chunks, data type and XXH3 digest when it is written, and every read
(load, transform, info, verify) checks them.  Tampered attributes (a report
that is a string, a pointer ``12345``, a complex data type, a huge shape) used
to give AttributeError/TypeError/MemoryError tracebacks; each is now one line
naming the field and the fix (refit).

References: eigenvalues against ``reference_eigh`` (scipy.linalg.eigh of the
dense centred kernel) to 1e-8 relative (float64 K, a dense solve); a model that
loads after an edit dkpca must accept has exactly the eigenvalues it had.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.sparse import SparseKernelPCA
from dkpca.storage import FitStore, verify_store

from .conftest import cli_error, make_data, reference_eigh

GAMMA = 0.2


@pytest.fixture(scope="module")
def fitted_store(tmp_path_factory):
    """``(X, path)``: one dense float64 fit of 300 x 4 points (K stored as 3 x 3 blocks), copied by each test."""
    X = make_data(300, d=4)
    path = tmp_path_factory.mktemp("edges") / "s.dkpca.zarr"
    dkpca.fit(X, n_components=3, gamma=GAMMA, store=path, chunk_size=100, dtype="float64", solver="dense",
              gram="store")
    return X, path


@pytest.fixture
def store(fitted_store, tmp_path):
    """A fresh copy of the fitted store, to damage."""
    path = tmp_path / "s.dkpca.zarr"
    shutil.copytree(fitted_store[1], path)
    return path


@pytest.fixture
def new_points(tmp_path):
    path = tmp_path / "xt.npy"
    np.save(path, make_data(20, seed=5, d=4))
    return str(path)


def group(store) -> str:
    return FitStore.at(store).model_group()


def edit_json(path, change) -> None:
    """Rewrite the ``zarr.json`` at ``path`` (a store member's directory) with ``change(metadata)``."""
    meta_path = path / "zarr.json"
    meta = json.loads(meta_path.read_text())
    change(meta)
    meta_path.write_text(json.dumps(meta))


def set_attr(path, key, value) -> None:
    edit_json(path, lambda m: m["attributes"].__setitem__(key, value))


def drop_crc(array_dir) -> None:
    """Remove the ``crc32c`` codec from an array's metadata and its 4-byte trailer from every chunk file."""
    edit_json(array_dir, lambda m: m.__setitem__("codecs", [c for c in m["codecs"] if c["name"] != "crc32c"]))
    for chunk in (array_dir / "c").rglob("*"):
        if chunk.is_file():
            chunk.write_bytes(chunk.read_bytes()[:-4])


def refused_everywhere(store, new_points, tmp_path, capsys, *words: str, also: tuple[str, ...] = ()) -> None:
    """load, info, transform: one line naming ``words`` and the fix; verify: a BAD model line (and one for each
    part in ``also``), exit 1."""
    with pytest.raises(ValueError) as err:
        dkpca.load(store)
    for text in (str(err.value), cli_error(capsys, ["info", str(store)]),
                 cli_error(capsys, ["transform", str(store), new_points, str(tmp_path / "z.zarr")])):
        assert "\n" not in text.strip() and "refit" in text, text
        for w in words:
            assert w in text, text
    assert not (tmp_path / "z.zarr").exists()
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    (model,) = [line for line in bad if line.startswith("BAD  model: ")]
    assert all(w in model for w in words) and len(bad) == 1 + len(also), out
    assert f"damaged ({', '.join([*also, 'model'])})" in out


# -- case 8: model arrays rewritten, checksums removed ---------------------------------
def test_eigenvalues_rewritten_through_zarr_are_refused(store, new_points, tmp_path, capsys):
    arr = zarr.open_array(str(store), path=f"{group(store)}/eigenvalues", mode="r+")
    arr[...] = arr[...] * 2  # a valid CRC: zarr wrote it
    refused_everywhere(store, new_points, tmp_path, capsys, "eigenvalues", "digest")


def test_eigenvectors_with_one_chunk_swapped_are_refused(store, new_points, tmp_path, capsys):
    # two chunks of the same array exchanged: each chunk's CRC is valid, the array is not what was written
    c = store / group(store) / "eigenvectors" / "c"
    a, b = (c / "0" / "0").read_bytes(), (c / "1" / "0").read_bytes()
    (c / "0" / "0").write_bytes(b)
    (c / "1" / "0").write_bytes(a)
    refused_everywhere(store, new_points, tmp_path, capsys, "eigenvectors", "digest")


def test_an_array_without_its_crc32c_codec_is_refused(store, new_points, tmp_path, capsys):
    drop_crc(store / group(store) / "row_means")
    refused_everywhere(store, new_points, tmp_path, capsys, "row_means", "crc32c")


def test_a_model_without_its_digests_in_a_store_that_records_them_is_refused(store, new_points, tmp_path, capsys):
    arr = zarr.open_array(str(store), path=f"{group(store)}/eigenvalues", mode="r+")
    arr[...] = arr[...] * 2
    edit_json(store / group(store), lambda m: m["attributes"].pop("arrays"))
    refused_everywhere(store, new_points, tmp_path, capsys, "arrays")


def test_a_model_saved_before_digests_and_checksums_still_loads(fitted_store, store, new_points, tmp_path, capsys):
    # a store written before digests existed: no record in the model group, no marker in the root, and
    # (older still) arrays without the crc32c codec; it loads, transforms and verifies as before
    X = fitted_store[0]
    before = dkpca.load(store)
    name = group(store)
    edit_json(store / name, lambda m: [m["attributes"].pop(k) for k in ("arrays", "digest")])
    edit_json(store, lambda m: m["attributes"].pop("model_digests"))
    for member in ("eigenvalues", "eigenvectors", "row_means"):
        drop_crc(store / name / member)
    model = dkpca.load(store)
    np.testing.assert_array_equal(model.eigenvalues_, before.eigenvalues_)
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert main(["transform", str(store), new_points, str(tmp_path / "z.zarr")]) == 0
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[...],
                               before.transform(np.load(new_points)), rtol=1e-12, atol=1e-12)
    assert main(["verify", str(store)]) == 0
    assert "written without checksums" in capsys.readouterr().out


def test_a_version_1_store_with_a_digested_model_still_loads(store):
    # the version-1 layout (fixed "model" group, no pointer) with a group written by this dkpca
    lam = dkpca.load(store).eigenvalues_
    (store / group(store)).rename(store / "model")
    edit_json(store, lambda m: [m["attributes"].pop("model"), m["attributes"].__setitem__("format_version", 1)])
    np.testing.assert_array_equal(dkpca.load(store).eigenvalues_, lam)


def test_an_intact_store_verifies_and_the_digests_are_recorded(store, capsys):
    attrs = zarr.open_group(str(store), path=group(store), mode="r").attrs.asdict()
    assert set(attrs["arrays"]) == {"eigenvalues", "eigenvectors", "row_means"}
    assert main(["verify", str(store)]) == 0
    assert "intact" in capsys.readouterr().out


# -- tampered attributes: one line naming the field and the fix ---------------------------
def _root(key, value):
    return lambda store: set_attr(store, key, value)


def _model_attr(key, value):
    return lambda store: set_attr(store / group(store), key, value)


def _array_meta(member, key, value):
    return lambda store: edit_json(store / group(store) / member, lambda m: m.__setitem__(key, value))


def _both_shapes(store):
    # the array's metadata and the model's record edited alike: no digest check can run before the read
    name = group(store)
    edit_json(store / name / "eigenvectors", lambda m: m.__setitem__("shape", [10 ** 12, 3]))
    edit_json(store / name, lambda m: m["attributes"]["arrays"]["eigenvectors"].__setitem__("shape", [10 ** 12, 3]))


TAMPERED = {
    "report-a-string": (_model_attr("report", "hello"), "report"),
    "report-gram-a-string": (_model_attr("report", {"gram": "x"}), "report"),
    "report-timings-a-string": (_model_attr("report", {"timings": "x"}), "report"),
    "report-residual-a-string": (_model_attr("report", {"max_relative_residual": "x"}), "report"),
    "pointer-12345": (_root("model", 12345), "'model'"),
    "pointer-a-list": (_root("model", ["model.x"]), "'model'"),
    "pointer-to-data": (_root("model", "data"), "'model'"),
    "pointer-dot-dot": (_root("model", "../../etc"), "'model'"),
    "pointer-to-a-missing-group": (_root("model", "model." + "0" * 32), "model." + "0" * 32),
    "complete-a-string": (_model_attr("complete", "no"), "complete"),
    "record-a-string": (_model_attr("arrays", "x"), "arrays"),
    "block-huge": (_model_attr("block", 10 ** 15), "block"),
    "eigenvalues-complex64": (_array_meta("eigenvalues", "data_type", "complex64"), "eigenvalues"),
    "eigenvectors-int32": (_array_meta("eigenvectors", "data_type", "int32"), "eigenvectors"),
    "eigenvectors-huge-shape": (_array_meta("eigenvectors", "shape", [10 ** 12, 3]), "eigenvectors"),
    "row-means-huge-shape": (_array_meta("row_means", "shape", [10 ** 12]), "row_means"),
    "record-and-shape-huge": (_both_shapes, "eigenvectors"),
    "attributes-a-list": (lambda store: edit_json(store / group(store), lambda m: m.__setitem__("attributes", [1])),
                          group),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_model_is_one_line_everywhere(case, store, new_points, tmp_path, capsys):
    tamper, word = TAMPERED[case]
    word = word(store) if callable(word) else word  # the group's name, read before the tampering
    tamper(store)
    refused_everywhere(store, new_points, tmp_path, capsys, word)


def test_a_store_whose_model_was_tampered_can_be_refit(fitted_store, store):
    # the fix every message names works: the refit replaces the damaged model
    X = fitted_store[0]
    set_attr(store, "model", 12345)
    model = dkpca.fit(X, n_components=3, gamma=GAMMA, store=store, chunk_size=100, dtype="float64", solver="dense",
                      gram="store")
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 3)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam, rtol=1e-8)
    np.testing.assert_array_equal(model.eigenvalues_, dkpca.load(store).eigenvalues_)


# -- the model bound to its rows of the data copy -------------------------------------
# Another store's ``data/`` (or model group) of the same shape is intact by every chunk digest it carries; only
# the binding (``data_digest``: the digest of the model's rows' chunk digests, recorded when it is saved) tells
# that the rows are not the ones the model was fitted on.  Before: transform projected against the other data
# (scores off by up to 0.56), verify said intact.
@pytest.fixture(scope="module")
def other_store(tmp_path_factory):
    """A fit like ``fitted_store``'s on other data of the same shape (300 x 4, same chunks)."""
    path = tmp_path_factory.mktemp("other") / "o.dkpca.zarr"
    dkpca.fit(make_data(300, seed=1, d=4), n_components=3, gamma=GAMMA, store=path, chunk_size=100,
              dtype="float64", solver="dense", gram="store")
    return path


def test_the_data_of_another_store_of_the_same_shape_is_refused(store, other_store, new_points, tmp_path, capsys):
    shutil.rmtree(store / "data")
    shutil.copytree(other_store / "data", store / "data")
    # K is of the store's own data no more either: verify says so too (the fit refuses it)
    refused_everywhere(store, new_points, tmp_path, capsys, "data_digest", "copied from another store",
                       also=("gram",))


def test_a_model_copied_from_another_store_of_the_same_shape_is_refused(store, other_store, new_points, tmp_path,
                                                                       capsys):
    name = group(other_store)
    shutil.copytree(other_store / name, store / name)
    edit_json(store, lambda m: m["attributes"].update({"model": name, "model_digests": name}))
    refused_everywhere(store, new_points, tmp_path, capsys, "data_digest", "copied from another store")


def test_a_loaded_model_refuses_to_project_once_its_data_was_replaced(store, other_store, new_points):
    model = dkpca.load(store)
    Z = model.transform(np.load(new_points))
    shutil.rmtree(store / "data")
    shutil.copytree(other_store / "data", store / "data")
    with pytest.raises(ValueError, match="data_digest.*copied from another store"):
        model.transform(np.load(new_points))
    with pytest.raises(ValueError, match="data_digest"):
        _ = model.X_fit
    assert np.isfinite(Z).all()


def test_a_model_saved_before_the_binding_still_loads(fitted_store, store, new_points):
    # no ``data_digest`` (older dkpca): loaded, projected and verified as before
    before = dkpca.load(store)
    assert isinstance(before.data_digest, str)
    edit_json(store / group(store), lambda m: m["attributes"].pop("data_digest"))
    model = dkpca.load(store)
    assert model.data_digest is None
    np.testing.assert_array_equal(model.transform(np.load(new_points)), before.transform(np.load(new_points)))
    assert all(f.ok for f in verify_store(store))


@pytest.mark.parametrize("value", [12345, ["x"]])
def test_a_binding_that_is_not_a_digest_is_one_line(value, store, new_points, tmp_path, capsys):
    set_attr(store / group(store), "data_digest", value)
    with pytest.raises(ValueError, match="data_digest.*not a digest"):
        dkpca.load(store)
    assert main(["verify", str(store)]) == 1  # verify reads it as the load does (one check: check_bound)
    assert "not a digest" in capsys.readouterr().out


# -- the sparse model: the same record, the same checks ------------------------------
@pytest.fixture
def sparse_store(tmp_path):
    X = make_data(120, seed=4, d=3)
    path = tmp_path / "sp.zarr"
    est = SparseKernelPCA(n_components=2, random_state=0, max_iter=50).fit(X)
    est.save(path)
    return X, path, est


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # the fit's quality is not at stake
@pytest.mark.parametrize("case", ["weights-rewritten", "params-a-string", "params-unknown-name", "n-features-a-string",
                                  "pointer-12345", "fit-report-a-list", "feature-names-a-number"])
def test_a_tampered_sparse_model_is_one_line(case, sparse_store, capsys):
    X, path, est = sparse_store
    name = FitStore.at(path).model_group("sparse_model")
    if case == "weights-rewritten":
        arr = zarr.open_array(str(path), path=f"{name}/weights", mode="r+")
        arr[...] = arr[...] * 2
    elif case == "pointer-12345":
        set_attr(path, "sparse_model", 12345)
    elif case == "params-unknown-name":  # before: TypeError from SparseKernelPCA(**params)
        params = dict(zarr.open_group(str(path / name), mode="r").attrs)["params"]
        set_attr(path / name, "params", {**params, "bogus": 1})
    else:
        key, value = {"params-a-string": ("params", "x"), "n-features-a-string": ("n_features_in", "x"),
                      "fit-report-a-list": ("fit_report", [1]),
                      "feature-names-a-number": ("feature_names_in", 3)}[case]
        set_attr(path / name, key, value)
    with pytest.raises(ValueError) as err:
        SparseKernelPCA.load(path)
    assert "\n" not in str(err.value) and "sparse model" in str(err.value) and "again" in str(err.value)
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "BAD  sparse_model: " in out and "damaged (sparse_model)" in out
    if case in ("weights-rewritten", "pointer-12345"):  # the store's own checks (no estimator needed)
        assert not {f.part: f for f in verify_store(path)}["sparse_model"].ok


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_an_intact_sparse_model_loads_with_the_same_projections(sparse_store):
    X, path, est = sparse_store
    np.testing.assert_array_equal(SparseKernelPCA.load(path).transform(X), est.transform(X))
    assert all(f.ok for f in verify_store(path))


def test_a_report_without_a_residual_still_displays(store, capsys):
    # null is a valid residual or timings (none measured): load, summary, Jupyter table and info --json show it
    report = zarr.open_group(str(store), path=group(store), mode="r").attrs["report"]
    set_attr(store / group(store), "report", {**report, "max_relative_residual": None, "timings": None})
    model = dkpca.load(store)
    assert "nan" in model.summary() and "nan" in model._repr_html_()
    assert main(["info", "--json", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["report"]["max_relative_residual"] is None
