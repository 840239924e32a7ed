"""Trust nothing read back: every chunk dkpca wrote is checked on every read.

A damaged Gram chunk (missing, truncated, a flipped bit, another block's
file) is recomputed and the answer is the reference's (the dense centred
kernel's eigenvalues, ``reference_eigh``, to 1e-8 relative: float64 K, a
dense solve); damage anything else cannot recompute is an error naming the
array and the chunk; ``dkpca verify`` says what a rerun would do.
"""

from __future__ import annotations

import errno
import logging
import shutil

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.sparse import SparseKernelPCA
from dkpca.storage import (
    ChunkReader,
    ChunkWriter,
    CorruptChunkError,
    DamagedModelError,
    FitStore,
    create_array,
    verify_store,
)
from dkpca.storage.corrupt import TrailerOnlyError
from dkpca.storage.gramstore import GramStore

from .conftest import cli_error, make_data, reference_eigh, write_data


def _flip_bit(path, offset: int = 8 * 57 + 7, bit: int = 6) -> None:
    """Flip one bit in an exponent byte (element 57 of a float64 chunk): a huge or tiny value."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def _agrees_with_reference(X, model) -> None:
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def _K(store, I, J):
    return store / "gram" / "K" / "c" / str(I) / str(J)


@pytest.mark.parametrize("damage", [
    lambda store: _K(store, 0, 2).unlink(),
    lambda store: _K(store, 0, 2).write_bytes(_K(store, 0, 2).read_bytes()[:1000]),
    lambda store: _flip_bit(_K(store, 0, 2)),
    lambda store: shutil.copyfile(_K(store, 0, 1), _K(store, 0, 2)),  # intact, but another block's
], ids=["missing", "truncated", "flipped-bit", "another-blocks-file"])
def test_a_damaged_K_chunk_is_recomputed(stored_fit, damage, caplog):
    X, store, refit = stored_fit
    damage(store)
    model = refit()
    _agrees_with_reference(X, model)
    assert "chunk (0, 2) of array 'gram/K'" in caplog.text
    assert main(["verify", str(store)]) == 0  # mended: every chunk verifies again


def test_every_damaged_block_is_mended_in_one_rebuild(stored_fit):
    X, store, refit = stored_fit
    for I, J in [(0, 0), (0, 1), (1, 2), (2, 2)]:
        _flip_bit(_K(store, I, J))
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 4


@pytest.mark.parametrize("array,chunk", [("partial_sums", "1/2"), ("diag", "1")])
def test_damaged_sums_of_an_unfinished_build_are_recomputed(stored_fit, array, chunk):
    """A build killed before its row sums were reduced: a damaged sum's block is rebuilt, not trusted."""
    X, store, refit = stored_fit
    g = zarr.open_group(str(store / "gram"), mode="r+")
    g.attrs["complete"] = False
    (store / "gram" / array / "c" / chunk).unlink()
    _agrees_with_reference(X, refit())


def _other_store(tmp_path):
    """A store of the same layout as ``stored_fit``'s, fitted on other data: its chunks are intact, and stale."""
    other = tmp_path / "other.dkpca.zarr"
    dkpca.fit(make_data(300, seed=1, d=4), n_components=3, gamma=0.2, store=other, chunk_size=100,
              dtype="float64", solver="dense", gram="store")
    return other


def test_a_gram_group_copied_whole_from_another_store_is_named_by_verify_as_the_fit_refuses_it(stored_fit, tmp_path,
                                                                                                 capsys):
    """Every chunk and marker of the copy is intact (verify said 'intact'); its data fingerprint is the other
    store's, which the fit refuses: verify now says so, and --overwrite mends it (reference to 1e-8)."""
    X, store, refit = stored_fit
    shutil.rmtree(store / "gram")
    shutil.copytree(_other_store(tmp_path) / "gram", store / "gram")
    assert main(["verify", str(store)]) == 1
    assert "gram: K was built from other data" in capsys.readouterr().out
    with pytest.raises(ValueError, match="does not match this fit: data X differs"):
        refit()
    _agrees_with_reference(X, dkpca.fit(X, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64",
                                        solver="dense", gram="store", overwrite=True))
    assert main(["verify", str(store)]) == 0


