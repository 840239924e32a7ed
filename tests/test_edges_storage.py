"""Issue 37, storage: valid data is never refused, data read back is always verified.

* zarr v3 skips a chunk equal to the fill value; dkpca's presence checks
  called it missing.  Every array dkpca writes now writes every chunk.
* ``data/X`` records a digest per chunk when it is copied; every read checks
  presence and that digest (a swapped or missing chunk is refused by name).
* a rerun recomputes damaged Gram sums; a damaged data copy is refused by a
  refit in one line and copied again with ``overwrite``.
* an edited shape (10^12 rows) is refused in one line before any chunk grid
  is walked; a dangling symbolic link as the store is followed.

Numbers are checked against ``reference_eigh`` (``scipy.linalg.eigh`` of the
dense centred kernel) to 1e-8 relative (float64 K, dense solver).
"""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.storage import ChunkWriter, CorruptChunkError, create_array, datachunks

from .conftest import cli_error, make_data, reference_eigh

KW = dict(n_components=3, gamma=0.2, chunk_size=50, dtype="float64", solver="dense", gram="store")


def _files(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _zero_rows() -> np.ndarray:
    X = make_data(300, d=4)
    X[:150] = 0.0  # chunks 0-2 of data/X (50 rows each) are all fill value
    return X


def _rbf_reference(X: np.ndarray) -> np.ndarray:
    return reference_eigh(rbf_kernel(X, gamma=0.2), 3)[0]


# -- case 1 and 2: chunks equal to the fill value ----------------------------------------------
@pytest.mark.parametrize("how", ["store", "rerun-overwrite", "temporary"])
def test_zero_rows_are_fitted_not_called_missing(tmp_path, how):
    X = _zero_rows()
    if how == "temporary":
        model = dkpca.fit(X, **{**KW, "gram": "auto"})
    else:
        model = dkpca.fit(X, store=tmp_path / "s.zarr", **KW)
        if how == "rerun-overwrite":
            model = dkpca.fit(X, store=tmp_path / "s.zarr", overwrite=True, **KW)
        assert main(["verify", str(tmp_path / "s.zarr")]) == 0
    np.testing.assert_allclose(model.eigenvalues_, _rbf_reference(X), rtol=1e-8)
    np.testing.assert_allclose(model.X_fit.compute(), X, rtol=0, atol=0)


def test_zero_rows_through_the_cli(tmp_path, capsys):
    X = _zero_rows()
    np.save(tmp_path / "xzero.npy", X)
    argv = ["fit", str(tmp_path / "xzero.npy"), "-k", "3", "--gamma", "0.2", "--chunk-size", "50", "--dtype",
            "float64", "--solver", "dense", "-q", "--no-progress"]
    assert main(argv) == 0
    assert main([*argv, "--overwrite"]) == 0
    np.testing.assert_allclose(dkpca.load(tmp_path / "xzero.npy.dkpca.zarr").eigenvalues_, _rbf_reference(X),
                               rtol=1e-8)


def test_linear_kernel_on_centred_data_every_row_sum_zero(tmp_path):
    """Ordinary PCA through dkpca: K 1 = X (X^T 1) = 0 exactly (integer data, mean exactly 0)."""
    A = np.random.default_rng(0).integers(-3, 4, size=(150, 4)).astype(np.float64)
    X = np.vstack([A, -A])
    kw = dict(n_components=3, kernel="linear", store=tmp_path / "s.zarr", chunk_size=50, dtype="float64",
              solver="dense", gram="store")
    first = dkpca.fit(X, **kw)
    again = dkpca.fit(X, **kw)  # every rerun reuses the store
    lam = reference_eigh(X @ X.T, 3)[0]
    for model in (first, again):
        np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert np.all(zarr.open_array(str(tmp_path / "s.zarr"), path="gram/row_sums")[:] == 0)
    assert main(["verify", str(tmp_path / "s.zarr")]) == 0


def test_every_write_path_writes_fill_valued_chunks(tmp_path):
    from dkpca.storage.integrity import check_chunks, writable

    path = str(tmp_path / "a.zarr")
    g = zarr.open_group(path, mode="w")
    fresh = create_array(g, "fresh", shape=(4, 3), chunks=(2, 3), dtype="float64")
    fresh[...] = 0.0
    create_array(g, "reopened", shape=(4, 3), chunks=(2, 3), dtype="float64")
    writable(zarr.open_group(path, mode="r+")["reopened"])[...] = 0.0
    fallback = create_array(g, "fallback", shape=(3, 3), chunks=(2, 3), dtype="float32")
    ChunkWriter.of(path, fallback).write((1, 0), np.zeros((1, 3), np.float64))  # another dtype: zarr's path
    ChunkWriter.of(path, fallback).write((0, 0), np.zeros((2, 3), np.float32))  # the raw path
    for name in ("fresh", "reopened", "fallback"):
        check_chunks(zarr.open_array(path, path=name))  # no chunk missing


# -- case 4: every read of data/X is checked (presence and a position-bound digest) ---------------
@pytest.fixture
def fitted_store(tmp_path):
    X = make_data(300, d=4)
    store = tmp_path / "s.zarr"
    model = dkpca.fit(X, store=store, **KW)
    return X, store, model.transform(X[:20])


def _swap(store, a: int, b: int) -> None:
    pa, pb = (store / "data" / "X" / "c" / str(i) / "0" for i in (a, b))
    tmp = pa.with_suffix(".swap")
    pa.rename(tmp)
    pb.rename(pa)
    tmp.rename(pb)


def test_transform_with_a_missing_data_chunk_is_refused(fitted_store, tmp_path, capsys):
    X, store, _ = fitted_store
    (store / "data" / "X" / "c" / "2" / "0").unlink()
    with pytest.raises(CorruptChunkError, match=r"chunk \(2, 0\) of array 'data/X'.* missing"):
        dkpca.load(store).transform(X[:20])
    zarr.create_array(str(tmp_path / "xt.zarr"), data=X[:20])
    err = cli_error(capsys, ["transform", str(store), str(tmp_path / "xt.zarr"), str(tmp_path / "out.zarr"), "-q"])
    assert "chunk (2, 0) of array 'data/X'" in err and "missing" in err


def test_swapped_data_chunks_are_refused_on_every_read(fitted_store, tmp_path, capsys):
    X, store, _ = fitted_store
    _swap(store, 0, 2)
    model = dkpca.load(store)
    with pytest.raises(CorruptChunkError, match=r"chunk \(0, 0\) of array 'data/X'.* not what was written"):
        model.transform(X[:20])
    with pytest.raises(CorruptChunkError, match=r"array 'data/X'"):
        model.X_fit.compute()
    assert main(["verify", str(store)]) == 1
    assert "BAD  data/X: chunk (0, 0) of array 'data/X'" in capsys.readouterr().out


def test_overwrite_copies_a_damaged_data_copy_again(fitted_store, capsys):
    X, store, Z = fitted_store
    _swap(store, 0, 2)
    model = dkpca.fit(X, store=store, overwrite=True, **KW)
    np.testing.assert_array_equal(model.X_fit.compute(), X)  # copied again, in order (the swap was kept before)
    np.testing.assert_allclose(model.eigenvalues_, _rbf_reference(X), rtol=1e-8)
    np.testing.assert_allclose(np.abs(model.transform(X[:20])), np.abs(Z), atol=1e-10)
    assert main(["verify", str(store)]) == 0


def test_a_rerun_writes_damaged_data_chunks_again_from_its_input_keeping_k(fitted_store, caplog, capsys):
    """Before: refused, naming --overwrite, which copied the data again and rebuilt all of K (hours at scale).
    The input's fingerprint is the copy's, and each damaged chunk's input rows have the digest recorded for it:
    those chunks are written again; K and the model, built from the recorded values, are kept."""
    X, store, Z = fitted_store
    _swap(store, 0, 2)
    path = store / "data" / "X" / "c" / "1" / "0"
    data = bytearray(path.read_bytes())
    data[8 * 3 + 7] ^= 1 << 6
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = dkpca.fit(X, store=store, **KW)
    assert "3 chunk(s) of its data copy were damaged (first: chunk (0, 0) of array 'data/X'" in caplog.text
    assert model.report["gram"]["computed_blocks"] == 0
    np.testing.assert_array_equal(model.X_fit.compute(), X)
    np.testing.assert_allclose(np.abs(model.transform(X[:20])), np.abs(Z), atol=1e-10)
    assert main(["verify", str(store)]) == 0


def test_a_repair_of_the_data_copy_killed_part_way_is_finished_by_the_rerun(fitted_store, monkeypatch):
    """Chunks are each left as they were or repaired: the rerun repairs the rest, and K is still kept."""
    X, store, Z = fitted_store
    for c in (1, 3):
        (store / "data" / "X" / "c" / str(c) / "0").unlink()
    real, calls = datachunks._rewrite, []

    def once(*args):
        calls.append(args[3])
        if len(calls) > 1:
            raise KeyboardInterrupt  # the job killed while it repairs
        return real(*args)

    with monkeypatch.context() as m:
        m.setattr(datachunks, "_rewrite", once)
        with pytest.raises(KeyboardInterrupt):
            dkpca.fit(X, store=store, **KW)
    model = dkpca.fit(X, store=store, **KW)
    assert model.report["gram"]["computed_blocks"] == 0
    np.testing.assert_array_equal(model.X_fit.compute(), X)
    assert main(["verify", str(store)]) == 0


def test_a_damaged_data_chunk_whose_input_rows_differ_is_refused_in_one_line(fitted_store, capsys):
    """A chunk is written again only from rows with its recorded digest: one the input does not match is named
    (here: a copy without recorded digests, whose chunks nothing can match), and --overwrite copies it all."""
    X, store, _ = fitted_store
    group = zarr.open_group(str(store / "data"), mode="r+")
    for key in ("digest", "digests"):
        group.attrs.pop(key, None)
    (store / "data" / "X" / "c" / "1" / "0").unlink()
    np.save(store.parent / "x.npy", X)
    argv = ["fit", str(store.parent / "x.npy"), "-k", "3", "--gamma", "0.2", "--chunk-size", "50", "--dtype",
            "float64", "--solver", "dense", "--store", str(store), "-q", "--no-progress"]
    err = cli_error(capsys, argv)
    assert "chunk (1, 0) of array 'data/X'" in err and "--overwrite" in err
    assert main([*argv, "--overwrite"]) == 0
    assert main(["verify", str(store)]) == 0


def test_a_copy_without_recorded_digests_still_loads(fitted_store):
    """A store copied before dkpca recorded digests: CRC and presence only (a guard, not a fix)."""
    X, store, Z = fitted_store
    group = zarr.open_group(str(store / "data"), mode="r+")
    for key in ("digest", "digests"):
        group.attrs.pop(key, None)
    np.testing.assert_array_equal(dkpca.load(store).transform(X[:20]), Z)
    assert main(["verify", str(store)]) == 0


# -- unclear cases: damaged Gram sums, a dangling symbolic link ---------------------------------------
@pytest.mark.parametrize("chunk", ["partial_sums/c/0/1", "diag/c/1"])
def test_a_rerun_recomputes_damaged_gram_sums(fitted_store, chunk, capsys):
    X, store, _ = fitted_store
    path = store / "gram" / chunk
    data = bytearray(path.read_bytes())
    data[3] ^= 1 << 4
    path.write_bytes(bytes(data))
    assert main(["verify", str(store)]) == 1
    assert "a rerun of the same fit recomputes them" in capsys.readouterr().out
    model = dkpca.fit(X, store=store, **KW)
    assert model.report["gram"]["computed_blocks"] == 1  # what verify promised
    np.testing.assert_allclose(model.eigenvalues_, _rbf_reference(X), rtol=1e-8)
    assert main(["verify", str(store)]) == 0


def test_a_dangling_symlink_store_is_followed(tmp_path):
    X = make_data(300, d=4)
    link = tmp_path / "link.zarr"
    link.symlink_to(tmp_path / "elsewhere" / "s.zarr")
    model = dkpca.fit(X, store=link, **KW)
    assert link.is_symlink() and (tmp_path / "elsewhere" / "s.zarr" / "data").is_dir()
    np.testing.assert_allclose(dkpca.load(link).eigenvalues_, model.eigenvalues_)
    loop = tmp_path / "loop.zarr"
    loop.symlink_to(loop)
    with pytest.raises(ValueError, match="symbolic link"):
        dkpca.fit(X, store=loop, **KW)


# -- case 10: an edited shape is refused before any chunk grid is walked -------------------------------
def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a walk over 10^12 rows would need far more


def _dkpca_limited(*argvs: list[str]) -> tuple[list[int], str, str]:
    """Run ``dkpca`` commands in one fresh interpreter under a 3 GiB address-space limit; exit codes, out, err."""
    code = ("import sys, json; from dkpca.cli import main\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    rc = main(argv); sys.stdout.flush(); sys.stderr.flush(); print('RC', rc, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(list(argvs))], capture_output=True, text=True,
                         timeout=120, preexec_fn=_limited)
    return [int(line[3:]) for line in out.stdout.splitlines() if line.startswith("RC ")], out.stdout, out.stderr


def _claim_rows(meta, rows: int) -> None:
    doc = json.loads(meta.read_text())
    doc["shape"][0] = rows
    meta.write_text(json.dumps(doc))


def test_a_data_shape_of_10_to_the_12_is_refused_in_one_line(fitted_store):
    X, store, _ = fitted_store
    _claim_rows(store / "data" / "X" / "zarr.json", 10**12)
    np.save(store.parent / "x.npy", X)
    before = _files(store)
    fit = ["fit", str(store.parent / "x.npy"), "-k", "3", "--gamma", "0.2", "--chunk-size", "50", "--dtype",
           "float64", "--store", str(store), "-q", "--no-progress"]
    codes, out, err = _dkpca_limited(["verify", str(store)], fit)
    assert codes == [1, 2], err[-2000:]
    assert "claims shape (1000000000000, 4)" in out
    assert err.count("\n") == 1 and err.startswith("dkpca: error: ") and "claims shape" in err, err[-2000:]
    with pytest.raises(CorruptChunkError, match="claims shape"):
        dkpca.load(store)
    assert _files(store) == before  # refused, nothing deleted


def test_a_sound_model_larger_than_this_machines_memory_is_not_called_damaged(fitted_store, capsys, monkeypatch):
    """A model written on a larger machine (its arrays' shapes as recorded), opened where its eigenvectors do not
    fit (the process's memory made 1 KB here): said so, with the fix -- before: "the store is damaged or was edited
    -- refit the model", for a sound store."""
    from dkpca.storage import modelrecord

    _, store, _ = fitted_store
    monkeypatch.setattr(modelrecord, "memory_total", lambda: 1024)
    with pytest.raises(ValueError, match="the model was written on a larger machine: load it on one with more memory"
                       ) as exc:
        dkpca.load(store)
    assert not isinstance(exc.value, modelrecord.DamagedModelError)
    assert "written on a larger machine" in cli_error(capsys, ["info", str(store)])


def test_data_metadata_zarr_cannot_parse_is_one_finding_and_one_line(fitted_store, capsys):
    """data/X's zarr.json edited to complex64 (zarr then fails on its fill value 0.0): verify, info, load."""
    X, store, _ = fitted_store
    meta = store / "data" / "X" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["data_type"] = "complex64"
    meta.write_text(json.dumps(doc))
    assert main(["verify", str(store)]) == 1  # before: a TypeError traceback from zarr
    out = capsys.readouterr().out
    assert "BAD  data/X: array 'data/X'" in out and "metadata zarr cannot read" in out and "--overwrite" in out
    err = cli_error(capsys, ["info", str(store)])
    assert "metadata zarr cannot read" in err
    with pytest.raises(CorruptChunkError, match="metadata zarr cannot read"):
        dkpca.load(store)


def test_a_gram_shape_of_10_to_the_6_is_refused_in_one_line(fitted_store, capsys):
    X, store, _ = fitted_store
    _claim_rows(store / "gram" / "done" / "zarr.json", 10**6)
    assert main(["verify", str(store)]) == 1
    assert "BAD  gram: array 'gram/done'" in capsys.readouterr().out
    with pytest.raises(CorruptChunkError, match="gram/done.*--overwrite"):
        dkpca.fit(X, store=store, **KW)
    model = dkpca.fit(X, store=store, overwrite=True, **KW)
    np.testing.assert_allclose(model.eigenvalues_, _rbf_reference(X), rtol=1e-8)


def test_presence_check_of_a_huge_grid_is_bounded(tmp_path):
    from dkpca.storage.integrity import check_chunks

    g = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    create_array(g, "X", shape=(10, 2), chunks=(5, 2), dtype="float64")[...] = 1.0
    _claim_rows(tmp_path / "a.zarr" / "X" / "zarr.json", 10**12)
    with pytest.raises(CorruptChunkError, match=r"chunk \(2, 0\).* missing"):
        check_chunks(zarr.open_array(str(tmp_path / "a.zarr"), path="X"))



def _read_only_beside(monkeypatch, directory):
    """The filesystem of ``directory`` read-only, as a shared data set's is on a cluster (root ignores chmod)."""
    import errno
    import os

    from dkpca.storage import lockfiles

    real = os.makedirs

    def makedirs(path, *args, **kw):
        if os.path.dirname(os.path.abspath(path)) == str(directory):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return real(path, *args, **kw)

    monkeypatch.setattr(lockfiles.os, "makedirs", makedirs)


def test_a_default_store_on_a_read_only_filesystem_names_store(tmp_path, monkeypatch, capsys):
    """Before: OSError '[Errno 30] Read-only file system: .../x.npy.dkpca.zarr', the fix unnamed (the user gave
    no store, so the path was dkpca's choice)."""
    from dkpca.request import StoreBesideInputError

    data = tmp_path / "shared"
    data.mkdir()
    np.save(data / "x.npy", make_data(200, 3))
    _read_only_beside(monkeypatch, data)
    with pytest.raises(StoreBesideInputError, match=r"with no store given, dkpca writes it beside the input "
                                                    r"\('.*x\.npy\.dkpca\.zarr'\); pass store=") as caught:
        dkpca.fit(str(data / "x.npy"), 2)
    assert isinstance(caught.value, OSError) and caught.value.errno == 30
    assert cli_error(capsys, ["fit", str(data / "x.npy"), "-k", "2", "-q"]).endswith("(CLI: --store PATH)\n")
    model = dkpca.fit(str(data / "x.npy"), 2, store=tmp_path / "mine.dkpca.zarr")  # the fix works
    assert model.n_samples == 200


def test_an_unreadable_input_is_not_blamed_on_the_store(tmp_path):
    import errno

    from dkpca.request import FitOptions, beside_input, make_request

    np.save(tmp_path / "x.npy", make_data(50, 3))
    req = make_request(str(tmp_path / "x.npy"), FitOptions(), create_store=False)
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x.npy"))
    assert beside_input(denied, FitOptions(), req) is None
    store = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x.npy.dkpca.zarr" / "zarr.json"))
    assert beside_input(store, FitOptions(), req) is not None
    assert beside_input(store, FitOptions(store=str(tmp_path / "given.zarr")), req) is None  # the user's own path
