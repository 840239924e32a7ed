"""A user's Zarr array (or HDF5 dataset, or netCDF-4 variable) with chunks not in its store: each reads as the
fill value, so dkpca says so.

zarr stores no chunk equal to the fill value, so an absent chunk may be data -- or the part a killed writer
never wrote, which was fitted as rows of zeros without a word.  Not refused: warned (AbsentChunksWarning), with
the count, before any work; the CLI says it as one ``dkpca: warning:`` line.
"""

from __future__ import annotations

import os
import subprocess
import warnings

import h5netcdf.legacyapi as nc4
import h5py
import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.io.formats import AbsentChunksWarning

from .conftest import dkpca_cmd, make_data


def _array(path, zarr_format=3, absent=(3,)):
    """A 300 x 4 array in chunks of 30 rows written in full, then the chunk files of ``absent`` row chunks removed."""
    arr = zarr.create_array(str(path), shape=(300, 4), chunks=(30, 4), dtype="f8", zarr_format=zarr_format)
    arr[:] = make_data(300, seed=5, d=4)
    for c in absent:
        os.remove(os.path.join(str(path), *(("c", str(c), "0") if zarr_format == 3 else (f"{c}.0",))))
    return str(path)


def _said(source) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dkpca.plan(source, 2, measure=False)
    return [str(w.message) for w in caught if issubclass(w.category, AbsentChunksWarning)]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_absent_chunk_is_warned_of_with_the_count(tmp_path, zarr_format):
    said = _said(_array(tmp_path / "x.zarr", zarr_format, absent=(3, 7)))
    assert said and "2 of 10 chunks of the Zarr array are not stored" in said[0] and "fill value 0.0" in said[0]


def _sharded(path, rows: int, written: int, index_location: str = "end") -> str:
    """A ``rows`` x 4 Zarr v3 array in chunks of 10 rows, shards of 100, its first ``written`` rows written."""
    codec = zarr.codecs.ShardingCodec(chunk_shape=(10, 4), index_location=index_location)
    arr = zarr.create_array(str(path), shape=(rows, 4), chunks=(100, 4), serializer=codec, compressors=None,
                            dtype="f8")
    assert (arr.chunks, arr.shards) == ((10, 4), (100, 4))
    arr[:written] = make_data(rows, seed=5, d=4)[:written]
    return str(path)


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_a_shard_written_part_way_is_counted_by_its_chunks(tmp_path, index_location):
    """Before: no warning (zarr counts a stored shard as all of its chunks): 180 rows of zeros fitted."""
    said = _said(_sharded(tmp_path / "x.zarr", 200, 20, index_location))
    assert said and "18 of 20 chunks of the Zarr array are not stored" in said[0]


def test_a_sharded_array_written_in_full_says_nothing_past_its_edge(tmp_path):
    """The last shard's chunks past the array's 205 rows are never stored: no gap."""
    assert _said(_sharded(tmp_path / "x.zarr", 205, 205)) == []
    said = _said(_sharded(tmp_path / "y.zarr", 205, 200))
    assert said and "1 of 21 chunks of the Zarr array are not stored" in said[0]


def test_an_array_written_in_full_says_nothing(tmp_path):
    assert _said(_array(tmp_path / "x.zarr", absent=())) == []


def test_an_array_object_and_a_group_member_are_checked_alike(tmp_path):
    path = _array(tmp_path / "g.zarr" / "X", absent=(0,))
    zarr.open_group(str(tmp_path / "g.zarr"), mode="a")  # the group's metadata, above the array
    assert _said(str(tmp_path / "g.zarr")) and _said(zarr.open_array(path))


def test_the_cli_says_it_as_one_warning_line(tmp_path):
    path = _array(tmp_path / "x.zarr")
    r = subprocess.run(dkpca_cmd("plan", path, "-k", "2", "--no-measure"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "not stored" in ln]
    assert len(lines) == 1 and lines[0].startswith("dkpca: warning: input ")
    with pytest.warns(AbsentChunksWarning):  # and fits the array as zarr reads it
        assert np.isfinite(dkpca.fit(path, 2, store=str(tmp_path / "s.zarr")).eigenvalues_).all()


def test_a_fit_s_warning_comes_before_its_progress_lines(tmp_path, capsys):
    """Before: after the lines of copying X into the store (progress lines are no log records, which released the
    warnings held while the input was checked): the data warned of was copied by then."""
    assert main(["fit", _array(tmp_path / "x.zarr"), "-k", "2", "--store", str(tmp_path / "s.zarr")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("dkpca: warning: input ") and "not stored" in lines[0], lines[:3]
    assert any("copying X into the store" in ln for ln in lines[1:])


def _h5(path, write_rows: int, chunks=(30, 4)):
    """A 300 x 4 HDF5 dataset (chunked, or contiguous with ``chunks=None``) of which the first rows are written."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("X", shape=(300, 4), chunks=chunks, dtype="f8")
        if write_rows:
            d[:write_rows] = make_data(300, seed=5, d=4)[:write_rows]
    return str(path)


def test_hdf5_chunks_never_written_are_warned_of_with_the_count(tmp_path):
    """Before: fitted as rows of the fill value without a word (h5py stores every chunk written, zeros too)."""
    said = _said(_h5(tmp_path / "x.h5", write_rows=240))
    assert said and "2 of 10 chunks of the HDF5 dataset are not stored" in said[0] and "never written" in said[0]
    assert _said(_h5(tmp_path / "full.h5", write_rows=300)) == []


def _netcdf4(path, write_rows: int) -> str:
    """A 300 x 4 int32 netCDF-4 variable 'X' in chunks of 30 rows, no ``_FillValue`` attribute (netCDF's default
    fill, as netCDF4-python and h5netcdf write it), its first ``write_rows`` rows written."""
    with nc4.Dataset(str(path), "w") as f:
        f.createDimension("n", 300)
        f.createDimension("f", 4)
        v = f.createVariable("X", "i4", ("n", "f"), chunksizes=(30, 4))
        v[:write_rows] = np.arange(write_rows * 4, dtype="i4").reshape(write_rows, 4) % 7
    return f"{path}:X"


def test_netcdf4_chunks_never_written_are_warned_of_with_the_count(tmp_path):
    """Before: fitted as rows of -2147483647 without a word (xarray masks a fill only where _FillValue is named;
    the same bytes read as HDF5 were warned of)."""
    said = _said(_netcdf4(tmp_path / "x.nc", write_rows=60))
    assert said and "8 of 10 chunks of the netCDF-4 variable are not stored" in said[0]
    assert "-2147483647" in said[0]
    assert _said(_netcdf4(tmp_path / "full.nc", write_rows=300)) == []


def test_a_contiguous_hdf5_dataset_never_written_is_warned_of(tmp_path):
    assert "1 of 1 chunks of the HDF5 dataset are not stored" in _said(_h5(tmp_path / "x.h5", 0, chunks=None))[0]
    assert _said(_h5(tmp_path / "y.h5", 300, chunks=None)) == []