@pytest.mark.parametrize("chunk", ["partial_sums/c/1/0", "partial_sums/c/2/2"])
def test_sums_copied_from_another_store_are_found_and_recomputed(stored_fit, tmp_path, chunk, caplog, capsys):
    """Their CRC holds, so only the block's sums marker can tell: verify names the block, a rerun rebuilds it."""
    X, store, refit = stored_fit
    shutil.copyfile(_other_store(tmp_path) / "gram" / chunk, store / "gram" / chunk)
    assert main(["verify", str(store)]) == 1
    assert "(a stale or foreign copy)" in capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 1 and "stale or foreign" in caplog.text
    assert main(["verify", str(store)]) == 0


def _copy_block(src, dst, src_block, dst_block, arrays=("K", "done")) -> None:
    """Copy block ``src_block``'s chunk of each of ``arrays`` from store ``src`` over ``dst_block``'s in ``dst``."""
    for name in arrays:
        shutil.copyfile(src / "gram" / name / "c" / "/".join(map(str, src_block)),
                        dst / "gram" / name / "c" / "/".join(map(str, dst_block)))


def _other_kernel(tmp_path):
    """A store of the same data and layout as ``stored_fit``'s, built with gamma 0.3: its chunks are intact, and
    another K's."""
    other = tmp_path / "gamma03.dkpca.zarr"
    dkpca.fit(make_data(300, d=4), n_components=3, gamma=0.3, store=other, chunk_size=100, dtype="float64",
              solver="dense", gram="store")
    return other


@pytest.mark.parametrize("source", ["another-kernels-store", "another-block"])
def test_a_K_chunk_copied_with_its_marker_is_found_and_recomputed(stored_fit, tmp_path, source, capsys):
    """A done marker vouches for its chunk at its place in this store's K: copied with the chunk from another
    store of the same layout (before: eigenvalues 3.4-3.9 % off) or from another block of the same store (20 %),
    it no longer matches, so verify names the block and a rerun rebuilds it (reference to 1e-8)."""
    X, store, refit = stored_fit
    if source == "another-block":
        _copy_block(store, store, (0, 1), (0, 2))
    else:
        _copy_block(_other_kernel(tmp_path), store, (0, 2), (0, 2))
    assert main(["verify", str(store)]) == 1
    assert "block (0, 2): gram/K chunk (0, 2) not what was written there" in capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 1
    assert main(["verify", str(store)]) == 0


def test_sums_copied_with_their_marker_from_another_block_are_recomputed(stored_fit, caplog):
    """An unfinished build reduces the blocks' sums again: block (0, 1)'s sums and sums marker over block (0, 2)'s
    would centre K wrongly; the marker no longer matches at its new place."""
    X, store, refit = stored_fit
    zarr.open_group(str(store / "gram"), mode="r+").attrs["complete"] = False
    for src, dst in [((1, 0), (2, 0)), ((0, 1), (0, 2))]:
        _copy_block(store, store, src, dst, arrays=("partial_sums",))
    _copy_block(store, store, (0, 1), (0, 2), arrays=("sums_done",))
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 1 and "stale or foreign" in caplog.text


@pytest.mark.parametrize("how", ["store-copied-whole", "block-from-the-same-fit"])
def test_valid_chunks_copied_from_the_same_fit_are_reused(stored_fit, tmp_path, how):
    """The markers are bound to the K a fit builds (its data, kernel, tile and precision) and to their block, not
    to the store's path: a store copied whole, or a block copied from another store of the same fit, is reused."""
    X, store, refit = stored_fit
    if how == "store-copied-whole":
        store = shutil.copytree(store, tmp_path / "copy.dkpca.zarr")
        model = dkpca.fit(X, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64",
                          solver="dense", gram="store")
    else:
        twin = tmp_path / "twin.dkpca.zarr"
        dkpca.fit(X, n_components=3, gamma=0.2, store=twin, chunk_size=100, dtype="float64", solver="dense",
                  gram="store")
        _copy_block(twin, store, (0, 2), (0, 2), arrays=("K", "done", "sums_done"))
        model = refit()
    assert main(["verify", str(store)]) == 0
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 0


