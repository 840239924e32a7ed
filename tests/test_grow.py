"""Issue 38: a fit on grown data updates the store's fit, and its answer is a fresh fit's.

Reference: ``scipy.linalg.eigh`` of the dense centred kernel of the grown data
(``conftest.reference_eigh``).  The data (``conftest.make_data``: four
clusters) has a separated leading spectrum, so the block Lanczos solver at its
default ``tol`` = 1e-6 (every residual below 1e-6 lambda_1) gives eigenvalues
within tol^2-sized errors -- checked at 1e-8 lambda_1 -- and eigenvectors
within tol / (relative gap) -- checked at 1e-5 in absolute value (signs are
the solver's).  300 rows in tiles of 64 end inside a tile (300 = 4 x 64 + 44),
so the old boundary's row block is partial and must be recomputed.

Kills are simulated in process at each stage (an exception no handler
catches, raised from inside the stage), which leaves the store exactly as a
SIGKILL there would, but for the lock, which a dead writer's next run takes
over (``tests/test_resume.py``, ``test_lease.py``); one real SIGKILL of the
``dkpca fit`` process mid-build checks that too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import subprocess
import threading
import warnings

import dask.array as da
import numpy as np
import pytest
from distributed import Client
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import gram as gram_module
from dkpca import pipeline
from dkpca.cli import main
from dkpca.storage import FitStore, GramStore, verify_store
from dkpca.storage import datachunks as datachunks_module
from dkpca.storage import growth as growth_module

from .conftest import dkpca_cmd, done_markers, kill_group, make_data, reference_eigh, spawn, wait_until, write_data

GAMMA, K, EDGE = 0.2, 3, 64
KW = dict(n_components=K, gamma=GAMMA, chunk_size=EDGE, dtype="float64", solver="lanczos")


class Killed(BaseException):
    """A kill: nothing in dkpca catches it (as nothing runs after a SIGKILL)."""


def _fit(X, store, **kw):
    return dkpca.fit(X, store=store, **{**KW, **kw})


def _check(model, X):
    """The model is a fresh fit of X: eigenvalues and |eigenvectors| against eigh of the centred kernel."""
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), K)
    assert model.n_samples == len(X)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-8 * lam[0])
    np.testing.assert_allclose(np.abs(model.eigenvectors_), np.abs(U), rtol=0, atol=1e-5)


def _files(root: str) -> dict[str, tuple[int, str]]:
    """Every chunk file under ``root``: (mtime_ns, sha256 of its bytes) by path relative to it."""
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (os.stat(p).st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def grown_store(tmp_path) -> tuple[np.ndarray, str]:
    """``(X, store)``: X of 400 rows; the store holds a fit of its first 300."""
    X = make_data(400, seed=3)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    return X, store


@pytest.fixture
def grown(tmp_path):
    return grown_store(tmp_path)


def test_grown_input_is_an_update_equal_to_a_fresh_fit(grown):
    X, store = grown
    model = _fit(X, store)
    _check(model, X)
    u = model.report["update"]
    # 300 rows = 4 whole tiles + 44: the 4 x 5 / 2 = 10 blocks among the whole tiles are kept; of the 7 x 8 / 2
    # = 28 blocks of 400 rows, the other 18 (the partial row block's and the new rows') are computed
    assert (u["rows_before"], u["rows_after"], u["blocks_reused"], u["blocks_computed"]) == (300, 400, 10, 18)
    assert "extension to the new rows" in u["warm_start"] and u["passes"] == model.report["passes"]
    # the old fit's Ritz record started it: its first product read only the blocks touching new rows
    assert u["first_pass_fused"] and model.report["fused_passes"] == 1
    again = _fit(X, store)  # the same data again: a plain reuse, no update
    assert "update" not in again.report and again.report["gram"]["computed_blocks"] == 0


def test_without_chunk_size_an_update_and_the_refits_after_it_keep_the_stored_tile(grown):
    """The fingerprint is per row chunk: a refit at another tile would call the same data different."""
    X, store = grown
    model = _fit(X, store, chunk_size=None)  # the default tile for 400 rows is not the stored 64
    assert model.report["update"]["blocks_computed"] == 18 and model.report["gram"]["block"] == EDGE
    again = _fit(X, store, chunk_size=None)
    assert "update" not in again.report and again.report["gram"]["computed_blocks"] == 0
    assert re.search(r"chunk shape: +64 x 64", str(dkpca.plan(X, store=store, n_components=K, gamma=GAMMA,
                                                                measure=False)))


def test_old_rows_chunks_are_never_rewritten(grown):
    X, store = grown
    K_dir, X_dir = os.path.join(store, "gram", "K", "c"), os.path.join(store, "data", "X", "c")
    before_K, before_X = _files(K_dir), _files(X_dir)
    markers = done_markers(store)
    _fit(X, store)
    after_K, after_X = _files(K_dir), _files(X_dir)
    kept = {f"{i}/{j}" for i in range(4) for j in range(i, 4)}  # blocks among the 4 whole old tiles
    for name in kept:
        assert after_K[name] == before_K[name], f"K chunk {name} of the old rows was rewritten"
    for i in range(4):  # data chunks wholly in the old rows
        assert after_X[f"{i}/0"] == before_X[f"{i}/0"]
    # the partial old boundary's blocks (I, 4) were recomputed (their chunks changed), the new ones written
    for i in range(5):
        assert after_K[f"{i}/4"][1] != before_K[f"{i}/4"][1]
    assert after_X["4/0"][1] != before_X["4/0"][1] and {"5/0", "6/0"} <= set(after_X)
    new_markers = done_markers(store)
    marker = os.path.join(store, "gram", "done", "c")
    assert len(new_markers) == 28 and all(new_markers[os.path.join(marker, p)] == markers[os.path.join(marker, p)]
                                          for p in kept)


def test_a_changed_old_row_is_refused_naming_its_chunk(grown):
    X, store = grown
    attrs = dict(FitStore.at(store).open()["data"].attrs)
    bad = X.copy()
    bad[70, 2] += 1e-9  # row 70 lies in row chunk 1 (rows 64 to 127)
    with pytest.raises(ValueError, match=r"row chunk 1 \(rows 64 to 127\) of the input differs"):
        _fit(bad, store)
    assert dict(FitStore.at(store).open()["data"].attrs) == attrs  # nothing written
    assert dkpca.load(store).n_samples == 300
    bad = X.copy()
    bad[299, 0] += 1.0  # the last old row: in the partial chunk 4
    with pytest.raises(ValueError, match=r"row chunk 4 \(rows 256 to 299\)"):
        _fit(bad, store)


@pytest.mark.parametrize("what, kw, words", [
    ("kernel", dict(gamma=0.3), "the kernel differs"),
    ("dtype", dict(dtype="float32"), "the dtype differs"),
    ("tile", dict(chunk_size=50), "the chunk size differs"),
])
def test_an_update_with_other_parameters_is_refused_naming_them(grown, what, kw, words):
    X, store = grown
    with pytest.raises(ValueError, match=words):
        _fit(X, store, **kw)
    assert dkpca.load(store).n_samples == 300


def test_grown_input_of_another_data_type_is_refused_naming_both(grown):
    """The old rows are checked by the digests of their stored values, which another element type changes: the
    refusal says so (not only that the data differ), before anything is written; the same rows in the store's
    type update it."""
    X, store = grown
    attrs = dict(FitStore.at(store).open()["data"].attrs)
    with pytest.raises(ValueError, match=r"300 rows of float64 data, and this input of 400 rows is float32.*"
                                         r"X\.astype\('float64'\)"):
        _fit(X.astype(np.float32), store)
    assert dict(FitStore.at(store).open()["data"].attrs) == attrs
    assert dkpca.load(store).n_samples == 300


@pytest.mark.parametrize("n_old, n_new", [(300, 301), (100, 350), (256, 300)],
                         ids=["one-row", "more-rows-than-stored", "old-end-on-a-tile-edge"])
def test_growth_by_one_row_and_by_more_rows_than_the_store_had(tmp_path, n_old, n_new):
    X = make_data(n_new, seed=4)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:n_old], store)
    model = _fit(X, store)
    _check(model, X)
    assert model.report["update"]["rows_before"] == n_old


def test_the_same_chunk_size_above_the_first_rows_keeps_updating(tmp_path):
    """A nightly job passing chunk_size=4096 whose first fit had 300 rows: the tile was clipped to 300.  Before,
    the update was refused ("the chunk size differs (store: 300, now: 4096)"); now the tile is kept."""
    X = make_data(400, seed=4)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store, chunk_size=4096)
    model = _fit(X, store, chunk_size=4096)
    _check(model, X)
    assert model.report["update"]["rows_before"] == 300 and model.block == 300
    with pytest.raises(ValueError, match=r"the chunk size differs \(store: 300, now: 200\)"):  # a smaller one
        _fit(np.vstack([X, make_data(50, seed=5)]), store, chunk_size=200)


def test_an_update_asking_for_arpack_holds_k_in_memory_as_a_fresh_fit_does(tmp_path):
    """A fresh fit refuses ARPACK over a stored K (each step a pass over it); an update asking for ARPACK with the
    Gram mode left to auto ran it over the stored K anyway (22 passes over K where Lanczos needs 5).  Now its K is
    held in memory, as a fresh fit's; eigenvalues as eigh's."""
    X = make_data(400, seed=4)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    model = _fit(X, store, solver="arpack")
    assert model.report["solver"] == "arpack" and model.report["gram"]["mode"] == "memory"
    _check(model, X)


@pytest.mark.parametrize("between", [{"gram": "recompute"}, {"gram": "memory"}, {"solver": "arpack"}])
def test_an_update_after_one_that_did_not_store_k_grows_k_from_its_own_rows(tmp_path, between):
    """300 rows stored, an update to 400 that kept no K (recomputed, in memory, ARPACK), then one to 450: K (still
    of 300 rows) grows from its own rows -- the blocks touching rows 256.. -- and the answer is eigh's.  Before,
    the store's data copy was grown first and then K was refused as another fit's ("data X differs ... Pass
    overwrite=True"), leaving a store that said an update had been killed; the same command then passed."""
    X = make_data(450, seed=6)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    _fit(X[:400], store, **between)
    # K of the copy's first 300 rows, checked by their values (before: "K was built from other data", damaged)
    gram = {f.part: f for f in verify_store(store)}["gram"]
    assert gram.ok and "of the data's first 300 of 400 rows" in gram.text, gram.text
    p = dkpca.plan(X, store=store, **KW, measure=False)
    model = _fit(X, store)
    _check(model, X)
    u = model.report["update"]
    # K of 300 rows at tile 64: 4 whole row blocks kept (10 blocks), 8 row blocks for 450 rows (36 blocks)
    assert (u["rows_before"], u["blocks_reused"], u["blocks_computed"]) == (400, 10, 26), u
    assert "26 Gram blocks computed" in p.update and "store's K (300 rows)" in p.decision.reasons["gram"]


def test_k_of_other_data_with_an_earlier_row_count_is_not_grown(tmp_path):
    """K copied in from a store of other data with the row count this store had before an update that stored no K:
    its fingerprint is no longer the copy's in either case, and only its rows' values tell the two apart.  Before,
    the next update grew it as the store's own and returned another kernel's eigenpairs without a word; now
    verify calls it another's and the update refuses it, as a refit refuses K of other data."""
    import shutil

    X = make_data(450, seed=6)
    store, other = str(tmp_path / "s.dkpca.zarr"), str(tmp_path / "o.dkpca.zarr")
    _fit(X[:300], store)
    _fit(X[:400], store, gram="recompute")
    _fit(make_data(300, seed=7), other)
    shutil.rmtree(f"{store}/gram")
    shutil.copytree(f"{other}/gram", f"{store}/gram")
    gram = {f.part: f for f in verify_store(store)}["gram"]
    assert not gram.ok and "K was built from other data" in gram.text, gram.text
    with pytest.raises(ValueError, match="data X differs"):
        _fit(X, store)


def test_verify_of_k_of_earlier_rows_over_a_damaged_copy_reports_the_copy(tmp_path):
    """The check of K against the copy's first rows reads them: a chunk of them missing is the data's finding, and
    K is not called another's (before this was handled, verify ended in the read's error instead of its report)."""
    X = make_data(450, seed=6)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    _fit(X[:400], store, gram="recompute")
    os.remove(os.path.join(store, "data", "X", "c", "0", "0"))
    found = {f.part: f for f in verify_store(store)}
    assert not found["data"].ok and "chunk (0, 0) of array 'data/X'" in found["data"].text and "missing" in \
        found["data"].text
    assert found["gram"].ok and "first 300" not in found["gram"].text, found["gram"].text


@pytest.mark.parametrize("record, said", [
    ("gram/zarr.json", "(gram/zarr.json) is missing; K is built anew"),
    ("gram/K/zarr.json", "is unreadable (Expecting"),
], ids=["group-deleted", "array-cut"])
def test_a_refit_over_k_of_earlier_rows_whose_record_is_lost_builds_k_anew(tmp_path, caplog, record, said):
    """K of the copy's first 300 rows (an update since stored none), its record damaged.  Before: the refit of the
    400 rows refused K, for ever -- a new group record made over K's arrays of 300 rows ('array 'gram/K' ... claims
    shape (300, 300) ... but dkpca recorded shape (400, 400)'), or K's group, readable, taken for another fit's
    ('data X differs ... Pass overwrite=True'); now this data's own K with its record lost is built anew, as
    where the record cannot be read."""
    X = make_data(400, seed=6)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    _fit(X, store, gram="recompute")
    path = os.path.join(store, *record.split("/"))
    if record == "gram/zarr.json":
        os.remove(path)
    else:  # cut short
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = _fit(X, store)
    assert any(said in r.getMessage() for r in caplog.records)
    _check(model, X)
    assert model.report["gram"]["computed_blocks"] == 28 and all(f.ok for f in verify_store(store))


@pytest.mark.parametrize("case", ["update", "k-of-earlier-rows"])
def test_an_update_over_a_lost_data_array_record_writes_it_again_and_reuses_k(tmp_path, case, caplog):
    """``data/X/zarr.json`` deleted.  Before: the update was refused ('is missing (no data/X/zarr.json); rerun the fit
    with overwrite=True'), and a refit over K of the copy's first rows mended the copy and then refused K as
    another fit's ('data X differs') -- the update had been planned from the metadata that was not there.  Now the
    update is planned from the copy's group record (its chunk rows, ``edge``), the metadata written again first."""
    X = make_data(400, seed=6)
    store = str(tmp_path / "s.dkpca.zarr")
    _fit(X[:300], store)
    if case == "k-of-earlier-rows":
        _fit(X[:400], store, gram="recompute")
    rows = 400  # grown data, or the copy's own with K of its first 300 rows
    os.remove(os.path.join(store, "data", "X", "zarr.json"))
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = _fit(X[:rows], store)
    assert any("data/X/zarr.json) was lost or unreadable; written again" in r.getMessage() for r in caplog.records)
    _check(model, X[:rows])
    u = model.report["update"]
    assert u["rows_before"] == 300 and u["blocks_reused"] == 10, u
    assert all(f.ok for f in verify_store(store))


def test_an_update_counts_the_entries_it_computes_as_a_fresh_fit_counts_its_own():
    """Stored entries: the upper triangle of blocks, diagonal blocks whole (before, the new rows' square was counted
    whole: 180,000 for 300 -> 600 at tile 100, 86 % of a fresh fit's, where 150,000 are computed: 71 %; and
    above 100 % for a tile much smaller than the rows)."""
    from dkpca.storage.growth import stored_entries, update_blocks

    assert stored_entries(600, 100) == 6 * 100 * 100 + 15 * 100 * 100 == 210_000
    assert update_blocks(300, 600, 100) == (6, 15, 150_000)
    assert stored_entries(250, 100) == (250 * 250 + 100 * 100 * 2 + 50 * 50) // 2
    for n_old, n_new, block in ((10, 700, 10), (1, 2, 1), (255, 257, 64), (0, 300, 64)):
        assert update_blocks(n_old, n_new, block)[2] <= stored_entries(n_new, block)


def test_the_plan_of_an_update_names_the_stored_tile_it_keeps(tmp_path):
    """A first fit of 10 rows has a tile of 10, which an update to 150 rows (15 row blocks: too few to re-tile,
    storage.growth.retile) keeps even where chunk_size=100 is asked for (the first fit's rows clipped it): the plan
    said "chunk_size=10 as given"."""
    X = make_data(150, seed=4)
    store = str(tmp_path / "s.dkpca.zarr")
    dkpca.fit(X[:10], 2, store=store, dtype="float64")
    p = dkpca.plan(X, 2, store=store, dtype="float64", chunk_size=100, measure=False)
    assert p.block == 10 and p.block_reason == "the store's tile 10, which an update keeps (chunk_size=100 given)"


def _kill_data_copy(monkeypatch):
    real = datachunks_module.copy_block

    def copy(block, target, edge, offset=0, block_info=None):
        if offset and block_info[0]["array-location"][0][0] > 0:  # an update's chunks after the boundary's
            raise Killed
        return real(block, target, edge, offset, block_info=block_info)
    monkeypatch.setattr(datachunks_module, "copy_block", copy)


def _kill_gram_resize(monkeypatch):
    real, calls = growth_module.writable, []

    def writable(arr):
        calls.append(arr)
        if len(calls) == 3:  # after the boundary's markers are cleared and K is resized
            raise Killed
        return real(arr)
    monkeypatch.setattr(growth_module, "writable", writable)


def _kill_blocks(monkeypatch):
    real, lock, done = gram_module._build_block, threading.Lock(), []

    def build(*a, **kw):
        with lock:
            if len(done) >= 5:
                raise Killed
            done.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(gram_module, "_build_block", build)


def _kill_sums(monkeypatch):
    def finish(self):
        raise Killed
    monkeypatch.setattr(GramStore, "finish", finish)


def _kill_solve(monkeypatch):
    real = pipeline.log_pass

    def log_pass(report):
        real(report)
        if report.pass_number >= 2:
            raise Killed
    monkeypatch.setattr(pipeline, "log_pass", log_pass)


def _kill_model_switch(monkeypatch):
    def switch(self, kind, name):
        raise Killed
    monkeypatch.setattr(FitStore, "_switch", switch)


def _killed_fit(X, store, monkeypatch, kill):
    """The update of ``store`` to X, killed where ``kill`` patches (the patch undone after)."""
    with monkeypatch.context() as m:
        kill(m)
        with pytest.raises(Killed):
            _fit(X, store)


def test_an_update_recomputes_old_blocks_whose_sums_are_a_stale_copy(grown, tmp_path):
    """An update reduces the row sums from the old blocks' sums without reading K: a stale copy of one (its CRC
    intact, from a store of other data) is found by its block's sums marker and the block rebuilt."""
    X, store = grown
    other = str(tmp_path / "other.dkpca.zarr")
    _fit(make_data(300, seed=4), other)
    chunk = os.path.join("gram", "partial_sums", "c", "1", "0")
    with open(os.path.join(other, chunk), "rb") as src, open(os.path.join(store, chunk), "wb") as dst:
        dst.write(src.read())
    model = _fit(X, store)
    _check(model, X)
    assert model.report["update"]["blocks_computed"] == 19  # the 18 of the update and the stale one


@pytest.mark.parametrize("killed", [False, True], ids=["once", "killed-then-rerun"])
def test_an_update_over_k_whose_markers_lost_their_metadata_builds_k_anew(grown, monkeypatch, killed, caplog):
    """Before: ``KeyError: 'done'`` from zarr, the update's only output, for ever.  Without the markers nothing
    says which of K's blocks are built: all are computed, as a fit does when an array of K's is missing.  The old
    markers' chunks go too: the boundary row block's would otherwise still match its K chunk of the old rows after
    a kill, and the rerun would take that block, without the new rows' entries, as built."""
    X, store = grown
    os.remove(os.path.join(store, "gram", "done", "zarr.json"))
    if killed:
        with monkeypatch.context() as m:
            _kill_blocks(m)
            with pytest.raises(Killed):
                _fit(X, store)
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING, logger="dkpca"):
        warnings.simplefilter("always")
        model = _fit(X, store)
    assert not [w for w in seen if "not recognized as a component" in str(w.message)]  # zarr's words, before
    assert killed or any("lacks gram/done" in r.getMessage() for r in caplog.records)
    _check(model, X)
    assert model.report["gram"]["computed_blocks"] == (23 if killed else 28)  # of the 7 x 8 / 2 blocks of 400 rows
    assert all(f.ok for f in verify_store(store))


