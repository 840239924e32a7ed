"""The store's direct chunk writer must produce exactly what zarr would."""

import os

import numpy as np
import pytest
import zarr

from dkpca.storage import FORMAT, LOCK_NAME, ChunkReader, ChunkWriter, FitStore, chunk_file, write_direct


@pytest.mark.parametrize("compressors", [None, "auto"])
def test_chunk_writer_round_trips_through_zarr(tmp_path, rng, compressors):
    path = str(tmp_path / "a.zarr")
    arr = zarr.create_array(path, shape=(10, 7), chunks=(4, 4), dtype="float32", fill_value=0.0,
                            compressors=compressors)
    w = ChunkWriter.of(path, arr)
    # raw files only for an uncompressed local array
    assert (w.raw_dir is not None) == (compressors is None)
    want = rng.standard_normal((10, 7)).astype(np.float32)
    seen = []
    for I in range(3):
        for J in range(2):
            blk = np.ascontiguousarray(want[4 * I:4 * I + 4, 4 * J:4 * J + 4])
            w.write((I, J), blk, visit=lambda s, e: seen.append(e - s), strip_bytes=8)
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[:], want)
    # every row was visited exactly once, in strips
    assert sum(seen) == 6 * 4 - 2 * 2 and max(seen) <= 2
    leftovers = [p for p in (tmp_path / "a.zarr").rglob("*") if p.name.endswith(".partial")]
    assert leftovers == []


def test_chunk_file_only_for_plain_layout(tmp_path):
    plain = zarr.create_array(str(tmp_path / "p.zarr"), shape=(4, 4), chunks=(2, 2), dtype="f4", compressors=None)
    packed = zarr.create_array(str(tmp_path / "z.zarr"), shape=(4, 4), chunks=(2, 2), dtype="f4")
    assert chunk_file(plain, (1, 0)).endswith(os.path.join("c", "1", "0"))
    assert chunk_file(packed, (1, 0)) is None


@pytest.mark.parametrize("checksum", [True, False], ids=["crc32c", "no-checksum"])
@pytest.mark.parametrize("edge", [256, 250])  # 256^2*4 bytes is a multiple of 4 KiB, 250^2*4 is not
def test_direct_io_writer_round_trips(tmp_path, rng, edge, checksum):
    """O_DIRECT chunks (with the CRC trailer after the aligned part) read back through zarr, which checks it."""
    from dkpca.linalg import scratch
    from dkpca.storage import checksum_codecs

    path = str(tmp_path / "d.zarr")
    arr = zarr.create_array(path, shape=(2 * edge, edge), chunks=(edge, edge), dtype="float32", fill_value=0.0,
                            compressors=checksum_codecs() if checksum else None)
    w = ChunkWriter.of(path, arr, direct=True)
    want = rng.standard_normal((2 * edge, edge)).astype(np.float32)
    rows = []
    for I in range(2):
        buf = scratch("test-direct", (edge, edge), np.float32)  # page-aligned, as the Gram build's blocks
        assert buf.ctypes.data % 4096 == 0
        buf[:] = want[I * edge:(I + 1) * edge]
        w.write((I, 0), buf, visit=lambda s, e: rows.append(e - s))
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[:], want)
    assert sum(rows) == 2 * edge


def test_write_direct_reports_unaligned_buffers(tmp_path):

    a = np.zeros(4096 + 1, np.uint8)[1:]  # certainly not page-aligned
    assert write_direct(str(tmp_path / "x"), a) is False


def test_store_created_beside_its_lock_and_foreign_dirs_refused(tmp_path):

    path = str(tmp_path / "new.dkpca.zarr")
    store = FitStore.at(path)
    with store.lock():  # creates the directory and the lock first
        root = store.open_for_write()
        assert os.path.exists(os.path.join(path, LOCK_NAME))  # creating the store kept the lock
        assert root.attrs["format"] == FORMAT
    assert not os.path.exists(os.path.join(path, LOCK_NAME))
    store.check_target()  # ours: fine
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a dkpca store"):
        FitStore.at(foreign).check_target()
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]  # nothing written


def test_scratch_buffers_are_reused_until_retired():
    """A thread gets the same memory for a purpose until retire(); then a fresh buffer, in every thread."""
    import threading

    from dkpca.linalg import retire, scratch

    first = scratch("test-retire", (64, 64), np.float32)
    assert np.shares_memory(first, scratch("test-retire", (64, 64), np.float32))
    other: dict = {}
    t = threading.Thread(target=lambda: other.setdefault("buf", scratch("test-retire", (64, 64), np.float32)))
    t.start()
    t.join()
    assert not np.shares_memory(first, other["buf"])  # per thread
    retire()
    assert not np.shares_memory(first, scratch("test-retire", (64, 64), np.float32))


def test_reading_a_stored_block_drops_the_threads_retired_buffers(tmp_path):
    """A pass maps its blocks without buffers: the read itself lets a finished build's buffers go."""
    import gc
    import weakref

    from dkpca.linalg import retire, scratch
    from dkpca.storage import checksum_codecs

    path = str(tmp_path / "r.zarr")
    arr = zarr.create_array(path, shape=(64, 64), chunks=(64, 64), dtype="float32", fill_value=0.0,
                            compressors=checksum_codecs())
    ChunkWriter.of(path, arr).write((0, 0), np.ones((64, 64), np.float32))
    root = scratch("test-tidy", (64, 64), np.float32)
    while root.base is not None:
        root = root.base  # the allocation the thread's buffer table keeps alive
    held = weakref.ref(root)
    del root
    gc.collect()
    assert held() is not None
    retire()
    ChunkReader.of(path, arr).read(0, 0, (64, 64))
    gc.collect()
    assert held() is None


@pytest.mark.parametrize("value, expected", [(True, True), ("False", False), ("auto", False)])
def test_dask_config_direct_io_forces_or_leaves_the_size_rule(value, expected):
    import dask

    from dkpca.storage import use_direct_io

    with dask.config.set({"dkpca.direct-io": value}):
        assert use_direct_io(1 << 20) is expected  # 1 MiB: buffered by the size rule


def test_a_bad_dask_config_direct_io_is_refused_before_the_store_is_created(tmp_path, rng):
    import dask
    import dask.array as da

    from dkpca.gram import build_gram
    from dkpca.io import scan
    from dkpca.kernels import RBF

    Xd = da.from_array(rng.standard_normal((60, 3)), chunks=(30, 3))
    with dask.config.set({"dkpca.direct-io": "maybe"}), pytest.raises(ValueError, match="dkpca.direct-io"):
        build_gram(FitStore.at(tmp_path / "s.zarr"), Xd, RBF(0.1), scan(Xd))
    assert not (tmp_path / "s.zarr").exists()