def test_row_sums_copied_from_another_store_are_reduced_again(stored_fit, tmp_path, caplog):
    X, store, refit = stored_fit
    shutil.copyfile(_other_store(tmp_path) / "gram" / "row_sums" / "c" / "1", store / "gram" / "row_sums" / "c" / "1")
    assert main(["verify", str(store)]) == 1
    _agrees_with_reference(X, refit())
    assert "chunk (1) of array 'gram/row_sums'" in caplog.text and "stale or foreign" in caplog.text
    assert main(["verify", str(store)]) == 0


def test_a_store_built_before_the_sums_markers_is_reused_as_it_is(stored_fit):
    """No sums markers and no row sums digests (an older dkpca's store): CRC only, nothing recomputed."""
    X, store, refit = stored_fit
    shutil.rmtree(store / "gram" / "sums_done")
    g = zarr.open_group(str(store / "gram"), mode="r+")
    g.attrs.pop("row_sums_digests")
    assert main(["verify", str(store)]) == 0
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 0


def test_a_store_built_before_the_marker_key_is_reused_as_it_is(stored_fit):
    """Markers that are their chunks' bare digests, and no key (an older dkpca's store): checked as they are."""
    from dkpca.storage.gramcheck import MARKER_KEY, block_mask, read_marker_key

    X, store, refit = stored_fit
    g = zarr.open_group(str(store / "gram"), mode="r+")
    key = read_marker_key(g.attrs)
    for name in ("done", "sums_done"):
        for I in range(3):
            for J in range(I, 3):
                g[name][I, J] = int(g[name][I, J]) ^ block_mask(key, I, J)
    g.attrs.pop(MARKER_KEY)
    assert main(["verify", str(store)]) == 0
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 0


def test_an_edited_marker_key_is_refused_naming_the_fix(stored_fit, capsys):
    X, store, refit = stored_fit
    zarr.open_group(str(store / "gram"), mode="r+").attrs["marker_key"] = "not hex"
    assert main(["verify", str(store)]) == 1
    assert "marker_key attribute 'not hex' is not 16 hex digits" in capsys.readouterr().out
    with pytest.raises(CorruptChunkError, match="marker_key.*overwrite=True"):
        refit()


def test_missing_row_sums_are_reduced_again(stored_fit):
    X, store, refit = stored_fit
    (store / "gram" / "row_sums" / "c" / "1").unlink()
    _agrees_with_reference(X, refit())


def test_a_damaged_data_copy_is_an_error_naming_the_chunk(stored_fit):
    X, store, refit = stored_fit
    _flip_bit(store / "data" / "X" / "c" / "1" / "0", offset=8 * 3 + 7)
    model = dkpca.load(store)
    with pytest.raises(CorruptChunkError, match=r"chunk \(1, 0\) of array 'data/X'.*checksum"):
        model.transform(X[:5])


def test_a_missing_data_chunk_is_written_again_by_the_rerun(stored_fit):
    """Before: refused, naming --overwrite (which rebuilt K too); the input holds the recorded rows."""
    X, store, refit = stored_fit
    (store / "data" / "X" / "c" / "2" / "0").unlink()
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 0
    np.testing.assert_array_equal(model.X_fit.compute(), X)


def test_a_damaged_model_array_is_refused_by_load_naming_it(stored_fit):
    X, store, refit = stored_fit
    group = FitStore.at(store).model_group()
    _flip_bit(store / group / "eigenvectors" / "c" / "0" / "0", offset=8 * 5 + 7)
    with pytest.raises(CorruptChunkError, match=rf"array .{group}/eigenvectors."):
        dkpca.load(store)


