"""Where the user's paths and files meet the core: nothing destroyed, nothing read from the wrong place.

Each test states the file or answer that must survive; references are the
dense centred kernel's eigenvalues (``reference_eigh``).
"""

from __future__ import annotations

import errno
import os

import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.io import as_dask
from dkpca.planning import choose
from dkpca.storage import FitStore, fit_footprint, gram_bytes

from .conftest import cli_error, make_data, reference_eigh, write_data


def test_transform_refuses_an_existing_directory(tmp_path, fitted, capsys):
    X, data, store = fitted
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "thesis.tex").write_text("years of work")
    err = cli_error(capsys, ["transform", store, data, str(proj)])
    assert "exists and is not a dkpca transform output" in err and "choose another output path" in err
    assert (proj / "thesis.tex").read_text() == "years of work"
    # --overwrite replaces earlier projections only, never a directory of other files
    err = cli_error(capsys, ["transform", store, data, str(proj), "--overwrite"])
    assert "not a dkpca transform output" in err and "never removes files it did not write" in err
    assert (proj / "thesis.tex").read_text() == "years of work"


@pytest.mark.parametrize("where", ["input", "store", "inside store", "inside input", "contains input"])
def test_transform_never_writes_over_its_input_or_the_store(tmp_path, fitted, capsys, where):
    X, data, store = fitted
    output = {"input": data, "store": store, "inside store": os.path.join(store, "proj"),
              "inside input": os.path.join(data, "proj"), "contains input": str(tmp_path)}[where]
    before_X = zarr.open_array(data, mode="r")[:]
    err = cli_error(capsys, ["transform", store, data, output, "--overwrite"])
    assert "would destroy data that is being read" in err
    np.testing.assert_array_equal(zarr.open_array(data, mode="r")[:], before_X)
    assert dkpca.load(store).n_components == 3


def test_transform_overwrite_replaces_earlier_projections(tmp_path, fitted):
    X, data, store = fitted
    out = str(tmp_path / "proj.zarr")
    assert main(["transform", store, data, out, "-q"]) == 0
    assert main(["transform", store, data, out, "--overwrite", "-q"]) == 0
    np.testing.assert_allclose(zarr.open_array(out, mode="r")[:], dkpca.load(store).transform(X), rtol=1e-10)


def test_refit_from_the_stores_own_data_keeps_it(tmp_path, fitted):
    """`dkpca fit s.dkpca.zarr/data/X --store s.dkpca.zarr --overwrite` with a new gamma: data kept, new K."""
    X, data, store = fitted
    own = os.path.join(store, "data", "X")
    assert main(["fit", own, "-k", "3", "--gamma", "0.5", "--store", store, "--dtype", "float64", "--overwrite",
                 "-q", "--no-progress"]) == 0
    np.testing.assert_array_equal(zarr.open_array(own, mode="r")[:], X)
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.5), 3)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam, rtol=1e-8)


def test_store_inside_the_input_is_refused(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(50, d=3))
    with pytest.raises(ValueError, match="writes nothing into its input"):
        dkpca.fit(data, n_components=2, store=os.path.join(data, "model.dkpca.zarr"))
    assert sorted(os.listdir(data)) == ["zarr.json"] or "model.dkpca.zarr" not in os.listdir(data)


def test_transform_names_the_non_finite_row(tmp_path, fitted):
    X, data, store = fitted
    Xn = X[:20].copy()
    Xn[13, 2] = np.nan
    with pytest.raises(ValueError, match="first in row 13"):
        dkpca.load(store).transform(Xn)


def test_a_lazy_transform_names_a_non_finite_row_with_the_rows_it_is_first_of(fitted):
    """Dask input's blocks are checked as they run: a row is named with its block (before, "first in row 17" where
    row 3 was NaN too, in another block)."""
    X, data, store = fitted
    Xn = X[:20].copy()
    Xn[3, 0] = Xn[17, 1] = np.nan
    with pytest.raises(ValueError, match=r"in row (3, the first of rows 0 to 9|17, the first of rows 10 to 19)\)"):
        dkpca.load(store).transform(da.from_array(Xn, chunks=(10, Xn.shape[1]))).compute()


