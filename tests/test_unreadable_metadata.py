"""Metadata a fit reads back that cannot be parsed (a ``zarr.json`` cut short or garbled) ends in the right answer.

Before: a truncated ``solver/zarr.json`` or ``gram/zarr.json`` made every command -- the fit with or without
``--overwrite``, ``verify``, ``info``, ``transform`` -- end in a bare JSON parser error naming no file, for ever.
Now the checkpoint's is ignored (a warning) and replaced, K's is K's record lost (K built anew, as where it is
missing), and ``verify`` names each.  Reference: ``scipy.linalg.eigh`` of the dense centred kernel (rbf, gamma
0.2), eigenvalues to 1e-8 relative (a float64 K and the dense solver).  A checkpoint's pass count is sealed too.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.storage import CorruptChunkError, DamagedModelError, FitStore, SolverCheckpoint, verify_store
from dkpca.storage.slots import RITZ

from .conftest import make_data, reference_eigh


def _cut(path) -> None:
    """Cut a file to half its length (a write torn by a crash or a full disk)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _assert_reference(X, store) -> None:
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(dkpca.load(str(store)).eigenvalues_, lam, rtol=1e-8)


def test_an_unreadable_checkpoint_is_ignored_and_replaced(stored_fit, caplog):
    X, store, refit = stored_fit
    zarr.open_group(str(store), mode="r+").create_group("solver", attributes={"slot": "s0", "passes": 2})
    _cut(store / "solver" / "zarr.json")
    found = {f.part: f for f in verify_store(str(store))}
    assert found["checkpoint"].ok and "solver/zarr.json unreadable" in found["checkpoint"].text
    with caplog.at_level(logging.WARNING, logger="dkpca"):  # what an iterative solver's start reads
        assert SolverCheckpoint(str(store), {"fit": 1}).load() is None
    assert any("solver checkpoint" in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)
    refit()
    assert not (store / "solver").exists()  # removed once the model was saved
    _assert_reference(X, store)


def test_an_unreadable_gram_record_rebuilds_k_and_keeps_the_model_readable(stored_fit, capsys, caplog):
    X, store, refit = stored_fit
    _cut(store / "gram" / "zarr.json")
    assert main(["verify", str(store)]) == 1
    assert "BAD  gram: the Gram matrix's metadata (gram/zarr.json or an array's under it) is unreadable" in \
        capsys.readouterr().out
    Z = dkpca.load(str(store)).transform(X[:5])  # the model does not need K's record
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = refit()
    assert any("K is built anew" in r.getMessage() for r in caplog.records)
    assert model.report["gram"]["computed_blocks"] == 6  # all of K's upper triangle, 3 x 3 blocks
    _assert_reference(X, store)
    np.testing.assert_allclose(np.abs(model.transform(X[:5])), np.abs(Z), atol=1e-10)
    assert all(f.ok for f in verify_store(str(store)))


def test_an_unreadable_k_array_record_rebuilds_k(stored_fit):
    X, store, refit = stored_fit
    _cut(store / "gram" / "K" / "zarr.json")
    assert not {f.part: f for f in verify_store(str(store))}["gram"].ok
    refit()
    _assert_reference(X, store)


def test_a_checkpoints_edited_pass_count_is_not_resumed_from(tmp_path, stored_fit, caplog):
    """The arrays' checksums did not cover ``passes``: a resumed solver believed it had done 59 of 60 passes and
    stopped unconverged with other eigenvalues (3e-4 of the largest off), exit 0."""
    _, store, _ = stored_fit
    ck = SolverCheckpoint(str(store), {"fit": 1}, interval=0)
    ck.save(3, [1e-2, 1e-3, 1e-4], Q=np.eye(4))
    assert SolverCheckpoint(str(store), {"fit": 1}).load().passes == 3
    zarr.open_group(str(store / "solver"), mode="r+").attrs.update({"passes": 59})
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        assert SolverCheckpoint(str(store), {"fit": 1}).load() is None
    assert any("fails its seal" in r.getMessage() for r in caplog.records)