@pytest.mark.parametrize("chunk", ["1", "4"], ids=["inside", "boundary"])
def test_a_damaged_chunk_of_the_old_rows_is_written_again_from_the_grown_input(grown, chunk, caplog):
    """Before: the build's read of the old rows refused the update midway ('the store's copy of the data is
    damaged: rerun the fit on the same input'), though the grown input holds the rows the chunk's recorded digest
    names, as a refit's repair uses.  Chunk 4 holds the last 44 old rows (300 = 4 x 64 + 44) and grows."""
    X, store = grown
    path = os.path.join(store, "data", "X", "c", chunk, "0")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = _fit(X, store)
    assert any("written again from the input" in r.getMessage() for r in caplog.records)
    _check(model, X)
    assert model.report["update"]["rows_before"] == 300 and all(f.ok for f in verify_store(store))


@pytest.mark.parametrize("kill", [_kill_data_copy, _kill_gram_resize, _kill_blocks, _kill_sums, _kill_solve,
                                  _kill_model_switch], ids=lambda f: f.__name__[6:])
def test_a_kill_at_each_stage_of_an_update_then_the_same_command_resumes(grown, monkeypatch, kill):
    X, store = grown
    old = dkpca.load(store)
    Z = old.transform(X[:20])
    _killed_fit(X, store, monkeypatch, kill)
    # mid-update: the old model loads and projects exactly as before (it reads only its own 300 rows)
    mid = dkpca.load(store)
    assert mid.n_samples == 300
    if kill is _kill_data_copy:  # killed after the boundary's chunk was rewritten with new rows after the old
        assert FitStore.at(store).open()["data"]["X"].shape[0] == 400
    np.testing.assert_allclose(mid.transform(X[:20]), Z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(old.transform(X[:20]), Z, rtol=0, atol=1e-12)
    findings = verify_store(store)
    assert all(f.ok for f in findings), findings
    model = _fit(X, store)  # the same command
    _check(model, X)
    assert model.report["update"]["rows_before"] == 300
    # entries counted only where the blocks computed are the update's own (a kill may have left others built)
    u, (_, planned, entries) = model.report["update"], growth_module.update_blocks(300, 400, EDGE)
    assert u["entries_computed"] == (entries if u["blocks_computed"] == planned else None)
    np.testing.assert_allclose(old.transform(X[:20]), Z, rtol=0, atol=1e-12)  # a loaded old model still works


def test_verify_names_a_store_caught_mid_update(grown, monkeypatch):
    X, store = grown
    _killed_fit(X, store, monkeypatch, _kill_data_copy)
    text = {f.part: f.text for f in verify_store(store)}
    assert "caught mid-update from 300 to 400 rows" in text["data"]
    _killed_fit(X, store, monkeypatch, _kill_gram_resize)
    found = {f.part: f for f in verify_store(store)}
    assert found["gram"].ok and "caught mid-update from 300 to 400 rows" in found["gram"].text
    assert found["model"].ok and "fitted on the first 300 of the 400 rows" in found["model"].text


@pytest.mark.parametrize("kill, words", [
    (_kill_data_copy, "is being updated to 400 rows"),
    # the copy complete, K not: the store was never fitted on 400 rows, so "fitted on different data" would mislead
    (_kill_blocks, "holds 400 rows of data and a model of its first 300: an update to 400 rows was killed"),
], ids=["in the data copy", "after the data copy"])
def test_the_old_data_is_refused_while_an_update_is_unfinished(grown, monkeypatch, kill, words):
    X, store = grown
    _killed_fit(X, store, monkeypatch, kill)
    # the old rows; after the copy also fewer new rows than the update's (in the copy they are another update)
    for Y in (X[:300], X[:350]) if kill is _kill_blocks else (X[:300],):
        with pytest.raises(ValueError, match=re.escape(words)):
            _fit(Y, store)
    conflicts = growth_module.refit_conflicts(FitStore.at(store), 350, X.shape[1], {}, "float64", EDGE)
    if kill is _kill_blocks:  # dkpca plan says it too
        assert "killed before it finished: rerun it with the 400-row data" in conflicts[0]
    else:  # the old rows too (the copy's complete rows are still 300: the plan said nothing before)
        for rows in (300, 350):
            said = growth_module.refit_conflicts(FitStore.at(store), rows, X.shape[1], {}, "float64", EDGE)
            assert said and "is being updated to 400 rows of data (a killed update)" in said[0]
    _check(_fit(X, store), X)


def test_an_update_on_a_local_cluster(proc_cluster, grown):
    X, store = grown
    with Client(proc_cluster.address):
        model = _fit(X, store)
    _check(model, X)
    assert model.report["update"]["blocks_computed"] == 18


def test_cli_fit_twice_prints_the_update_and_info_says_it(tmp_path, capsys):
    X = make_data(400, seed=3)
    old, new = write_data(tmp_path / "old.zarr", X[:300]), write_data(tmp_path / "new.zarr", X)
    store = str(tmp_path / "s.dkpca.zarr")
    args = ["--store", store, "-k", str(K), "--gamma", str(GAMMA), "--chunk-size", str(EDGE), "--dtype", "float64",
            "--solver", "lanczos", "-q"]
    assert main(["fit", old, *args]) == 0
    assert "Update:" not in capsys.readouterr().out
    assert main(["plan", new, *args[:-1], "--no-measure"]) == 0
    assert re.search(r"update: +would update the store's fit of 300 rows to 400 .*18 Gram blocks computed",
                     capsys.readouterr().out)
    assert main(["fit", new, *args]) == 0
    line = "Update: 300 -> 400 rows (100 added): 18 Gram blocks computed, 10 reused;"
    assert line in capsys.readouterr().out
    assert main(["info", store]) == 0
    assert line in capsys.readouterr().out
    _check(dkpca.load(store), X)


@pytest.mark.slow  # 40 s: a real process killed (every stage is killed in process above, in the default run)
def test_a_sigkilled_update_resumes(tmp_path):
    """A real SIGKILL of ``dkpca fit`` while the update builds its blocks; the same command finishes it."""
    X = make_data(1200, seed=5)
    old, new = write_data(tmp_path / "old.zarr", X[:1000]), write_data(tmp_path / "new.zarr", X)
    store = str(tmp_path / "s.dkpca.zarr")
    args = ("--store", store, "-k", "3", "--gamma", "0.2", "--chunk-size", "25", "--dtype", "float64", "-q")
    subprocess.run(dkpca_cmd("fit", old, *args), check=True, capture_output=True, timeout=240)
    before = len(done_markers(store))  # 40 x 41 / 2 = 820
    total = 48 * 49 // 2
    proc = spawn(dkpca_cmd("fit", new, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(done_markers(store)) >= before + 100, 120, what="100 of the update's blocks")
        kill_group(proc)
    finally:
        kill_group(proc)
    assert before + 100 <= len(done_markers(store)) < total, "the update finished before the kill"
    assert dkpca.load(store).n_samples == 1000
    out = subprocess.run(dkpca_cmd("fit", new, *args), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert "Update: 1000 -> 1200 rows" in out.stdout
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam, rtol=1e-8)


def test_the_store_s_own_data_followed_by_new_rows_is_an_update(grown):
    """``partial_fit(store=)``'s input: the stored copy (lazily, as the old model reads it) and the batch."""
    X, store = grown
    seen = dkpca.load(store).X_fit
    model = _fit(da.concatenate([seen, da.from_array(X[300:], chunks=50)]), store)
    _check(model, X)
    assert model.report["update"]["rows_before"] == 300


def test_the_warm_start_keeps_the_extended_eigenvectors_and_adds_the_directions_the_usual_block_has_beyond_them():
    """extend_basis: U's span first; the other columns are the usual block's directions outside it (here two
    unit ones), not its first columns, which repeat U; orthonormal to rounding (tolerance 1e-12)."""
    from dkpca.linalg import extend_basis

    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.standard_normal((200, 3)))[0]
    new = np.linalg.qr(np.hstack([U, rng.standard_normal((200, 2))]))[0][:, 3:]  # orthogonal to U
    usual = np.hstack([U @ rng.standard_normal((3, 3)) + 1e-6 * rng.standard_normal((200, 3)), new])
    Q = extend_basis(U, usual)
    assert Q.shape == (200, 5)
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(np.linalg.svd(U.T @ Q[:, :3], compute_uv=False), 1.0, atol=1e-12)  # span(U)
    np.testing.assert_allclose(np.linalg.svd(new.T @ Q[:, 3:], compute_uv=False), 1.0, atol=1e-6)  # the new ones


def test_the_warm_start_is_orthonormal_where_the_usual_block_adds_nothing_to_it():
    """A usual block inside U's span leaves no direction to add: the start is still orthonormal, U's span first."""
    from dkpca.linalg import extend_basis

    rng = np.random.default_rng(1)
    U = np.linalg.qr(rng.standard_normal((100, 4)))[0]
    Q = extend_basis(U, np.hstack([U, U[:, :2]]))
    np.testing.assert_allclose(Q.T @ Q, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(np.linalg.svd(U.T @ Q[:, :4], compute_uv=False), 1.0, atol=1e-12)


@pytest.mark.parametrize("n", [400, 30_000])
def test_an_update_asks_for_the_stored_k_and_block_lanczos_where_auto_leaves_them(n):
    """An update is no fresh fit: it keeps the store's K (only blocks touching new rows are computed) and starts
    block Lanczos from the old fit, where a fresh fit's rule might recompute or take subspace iteration (as it
    does for a float32 K from 20,000 rows); what the user named, or a store without K or old model, is kept."""
    from dkpca.planning.growthplan import update_modes
    from dkpca.request import FitOptions, make_request
    from dkpca.storage.growth import Growth

    req = make_request(make_data(n, d=2), FitOptions(n_components=K), create_store=False)
    growth = Growth(n_old=n - 100, n_new=n, block=EDGE, copy_data=False, model_rows=n - 100, gram_rows=n - 100)
    solver, gram, why = update_modes(req, growth)
    assert (solver, gram) == ("lanczos", "store") and "update" in why["solver"] and "new rows" in why["gram"]
    assert update_modes(req, None) == ("auto", "auto", {})
    assert update_modes(req, dataclasses.replace(growth, gram_rows=None, model_rows=None)) == ("auto", "auto", {})
    named = make_request(make_data(n, d=2), FitOptions(n_components=K, solver="randomized", gram="recompute"),
                         create_store=False)
    assert update_modes(named, growth) == ("randomized", "recompute", {})


def test_a_fit_and_plan_on_grown_data_say_the_update_chose_its_modes(grown):
    X, store = grown
    kw = {**KW, "solver": "auto", "dtype": "auto", "chunk_size": None}
    plan = dkpca.plan(X, store=store, n_components=K, gamma=GAMMA, measure=False)
    assert (plan.decision.solver.value, plan.decision.gram.value) == ("lanczos", "store")
    assert "an update" in plan.decision.reason
    model = dkpca.fit(X, store=store, **kw)
    assert model.report["update"]["blocks_reused"] == 10 and "an update" in model.report["solver_reason"]
    assert model.report["plan"]["reasons"]["start"].startswith("an update: the old fit's")


def test_an_update_over_a_stale_k_of_another_kernel_names_both(tmp_path):
    """K built with gamma 0.1, then a gamma 0.3 model with gram="recompute" (K left as it was): the update with the
    model's gamma was refused as "the kernel differs (store: 0.1 ...)", whose advice -- pass gamma 0.1 -- fits
    another kernel than the model's.  Now the refusal names K's kernel and the model's, and overwrite refits."""
    X, store = make_data(500, d=4), tmp_path / "s.dkpca.zarr"
    kw = dict(n_components=3, store=store, chunk_size=128, dtype="float64", solver="lanczos", tol=1e-10)
    dkpca.fit(X[:400], gamma=0.1, **kw)
    dkpca.fit(X[:400], gamma=0.3, gram="recompute", **kw)
    with pytest.raises(ValueError, match=r"a model of 400 rows with this kernel, and a Gram matrix of another one "
                                         r"that an earlier fit left \(K: .*0\.1.*model and now: .*0\.3"):
        dkpca.fit(X, gamma=0.3, **kw)
    model = dkpca.fit(X, gamma=0.3, overwrite=True, **kw)
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.3), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