def test_transform_accepts_one_row_and_refuses_zero_rows(fitted):
    X, data, store = fitted
    model = dkpca.load(store)
    np.testing.assert_allclose(model.transform(X[5:6]), model.transform(X[:10])[5:6], rtol=1e-10)
    with pytest.raises(ValueError, match="transform needs at least 1"):
        model.transform(X[:0])


def test_relative_paths_with_workers_in_another_directory(tmp_path, proc_cluster, monkeypatch):
    """Workers run in the repository root; the fit runs in tmp_path with relative paths.

    Before paths were made absolute when they entered, the workers read zeros
    and wrote K under their own working directory (eigenvalues [n, 0, 0]).
    """
    X = make_data(400, d=4, seed=3)
    write_data(tmp_path / "d.zarr", X)
    monkeypatch.chdir(tmp_path)
    with Client(proc_cluster.address):
        model = dkpca.fit("d.zarr", n_components=3, gamma=0.2, store="s.dkpca.zarr", dtype="float64",
                          solver="dense", chunk_size=100)
        lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
        np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
        assert model.store == str(tmp_path / "s.dkpca.zarr")
    workers_cwd = proc_cluster.client.run(os.getcwd)
    assert all(cwd != str(tmp_path) for cwd in workers_cwd.values())  # the test tested something


def test_a_zarr_array_opened_by_a_relative_path_reads_alike_with_workers_elsewhere(tmp_path, proc_cluster,
                                                                                     monkeypatch):
    """A zarr.Array (not a path) opened relative to the client's directory: before, its transform on workers in
    another directory read no chunks there and projected rows of the fill value (0.617 off, no warning), and a grown
    one was refused as differing from the store's copy.  Reference: the same calls on the numpy array."""
    X = make_data(400, d=4, seed=3)
    G = np.vstack([X, make_data(100, d=4, seed=4)])
    write_data(tmp_path / "d.zarr", X)
    write_data(tmp_path / "g.zarr", G)
    monkeypatch.chdir(tmp_path)
    with Client(proc_cluster.address):
        model = dkpca.fit(X, n_components=3, gamma=0.2, store="s.dkpca.zarr", dtype="float64", solver="dense")
        np.testing.assert_allclose(model.transform(zarr.open_array("d.zarr", mode="r")), model.transform(X),
                                   rtol=0, atol=1e-12)
        grown = dkpca.fit(zarr.open_array("g.zarr", mode="r"), n_components=3, gamma=0.2, store="s.dkpca.zarr",
                          dtype="float64", solver="dense")
        assert grown.report["update"]["rows_before"] == 400 and grown.n_samples == 500
    assert all(cwd != str(tmp_path) for cwd in proc_cluster.client.run(os.getcwd).values())


def test_zero_length_done_marker_counts_as_not_done(stored_fit):
    """A node crash can leave a renamed, never-fsynced marker empty: that block is recomputed, the rest reused."""
    X, store, refit = stored_fit
    marker = store / "gram" / "done" / "c" / "0" / "1"
    assert marker.stat().st_size > 0
    marker.write_bytes(b"")
    model = refit()
    assert model.report["gram"]["computed_blocks"] == 1 and model.report["gram"]["reused_blocks"] == 5
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_overflowing_kernel_stops_the_build_in_one_line(tmp_path, capsys):
    """poly with degree 1000000 overflows: the build stops at once with the kernel's parameters, exit 2."""
    data = write_data(tmp_path / "d.zarr", make_data(200, d=4) * 10)
    err = cli_error(capsys, ["fit", data, "--kernel", "poly", "--degree", "1000000", "--gram", "store", "-q",
                              "--no-progress"])
    assert "non-finite values" in err and "'degree': 1000000" in err
    with pytest.raises(ValueError, match="non-finite values"):
        dkpca.fit(data, kernel="poly", degree=1000000, gram="recompute", store=tmp_path / "r.zarr")