def test_cli_reports_damage_it_cannot_mend_in_one_line(fitted, tmp_path, capsys):
    """A data chunk missing from a copy without recorded digests: no input rows can be matched to it."""
    X, data, store = fitted
    zarr.open_group(str(tmp_path / "s.dkpca.zarr" / "data"), mode="r+").attrs.pop("digests")
    (tmp_path / "s.dkpca.zarr" / "data" / "X" / "c" / "0" / "0").unlink()
    err = cli_error(capsys, ["fit", data, "-k", "3", "--gamma", "0.2", "--store", store, "--dtype", "float64", "-q",
                             "--no-progress"])
    assert "of array 'data/X'" in err and "missing" in err


def test_raw_chunks_are_zarrs_own_format(tmp_path):
    """Chunks written by the raw path (edge chunks included) carry the CRC zarr's codec checks, and back."""
    g = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    arr = create_array(g, "K", shape=(250, 250), chunks=(100, 100), dtype="float64")
    writer = ChunkWriter.of(str(tmp_path / "a.zarr"), arr)
    assert writer.raw_dir is not None
    M = np.random.default_rng(0).standard_normal((250, 250))
    for I in range(3):
        for J in range(3):
            writer.write((I, J), M[100 * I:100 * I + 100, 100 * J:100 * J + 100].copy())
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"), path="K")[...], M)
    arr[200:, 200:] = M[200:, 200:] * 2  # written by zarr: read back raw, verified
    np.testing.assert_array_equal(ChunkReader.of(str(tmp_path / "a.zarr"), arr).read(2, 2, (50, 50)),
                                  M[200:, 200:] * 2)


def test_a_chunk_checksummed_strip_by_strip_carries_the_crc_zarr_checks(tmp_path):
    """The raw path continues one CRC-32C over a chunk's strips (dkpca's own, computed without the GIL);
    zarr's codec (google_crc32c) checks the whole chunk's: 30 strips of 8 rows, read back by zarr."""
    import google_crc32c

    from dkpca.storage.chunks import checksum

    M = np.random.default_rng(1).standard_normal((240, 240))
    assert checksum(M[8:], checksum(M[:8])) == checksum(M) == google_crc32c.value(M)
    g = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    arr = create_array(g, "K", shape=(240, 240), chunks=(240, 240), dtype="float64")
    ChunkWriter.of(str(tmp_path / "a.zarr"), arr).write((0, 0), M, strip_bytes=8 * M[0].nbytes)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"), path="K")[...], M)


def test_stores_written_before_checksums_still_read(tmp_path):
    """An array without the crc32c codec: size and presence are still checked, content cannot be."""
    g = zarr.open_group(str(tmp_path / "a.zarr"), mode="w")
    arr = g.create_array("K", shape=(200, 200), chunks=(100, 100), dtype="float32", compressors=None)
    M = np.arange(40000, dtype=np.float32).reshape(200, 200)
    arr[...] = M
    reader = ChunkReader.of(str(tmp_path / "a.zarr"), arr)
    np.testing.assert_array_equal(reader.read(1, 0, (100, 100)), M[100:, :100])
    (tmp_path / "a.zarr" / "K" / "c" / "1" / "1").write_bytes(b"\0" * 100)
    with pytest.raises(CorruptChunkError, match="truncated"):
        reader.read(1, 1, (100, 100))


def test_enospc_mid_build_is_one_line_and_the_store_resumes(tmp_path, capsys, monkeypatch):
    X = make_data(300, d=4)
    data = write_data(tmp_path / "d.zarr", X)
    store = str(tmp_path / "s.dkpca.zarr")
    argv = ["fit", data, "-k", "3", "--gamma", "0.2", "--store", store, "--dtype", "float64", "--chunk-size", "100",
            "--solver", "dense", "--gram", "store", "-q", "--no-progress"]
    real_write, calls = ChunkWriter.write, []

    def full_disk(self, coords, data, **kw):
        if self.path == "gram/K":
            calls.append(coords)
            if len(calls) > 3:  # the disk fills up after three blocks
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, coords, data, **kw)

    monkeypatch.setattr(ChunkWriter, "write", full_disk)
    err = cli_error(capsys, argv)
    assert "No space left on device" in err
    assert not list((tmp_path / "s.dkpca.zarr").rglob("*.partial"))
    monkeypatch.setattr(ChunkWriter, "write", real_write)
    assert main(argv) == 0
    model = dkpca.load(store)
    assert model.report["gram"]["reused_blocks"] == 3 and model.report["gram"]["computed_blocks"] == 3
    _agrees_with_reference(X, model)