def test_a_store_whose_root_record_is_lost_is_refused_as_that(stored_fit, capsys):
    """Before: 'exists and is not a dkpca store' (fit) and 'not a Zarr group written by dkpca' (verify, info), of a
    directory plainly holding a fit.  Still refused -- dkpca writes nothing into what it cannot tell is its own --
    but said as what it is, with the fix; a foreign directory is refused as before."""
    X, store, refit = stored_fit
    (store / "zarr.json").unlink()
    before = sorted(p.name for p in store.iterdir())
    np.save(store.parent / "x.npy", X)
    data = str(store.parent / "x.npy")
    for argv in (["fit", data, "--store", str(store), "-k", "2", "--overwrite", "-q"], ["verify", str(store)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "holds a dkpca fit's parts (data, gram, model" in err and "root metadata (zarr.json) is missing" in err
    assert sorted(p.name for p in store.iterdir()) == before
    (store.parent / "other").mkdir()
    (store.parent / "other" / "notes.txt").write_text("mine")
    assert main(["fit", data, "--store", str(store.parent / "other"), "-q"]) == 2
    assert "exists and is not a dkpca store" in capsys.readouterr().err


def test_an_empty_directory_is_said_to_be_empty_by_verify_and_info(tmp_path, capsys):
    """Before: 'not a Zarr group written by dkpca', of a directory a fit takes as a new store."""
    (tmp_path / "s").mkdir()
    for command in ("verify", "info"):
        assert main([command, str(tmp_path / "s")]) == 2
        assert "is empty; fit a model first" in capsys.readouterr().err


def test_verify_judges_a_checkpoint_as_the_solvers_start_does(stored_fit):
    """Before: 'pass 3 verified; a rerun resumes from it' of a checkpoint the fit then ignored (an array's
    zarr.json missing); now verify says what the start would do with it."""
    _, store, _ = stored_fit

    def said() -> str:
        return {f.part: f for f in verify_store(str(store))}["checkpoint"].text

    ck = SolverCheckpoint(str(store), {"fit": 1}, interval=0)
    ck.save(3, [1e-2, 1e-3, 1e-4], Q=np.eye(4))
    assert "pass 3 verified; a rerun resumes from it" in said()
    group = zarr.open_group(str(store / "solver"), mode="r+")
    group.attrs.update({"passes": 59})
    assert "its attributes fail their seal; harmless" in said()
    ck.save(3, [1e-2, 1e-3, 1e-4], Q=np.eye(4))  # sealed again, into the other slot
    slot = zarr.open_group(str(store / "solver"), mode="r").attrs["slot"]
    (store / "solver" / slot / "Q" / "zarr.json").unlink()
    assert "its arrays Q are missing; harmless" in said()
    assert SolverCheckpoint(str(store), {"fit": 1}).load() is None


def test_an_unreadable_data_record_is_named_and_copied_again_where_k_is_of_the_input(stored_fit, capsys, caplog):
    """Before: ``verify`` said only json's 'Expecting value: line 1 ...' and a refit raised json's
    ``JSONDecodeError`` (zarr's ``'data' in root`` parses ``data/zarr.json``).  Now as a lost ``data/zarr.json``:
    named; other data refused, naming the file and the fix; the data K was built from copied again, K kept."""
    X, store, refit = stored_fit
    _cut(store / "data" / "zarr.json")
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert "BAD  data/X: array 'data/X'" in out and "has metadata zarr cannot read" in out
    with pytest.raises(CorruptChunkError, match=r"metadata zarr cannot read \(data/zarr.json\).*overwrite=True"):
        dkpca.fit(X + 1.0, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64")
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = refit()
    assert any("copied again from the input, whose fingerprint is its Gram matrix's" in r.getMessage()
               for r in caplog.records)
    assert model.report["gram"]["computed_blocks"] == 0
    _assert_reference(X, store)
    assert all(f.ok for f in verify_store(str(store)))


def test_an_unreadable_model_group_record_is_named_and_a_refit_replaces_it(tmp_path, capsys):
    """Before: ``verify`` of a store with a Ritz record (block Lanczos writes one) said only json's error, through
    zarr's ``name in root`` (the record is checked against the model's name); the load named it already."""
    X, store = make_data(300, d=4), tmp_path / "s.dkpca.zarr"
    kw = dict(n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64", solver="lanczos")
    dkpca.fit(X, **kw)
    assert FitStore.at(str(store)).model_group(RITZ) is not None
    (group,) = [p for p in store.iterdir() if p.name.startswith("model.")]
    _cut(group / "zarr.json")
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"BAD  model: store '{store}': model group '{group.name}' has metadata zarr cannot read" in out
    with pytest.raises(DamagedModelError, match="has metadata zarr cannot read"):
        dkpca.load(str(store))
    assert dkpca.fit(X, **kw).report["gram"]["computed_blocks"] == 0  # K is intact: solved again from it
    _assert_reference(X, store)


@pytest.mark.parametrize("record", ["gram/zarr.json", "gram/done/zarr.json"])
def test_an_update_over_an_unreadable_gram_record_builds_k_anew(stored_fit, record, caplog):
    """Before: json's ``JSONDecodeError`` from the update growing K (``done/zarr.json``), or the grown data refused
    as other data (``gram/zarr.json``: the update was not recognised).  Now K's record lost is no K to grow: the
    update copies only the new rows and builds K anew, warm-started from the old model."""
    X, store, _ = stored_fit
    _cut(store / record)
    grown = np.vstack([X, make_data(100, seed=1, d=4)])
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = dkpca.fit(grown, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64",
                          solver="dense", gram="store")
    assert any("K is built anew" in r.getMessage() for r in caplog.records)
    assert model.report["update"]["rows_before"] == 300 and model.report["gram"]["computed_blocks"] == 10
    lam, _ = reference_eigh(rbf_kernel(grown, gamma=0.2), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert all(f.ok for f in verify_store(str(store)))