@pytest.mark.parametrize("field, value, match", [
    ("kernel", {"name": "rbf", "gamma": -1.0}, "'kernel' is not a valid kernel spec"),
    ("kernel", {"name": "rbf", "gamma": 0.9}, "Gram matrix was built with"),
    ("block", -1, "'block' is -1"),
    ("n_features", 7, "'n_features' does not match"),
    ("grand_mean", "nan", "'grand_mean' is 'nan'"),
])
def test_load_rejects_a_tampered_model_naming_the_field(fitted, field, value, match):
    X, data, store = fitted
    g = zarr.open_group(store, mode="r+")
    model = next(name for name in g.group_keys() if name.startswith("model"))  # the model's group
    g[model].attrs[field] = value
    with pytest.raises(ValueError, match=match):
        dkpca.load(store)


def test_info_prints_stored_strings_escaped(fitted, capsys):
    X, data, store = fitted
    g = zarr.open_group(store, mode="r+")
    model = next(name for name in g.group_keys() if name.startswith("model"))
    report = dict(g[model].attrs["report"])
    report["solver_reason"] = "evil \x1b]0;pwned\x07 title"
    report["plan"] = {**report["plan"], "reasons": {**report["plan"]["reasons"], "solver": "evil \x1b]0;pwned\x07"}}
    g[model].attrs["report"] = report
    assert main(["info", store]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b" in out


def test_auto_recomputes_when_the_whole_footprint_does_not_fit(tmp_path):
    """Free space above K alone but below the fit's footprint: gram='auto' must not pick 'store' and die later."""
    X = as_dask(make_data(600, d=6), block_rows=200)
    k_bytes, need = gram_bytes(600, 200, "float64"), fit_footprint(600, 6, 200, "float64", 12, 8)
    free = int((k_bytes + need) / 2 / 0.9)  # K fits in 90 % of it, the footprint does not
    c = choose(600, 2, "randomized", "auto", X=X, dtype="float64", block=200, free_bytes=free)
    assert c.gram == "recompute" and "needs" in c.reason
    assert choose(600, 2, "randomized", "auto", X=X, dtype="float64", block=200, free_bytes=10 * need).gram == "store"


def test_a_rerun_removes_temporaries_a_killed_writer_left(stored_fit):
    X, store, refit = stored_fit
    debris = store / "gram" / "K" / "c" / "0" / "2.12345-678.partial"
    debris.write_bytes(b"half a chunk")
    refit()
    assert not debris.exists()


@pytest.mark.parametrize("code,text", [(errno.EROFS, "read-only"), (errno.EACCES, "Permission denied"),
                                       (errno.EDQUOT, "quota")])
def test_unwritable_store_is_one_line(tmp_path, capsys, monkeypatch, code, text):
    """A read-only, forbidden or over-quota filesystem (simulated: the tests may run as root) is one line, exit 2."""
    data = write_data(tmp_path / "d.zarr", make_data(200, d=4))

    def refuse(self):
        raise OSError(code, os.strerror(code), self.path)

    monkeypatch.setattr(FitStore, "open_for_write", refuse)
    err = cli_error(capsys, ["fit", data, "--store", str(tmp_path / "s.zarr"), "-q", "--no-progress"])
    assert text in err and str(tmp_path / "s.zarr") in err


def test_an_unreadable_input_is_one_line_that_names_it_without_speaking_of_writing(tmp_path, capsys, monkeypatch):
    """Before: 'Permission denied (x.npy): choose a path you may write to' -- of the input, which is only read."""
    data = tmp_path / "x.npy"
    np.save(data, make_data(200, d=4))

    def refuse(*args, **kwargs):  # simulated: the tests may run as root
        raise PermissionError(errno.EACCES, "Permission denied", str(data))

    monkeypatch.setattr(np, "load", refuse)
    err = cli_error(capsys, ["fit", str(data), "--store", str(tmp_path / "s.zarr"), "-q"])
    assert f"Permission denied ({data}): dkpca may not read or write it: check its permissions" in err
    assert "you may write to" not in err


@pytest.mark.parametrize("param,value,match", [
    ("random_state", "abc", "random_state"),
    ("chunk_size", True, "chunk_size"),
    ("kernel", {"name": "rbf", "gama": 0.1}, "gama"),
])
def test_bad_parameters_are_named_before_any_work(tmp_path, param, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        dkpca.fit(make_data(200, d=4), store=tmp_path / "s.zarr", **{param: value})
    assert not (tmp_path / "s.zarr").exists()