def test_verify_says_what_a_rerun_recomputes(stored_fit, capsys):
    X, store, refit = stored_fit
    assert main(["verify", str(store)]) == 0
    assert "intact" in capsys.readouterr().out
    shutil.copyfile(_K(store, 0, 1), _K(store, 1, 1))
    (store / "gram" / "K" / "c" / "1" / "1.99-1.partial").write_bytes(b"x")
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert "block (1, 1): gram/K chunk (1, 1) not what was written there" in out
    assert "a rerun of the same fit recomputes them" in out and "1 temporary chunk files" in out
    assert _K(store, 1, 1).read_bytes() == _K(store, 0, 1).read_bytes()  # verify changes nothing


def test_a_K_chunk_whose_crc_trailer_alone_is_damaged_is_read_by_its_digest_and_verify_says_so(stored_fit, capsys):
    """Its values match the digest recorded when written (what every solver pass checks), so a fit reads it and no
    rerun rewrites it: verify said 'damaged; a rerun recomputes them' for ever before, now 'intact', naming it."""
    X, store, refit = stored_fit
    data = bytearray(_K(store, 0, 1).read_bytes())
    data[-1] ^= 0xFF  # the last byte of the 4-byte CRC-32C trailer
    _K(store, 0, 1).write_bytes(bytes(data))
    assert main(["verify", str(store)]) == 0
    out = capsys.readouterr().out
    assert "gram/K chunk (0, 1): CRC-32C trailer damaged, values intact" in out and "store " in out
    _agrees_with_reference(X, refit())
    ((I, J, exc),) = GramStore(FitStore.at(store)).damaged_blocks()  # still there: no rerun rewrites it
    assert (I, J) == (0, 1) and isinstance(exc, TrailerOnlyError)


@pytest.mark.parametrize(("damage", "said"), [
    (lambda p: _flip_bit(p, offset=8 * 3 + 7), "is corrupt (its CRC-32C checksum does not match)"),
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "is truncated (100 of 3204 bytes)"),
], ids=["flipped-bit", "truncated"])
def test_a_damaged_data_chunk_is_named_in_words_not_the_codecs_bytes(stored_fit, damage, said, capsys):
    """zarr's codec said 'Stored and computed checksum do not match. Stored: b'...'' for both, a truncated chunk
    too (it takes the last 4 bytes for the checksum)."""
    X, store, refit = stored_fit
    damage(store / "data" / "X" / "c" / "1" / "0")
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"chunk (1, 0) of array 'data/X' in '{store}' {said}" in out and "Stored" not in out


def test_verify_of_a_damaged_data_copy_names_the_fix(stored_fit, capsys):
    X, store, refit = stored_fit
    (store / "data" / "X" / "c" / "0" / "0").unlink()
    assert main(["verify", str(store)]) == 1
    assert "data/X: chunk (0, 0) of array 'data/X'" in capsys.readouterr().out


@pytest.mark.parametrize("lost", ["data/X/zarr.json", "data/zarr.json"])
def test_a_data_copy_without_its_metadata_is_named_and_copied_again(stored_fit, lost, capsys):
    """A KeyError traceback from verify, info, transform and even ``fit --overwrite`` before: now the data finding
    and the refusals name data/X and the fix, and ``--overwrite`` copies the data again (reference to 1e-8).
    Without the group's record (``data/zarr.json``) nothing but K says what data the copy held: a refit of the
    data K was built from copies it again and keeps K, as where ``data/`` was deleted whole (before: refused)."""
    X, store, refit = stored_fit
    (store / lost).unlink()
    assert main(["verify", str(store)]) == 1
    out = capsys.readouterr().out
    assert f"BAD  data/X: array 'data/X' in {str(store)!r} is missing (no {lost})" in out
    assert "model: its arrays verified, but it cannot load without its training data" in out
    assert "is missing" in cli_error(capsys, ["info", str(store)])
    with pytest.raises(CorruptChunkError, match=rf"is missing \(no {lost}\).*overwrite=True"):
        dkpca.fit(X + 1.0, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64")
    model = refit()
    assert model.report["gram"]["computed_blocks"] == 0
    _agrees_with_reference(X, model)
    assert all(f.ok for f in verify_store(str(store)))


@pytest.mark.parametrize("damage", ["delete", "cut"])
def test_a_refit_writes_lost_data_metadata_again_from_the_copys_record_and_keeps_k(stored_fit, damage, caplog):
    """Before: 'is missing (no data/X/zarr.json); rerun the fit with overwrite=True' -- all of K built again, though
    the group's record (the fingerprint, every chunk's digest) says what the copy holds.  Now a refit of the same
    input writes the array's metadata again (the chunk rows taken only where the input's first rows give the first
    recorded digest), every chunk is then read verified, and K is kept."""
    X, store, refit = stored_fit
    meta = store / "data" / "X" / "zarr.json"
    chunk = store / "data" / "X" / "c" / "0" / "0"
    before = chunk.read_bytes()
    if damage == "delete":
        meta.unlink()
    else:  # cut short: zarr cannot parse it
        meta.write_bytes(meta.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = refit()
    assert any("data/X/zarr.json) was lost or unreadable; written again" in r.getMessage() for r in caplog.records)
    assert model.report["gram"]["computed_blocks"] == 0 and chunk.read_bytes() == before
    _agrees_with_reference(X, model)
    assert all(f.ok for f in verify_store(str(store)))


def test_a_data_copy_deleted_whole_is_copied_again_by_a_rerun(stored_fit, capsys):
    """Nothing of it is left to mistrust: the input is copied again and K, of the same data, is reused."""
    X, store, refit = stored_fit
    shutil.rmtree(store / "data")
    assert main(["verify", str(store)]) == 1
    assert "BAD  data/X: array 'data/X'" in capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 0


@pytest.mark.parametrize("array", ["K", "row_sums", "partial_sums", "diag", "done"])
def test_a_gram_array_without_its_metadata_is_rebuilt(stored_fit, array, capsys):
    """verify ended in a KeyError traceback (and said "intact" without ``done``); now it names the array, and a
    rerun builds every block again."""
    X, store, refit = stored_fit
    (store / "gram" / array / "zarr.json").unlink()
    assert main(["verify", str(store)]) == 1
    assert f"BAD  gram: {array} missing (no zarr.json); a rerun of the fit builds every block" in \
        capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 6
    assert main(["verify", str(store)]) == 0


def test_a_gram_group_without_its_metadata_is_said_unused_and_rebuilt(stored_fit, capsys):
    """verify said 'no Gram matrix yet' over the chunks left there; now it says they are not used."""
    X, store, refit = stored_fit
    (store / "gram" / "zarr.json").unlink()
    assert main(["verify", str(store)]) == 0
    assert "ok   gram: gram/zarr.json is missing, so what is left under gram/ is not used; a rerun of the fit " \
        "builds K anew" in capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 6
    assert main(["verify", str(store)]) == 0


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_done_markers_lost_from_a_complete_gram_are_damage(stored_fit, damage, capsys):
    """verify said "ok ... 5 of 6 blocks built; a rerun builds the other 1" -- a killed build's words -- of a K a
    fit had completed; a rerun recomputes the block."""
    X, store, refit = stored_fit
    marker = store / "gram" / "done" / "c" / "1" / "2"
    if damage == "deleted":
        marker.unlink()
    else:
        marker.write_bytes(bytes(b ^ 0x40 for b in marker.read_bytes()))
    assert main(["verify", str(store)]) == 1
    assert "BAD  gram: K was complete, but the done markers of 1 of 6 blocks are missing or unreadable (deleted or " \
        "damaged since); a rerun of the same fit recomputes those blocks" in capsys.readouterr().out
    model = refit()
    _agrees_with_reference(X, model)
    assert model.report["gram"]["computed_blocks"] == 1
    assert main(["verify", str(store)]) == 0


def test_verify_of_something_else_is_one_line(tmp_path, capsys):
    cli_error(capsys, ["verify", str(tmp_path / "nothing.zarr")])


def _markers(group: zarr.Group, nb: int = 6) -> zarr.Array:
    """A done-marker array of ``nb`` x ``nb`` (chunks of one), every upper-triangular marker ``100 I + J + 1``."""
    done = create_array(group, "done", shape=(nb, nb), chunks=(1, 1), dtype="uint64", fill_value=0)
    for I in range(nb):
        for J in range(I, nb):
            done[I, J] = 100 * I + J + 1
    return done


def test_done_markers_are_read_from_their_files_and_a_damaged_one_counts_as_not_done(tmp_path):
    """On a local store the marker files are read directly: a missing, empty, truncated or bit-flipped marker
    is 0 (its block is recomputed), every other one its value, as zarr reads an intact copy in memory."""
    from dkpca.storage.gramstore import read_done_markers

    done = _markers(zarr.open_group(str(tmp_path), mode="w"))
    intact = read_done_markers(_markers(zarr.open_group(zarr.storage.MemoryStore(), mode="w")))  # zarr's path
    assert ChunkReader.of(str(tmp_path), done).raw_dir is not None and np.array_equal(read_done_markers(done), intact)
    c = tmp_path / "done" / "c"
    (c / "0" / "1").unlink()
    (c / "0" / "2").write_bytes(b"")
    (c / "1" / "3").write_bytes((c / "1" / "3").read_bytes()[:-1])
    _flip_bit(c / "2" / "4", offset=0, bit=3)
    damaged = {(0, 1), (0, 2), (1, 3), (2, 4)}
    got = read_done_markers(done)
    want = np.array([[0 if (I, J) in damaged else intact[I, J] for J in range(6)] for I in range(6)], np.uint64)
    assert np.array_equal(got, want) and np.count_nonzero(got) == 21 - 4


def test_done_markers_elsewhere_are_read_by_zarr_and_a_damaged_one_counts_as_not_done():
    """A store that is not local files (here in memory): zarr reads the markers, and an empty one is 0."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from dkpca.storage.gramstore import read_done_markers

    store = zarr.storage.MemoryStore()
    done = _markers(zarr.open_group(store, mode="w"))
    intact = read_done_markers(done)
    sync(store.set("done/c/0/1", default_buffer_prototype().buffer.from_bytes(b"")))
    got = read_done_markers(done)
    assert got[0, 1] == 0 and intact[0, 1] == 2
    got[0, 1] = intact[0, 1]
    assert np.array_equal(got, intact)


def test_row_sums_are_reduced_from_the_partial_sums_files_and_a_damaged_one_is_named(tmp_path):
    """``GramStore.finish`` adds each row block's partial sums (read from their files on a local store): the
    row sums of the whole K exactly (float64 sums of a few values); a partial sum changed after it was written
    fails its CRC-32C and stops the reduction naming its array and chunk (the fit then recomputes that block)."""
    from .conftest import gram_writers

    gs, out, blk, sums = gram_writers(tmp_path / "s.zarr")  # K of 100 rows in blocks of 50, all ones
    for I, J in [(0, 0), (0, 1), (1, 1)]:
        out.write_block(I, J, blk, sums, sums if I != J else None)
    gs.finish()
    assert np.array_equal(gs.open().row_sums, np.full(100, 100.0))
    zarr.open_group(str(tmp_path / "s.zarr" / "gram"), mode="r+").attrs["complete"] = False
    _flip_bit(tmp_path / "s.zarr" / "gram" / "partial_sums" / "c" / "1" / "0", offset=8 * 3 + 7)
    with pytest.raises(CorruptChunkError, match=r"chunk \(1, 0\) of array 'gram/partial_sums'"):
        gs.finish()


@pytest.mark.parametrize("key", ["kernel", "diag_sum"])
def test_edited_gram_attributes_are_refused_not_used(stored_fit, key, capsys):
    """K built with gamma 0.2 whose recorded kernel reads 0.3 would be reused by a gamma 0.3 fit; an edited trace
    would give other explained-variance ratios.  The Gram group's seal refuses both, naming the fix."""
    X, store, _ = stored_fit
    g = zarr.open_group(str(store / "gram"), mode="r+")
    g.attrs[key] = {**g.attrs["kernel"], "gamma": 0.3} if key == "kernel" else 500.0
    assert main(["verify", str(store)]) == 1
    assert "attributes that were edited" in capsys.readouterr().out
    gamma = 0.3 if key == "kernel" else 0.2
    with pytest.raises(CorruptChunkError, match="attributes that were edited.*overwrite=True"):
        dkpca.fit(X, n_components=3, gamma=gamma, store=store, chunk_size=100, dtype="float64", solver="dense",
                  gram="store")


def test_an_edited_model_attribute_is_refused_by_load(stored_fit):
    """The model's trace (explained-variance ratios) and grand mean are numbers no array digest covers."""
    X, store, _ = stored_fit
    group = zarr.open_group(str(store / FitStore.at(store).model_group()), mode="r+")
    group.attrs["trace"] = 1000.0
    with pytest.raises(DamagedModelError, match="attribute .trace.* was edited after it was written"):
        dkpca.load(store)


def test_an_edited_kernel_of_a_model_whose_k_is_recomputed_is_refused(tmp_path, capsys):
    """Where K is stored the model's kernel is checked against K's; where it is recomputed only the seal recorded
    with the model tells another valid kernel (gamma 0.3 for the fit's 0.2: other scores, no word) from its own."""
    X, store = make_data(200, d=4), tmp_path / "r.zarr"
    Y = make_data(10, seed=3, d=4)
    model = dkpca.fit(X, n_components=3, gamma=0.2, store=store, chunk_size=100, dtype="float64", solver="dense",
                      gram="recompute")
    np.testing.assert_array_equal(dkpca.load(store).transform(Y), model.transform(Y))  # intact: loads as it was
    group = zarr.open_group(str(store / FitStore.at(store).model_group()), mode="r+")
    group.attrs["kernel"] = {**group.attrs["kernel"], "gamma": 0.3}
    with pytest.raises(DamagedModelError, match="'kernel'.*0.3.* was edited after it was written"):
        dkpca.load(store)
    assert main(["verify", str(store)]) == 1
    assert "model field 'kernel' was edited after it was written" in capsys.readouterr().out


def test_an_edited_kernel_of_a_sparse_model_is_refused(tmp_path, capsys):
    path = tmp_path / "sp.zarr"
    SparseKernelPCA(n_components=2, kernel="rbf", gamma=0.5, random_state=0, max_iter=30).fit(
        make_data(80, d=3)).save(path)
    group = zarr.open_group(str(path / FitStore.at(path).model_group("sparse_model")), mode="r+")
    group.attrs["kernel"] = {**group.attrs["kernel"], "gamma": 0.3}
    with pytest.raises(DamagedModelError, match="'kernel'.* was edited after it was written"):
        SparseKernelPCA.load(path)
    assert main(["verify", str(path)]) == 1
    assert "sparse_model field 'kernel' was edited" in capsys.readouterr().out


@pytest.mark.parametrize("field, value", [("center", False), ("noise_variance", 0.5)])
def test_an_edited_parameter_of_a_sparse_model_is_refused(tmp_path, capsys, field, value):
    """A sparse model's noise variance and centring are what its transform and likelihood compute with: an edited
    one (another valid value: other scores, no word) is refused by load and verify alike."""
    path = tmp_path / "sp.zarr"
    SparseKernelPCA(n_components=2, kernel="rbf", gamma=0.5, noise_variance=0.05, center=True, random_state=0,
                    max_iter=30).fit(make_data(80, d=3)).save(path)
    SparseKernelPCA.load(path)  # intact: loads
    group = zarr.open_group(str(path / FitStore.at(path).model_group("sparse_model")), mode="r+")
    group.attrs["params"] = {**group.attrs["params"], field: value}
    with pytest.raises(DamagedModelError, match="attribute 'params'.* was edited after it was written"):
        SparseKernelPCA.load(path)
    assert main(["verify", str(path)]) == 1
    assert "'params'" in capsys.readouterr().out
