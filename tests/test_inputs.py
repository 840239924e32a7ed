"""Input formats: every file format dkpca reads gives the fit of the same data as a numpy array.

Reference: ``dkpca.fit`` of the numpy array itself (float64 Gram matrix, the
dense solver).  A reader changes nothing but where the values come from, so
eigenvalues agree to 1e-10 relative (in practice exactly: the same float64
values reach the same deterministic computation) and projections to 1e-10
absolute.  CSV is written with 17 significant digits, which round-trips
float64 exactly.
"""

import pickle
import re
import subprocess
import sys

import dask.array as da
import dask.dataframe as dd
import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import dkpca
from dkpca.io import READABLE, as_dask, open_input

from .conftest import cli_error, dkpca_cmd, make_data, write_data

N, D, K, GAMMA = 240, 4, 3, 0.2


def _npy(path, X):
    np.save(path / "x.npy", X)
    return str(path / "x.npy")


def _h5(path, X):
    with h5py.File(path / "x.h5", "w") as f:
        f.create_dataset("group/X", data=X, chunks=(64, X.shape[1]))
        f.create_dataset("other", data=np.ones(3))  # 1-D: not a candidate
    return str(path / "x.h5") + ":/group/X"


def _netcdf4(path, X):
    xr.Dataset({"features": (("sample", "feature"), X)}).to_netcdf(path / "x.nc", engine="h5netcdf")
    return str(path / "x.nc") + ":features"


def _netcdf3(path, X):
    # netCDF classic (scipy's backend): another of xarray's readers, chosen by the file's content
    xr.Dataset({"features": (("sample", "feature"), X)}).to_netcdf(path / "x3.nc", engine="scipy")
    return str(path / "x3.nc") + ":features"


def _parquet(path, X):
    pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).to_parquet(path / "x.parquet")
    return str(path / "x.parquet")


def _csv(path, X, name="x.csv"):
    pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).to_csv(path / name, index=False,
                                                                         float_format="%.17g")
    return str(path / name)


def _csv_no_header(path, X):
    np.savetxt(path / "x.csv", X, delimiter=",", fmt="%.17g")
    return str(path / "x.csv")


def _zarr(path, X):
    return write_data(path / "x.zarr", X)


def _npy_big_endian(path, X):
    np.save(path / "x.npy", X.astype(">f8"))
    return str(path / "x.npy")


def _parquet_pandas_default(path, X):
    # integer column names and a named RangeIndex: what dask.dataframe's reader failed on (KeyError)
    pd.DataFrame(X, index=pd.RangeIndex(len(X), name="row")).to_parquet(path / "x.parquet")
    return str(path / "x.parquet")


def _parquet_index_column(path, X):
    # an index pandas writes as a column ('id'): restored as the index by pandas, so not fitted
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])], index=pd.Index(np.arange(len(X)) * 7,
                                                                                          name="id"))
    frame.to_parquet(path / "x.parquet")
    return str(path / "x.parquet")


def _parquet_directory(path, X):
    # twelve parts: part.10 and part.11 come after part.9 (dask's order), as their rows do
    (path / "parts").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(X)), 12)):
        pd.DataFrame(X[rows], columns=[f"f{j}" for j in range(X.shape[1])]).to_parquet(path / f"parts/part.{i}.parquet")
    (path / "parts" / "_SUCCESS").write_text("")
    return str(path / "parts")


def _csv_pandas_default(path, X):
    # the header DataFrame(X).to_csv writes: 0,1,...,d-1 -- column names, not a row of data
    pd.DataFrame(X).to_csv(path / "x.csv", index=False, float_format="%.17g")
    return str(path / "x.csv")


def _csv_gzip(path, X):
    return _csv(path, X, name="x.csv.gz")  # compressed: pandas infers gzip from the name


def _csv_quoted_commented(path, X):
    # every field quoted, no header, comment lines before the rows
    rows = [",".join(f'"{v:.17g}"' for v in row) for row in X]
    (path / "x.csv").write_text("# written by hand\n\n# units: none\n" + "\n".join(rows) + "\n")
    return str(path / "x.csv")


WRITERS = {"npy": _npy, "hdf5": _h5, "netcdf4": _netcdf4, "netcdf3": _netcdf3, "parquet": _parquet, "csv": _csv,
           "csv-no-header": _csv_no_header, "zarr": _zarr, "npy-big-endian": _npy_big_endian,
           "parquet-pandas-default": _parquet_pandas_default, "parquet-index-column": _parquet_index_column,
           "parquet-directory": _parquet_directory, "csv-pandas-default": _csv_pandas_default, "csv-gzip": _csv_gzip,
           "csv-quoted-commented": _csv_quoted_commented}


@pytest.fixture(scope="module")
def data():
    return make_data(N, seed=3, d=D)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    return dkpca.fit(data, n_components=K, gamma=GAMMA, dtype="float64",
                     store=tmp_path_factory.mktemp("ref") / "ref.dkpca.zarr")


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_format_fits_like_numpy(tmp_path, data, reference, fmt):
    source = WRITERS[fmt](tmp_path, data)
    model = dkpca.fit(source, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    Z = model.transform(source)
    assert isinstance(Z, np.ndarray)  # a path in, numpy out
    np.testing.assert_allclose(Z, reference.transform(data), atol=1e-10)


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_format_is_read_blockwise(tmp_path, fmt):
    """The graph holds readers, not data: its pickle is far smaller than the array, and rows come in blocks."""
    X = make_data(20000, seed=1, d=D)
    Xd = as_dask(WRITERS[fmt](tmp_path, X), block_rows=5000)
    assert Xd.chunks[0] == (5000,) * 4
    graph = pickle.dumps(dict(Xd.__dask_graph__()))
    assert len(graph) < X.nbytes / 20, f"{len(graph)} graph bytes for {X.nbytes} data bytes"
    np.testing.assert_array_equal(Xd[5000:10000].compute(), X[5000:10000])


@pytest.mark.parametrize("fmt", ["npy", "hdf5", "netcdf4", "parquet", "csv"])
def test_changed_file_is_refused_by_the_store(tmp_path, data, fmt):
    source = WRITERS[fmt](tmp_path, data)
    store = tmp_path / "s.dkpca.zarr"
    dkpca.fit(source, n_components=K, gamma=GAMMA, store=store)
    changed = data.copy()
    changed[17, 2] += 1.0
    assert WRITERS[fmt](tmp_path, changed) == source
    with pytest.raises(ValueError, match="fitted on different data"):
        dkpca.fit(source, n_components=K, gamma=GAMMA, store=store)


def test_default_store_lies_beside_the_file_and_names_the_member(tmp_path, data):
    source = _h5(tmp_path, data)
    model = dkpca.fit(source, n_components=K, gamma=GAMMA)
    assert model.store == str(tmp_path / "x.h5.group.X.dkpca.zarr")
    assert model.temporary is None


def test_plan_reads_a_file_input(tmp_path, data):
    p = dkpca.plan(_csv(tmp_path, data), n_components=K, measure=False)
    assert (p.n_samples, p.n_features) == (N, D) and p.store == str(tmp_path / "x.csv.dkpca.zarr")


def test_member_is_found_when_it_is_the_only_2d_one(tmp_path, data, reference):
    path = _h5(tmp_path, data).split(":")[0]
    model = dkpca.fit(path, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


def test_an_hdf5_dataset_whose_name_holds_a_colon_is_read(tmp_path, data):
    """Before: 'f.h5:/a:b' was split at its last colon only, and the file that is there was said not to exist."""
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["a:b"], f["other"] = data, np.zeros_like(data)
    np.testing.assert_array_equal(as_dask(f"{tmp_path}/f.h5:/a:b").compute(), data)


def test_a_file_url_names_an_hdf5_member_as_its_path_does(tmp_path, data):
    """Before: 'file:///.../x.h5:/group/X' was refused: "No such file or directory: '.../x.h5:/group/X'"."""
    np.testing.assert_array_equal(as_dask("file://" + _h5(tmp_path, data)).compute(), data)


# -- refusals -------------------------------------------------------------------------------------


def _unknown_file(path):
    (path / "notes.txt").write_text("not data")
    return str(path / "notes.txt")


def _empty_directory(path):
    (path / "empty").mkdir()
    return str(path / "empty")


@pytest.mark.parametrize("make", [_unknown_file, _empty_directory])
def test_unreadable_input_names_the_formats(tmp_path, make):
    with pytest.raises(ValueError) as err:
        dkpca.fit(make(tmp_path), store=tmp_path / "s.dkpca.zarr")
    assert READABLE in str(err.value)
    assert "StorePath" not in str(err.value) and err.value.__cause__ is None


def test_cli_unreadable_input_is_one_line(tmp_path):
    source = _empty_directory(tmp_path)
    proc = subprocess.run(dkpca_cmd("fit", source, "--store", str(tmp_path / "s.dkpca.zarr")), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("dkpca: error: ") and READABLE in line and "StorePath" not in line


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_non_numeric_columns_are_refused_by_name(tmp_path, suffix):
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "label": ["x", "y", "z"], "b": [0.5, 0.1, 0.2]})
    source = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        df.to_csv(source, index=False)
    else:
        df.to_parquet(source)
    with pytest.raises(ValueError, match=r"column\(s\) \['label'\] of input .* are not numeric"):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_csv_separated_by_something_else_is_refused_naming_the_separator(tmp_path, sep):
    """Before: "column(s) ['a;b;c'] are not numeric ... Drop or encode them first": the fix for text, not this."""
    source = tmp_path / "t.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.5], "c": [0.5, 0.1, 0.2]}).to_csv(source, sep=sep,
                                                                                          index=False)
    with pytest.raises(ValueError, match=re.escape(f"look separated by {sep!r}, not commas: write it with commas")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")
    assert not (tmp_path / "s.dkpca.zarr").exists()


def test_a_csv_row_with_a_field_missing_is_named_by_row_and_column(tmp_path):
    """It reads as NaN: the message named the row only, and not why a CSV holds a NaN."""
    source = tmp_path / "t.csv"
    source.write_text("a,b,c\n1,2,3\n4,5,6\n7,8\n0.5,1,2\n")
    with pytest.raises(ValueError, match=re.escape("(first in row 2, column 2); remove or impute non-finite values "
                                                   "before fitting (a CSV's empty or missing field, a "
                                                   "Parquet null, a data frame's NA or a netCDF fill value "
                                                   "reads as NaN)")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


def test_a_parquet_null_is_named_by_row_and_column(tmp_path):
    source = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1.0, 2.0, None, 4.0], "b": [1, 2, 3, None]}, dtype="Float64").to_parquet(source)
    with pytest.raises(ValueError, match=re.escape("(first in row 2, column 0)")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


def test_a_partitioned_parquet_dataset_is_refused_naming_its_keys(tmp_path, data):
    frame = pd.DataFrame(data, columns=[f"f{i}" for i in range(D)]).assign(night=np.arange(N) % 3)
    frame.to_parquet(tmp_path / "survey", partition_cols=["night"])
    with pytest.raises(ValueError, match=re.escape("is a partitioned Parquet dataset (directories ['night'] = value)")):
        dkpca.fit(str(tmp_path / "survey"), store=tmp_path / "s.dkpca.zarr")


def test_parquet_parts_with_other_columns_are_refused_naming_the_part(tmp_path, data):
    (tmp_path / "parts").mkdir()
    pd.DataFrame(data[:100], columns=["a", "b", "c", "d"]).to_parquet(tmp_path / "parts/part.0.parquet")
    pd.DataFrame(data[100:], columns=["a", "b", "c", "e"]).to_parquet(tmp_path / "parts/part.1.parquet")
    with pytest.raises(ValueError, match=r"its part '.*part\.1\.parquet' has columns \['a', 'b', 'c', 'e'\]"):
        dkpca.fit(str(tmp_path / "parts"), store=tmp_path / "s.dkpca.zarr")


def test_a_structured_npy_is_refused_naming_its_fields(tmp_path):
    """Before: 'X must be 2-D (n_samples, n_features); got shape (300,)' -- a record's fields are its columns."""
    records = np.zeros(300, dtype=[("a", "f8"), ("b", "f8")])
    np.save(tmp_path / "r.npy", records)
    with pytest.raises(ValueError, match=re.escape("structured dtype with fields ['a', 'b']; stack its numeric")):
        dkpca.fit(str(tmp_path / "r.npy"), store=tmp_path / "s.dkpca.zarr")


def test_a_file_without_a_2d_member_says_what_it_holds(tmp_path):
    """Before: "holds 0 2-D datasets []; name one, e.g. 'r.h5:X'" -- naming one would not have helped."""
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f["R"] = np.zeros(300, dtype=[("a", "f8"), ("b", "f8")])
        f["g/t"] = np.ones(3)
    with pytest.raises(ValueError, match=re.escape("holds no 2-D dataset of numbers (its datasets: /R of records "
                                                   "['a', 'b'], /g/t (3,)); write the data as one 2-D")):
        dkpca.fit(str(tmp_path / "r.h5"), store=tmp_path / "s.dkpca.zarr")


def test_a_2d_member_beside_a_larger_one_is_not_picked(tmp_path):
    """Before: a cube's 2-D bounds, the only 2-D variable, were fitted quietly (180 samples of 2 features)."""
    xr.Dataset({"t": (("time", "lat", "lon"), np.zeros((4, 180, 3))),
                "lat_bnds": (("lat", "nv"), np.zeros((180, 2)))}).to_netcdf(tmp_path / "c.nc", engine="h5netcdf")
    with pytest.raises(ValueError, match=re.escape("holds one 2-D variable 'lat_bnds' (180, 2) beside the larger "
                                                   "['t']; name the one to fit")):
        dkpca.fit(str(tmp_path / "c.nc"), store=tmp_path / "s.dkpca.zarr")


def test_the_only_2d_member_beside_1d_ones_is_picked(tmp_path, data):
    with h5py.File(tmp_path / "l.h5", "w") as f:
        f["features"], f["labels"] = data, np.arange(len(data))
    np.testing.assert_array_equal(as_dask(str(tmp_path / "l.h5")).compute(), data)


def test_a_member_named_x_is_picked_whatever_its_shape(tmp_path, data):
    """As in a Zarr group: a 1-D X is refused by its shape, not passed over for another member."""
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["X"], f["data"] = np.arange(len(data)), data
    with pytest.raises(ValueError, match=re.escape("x.h5': the dataset '/X' has shape (240,); dkpca fits a 2-D "
                                                   "dataset")):
        dkpca.fit(str(tmp_path / "x.h5"), store=tmp_path / "s.dkpca.zarr")


@pytest.mark.parametrize("suffix, compress", [(".gz", "gzip"), (".bz2", "bz2"), (".xz", "lzma")])
@pytest.mark.parametrize("kept", [0.5, 0.9])
def test_a_compressed_csv_cut_short_is_named(tmp_path, capsys, suffix, compress, kept):
    """A .csv.gz (bz2, xz) whose writer did not finish: one line saying so (before: a traceback ending in
    "EOFError: Compressed file ended before the end-of-stream marker was reached", exit 1)."""
    import importlib

    from dkpca.cli import main

    text = pd.DataFrame(make_data(500, d=20)).to_csv(index=False).encode()
    whole = importlib.import_module(compress).compress(text)
    path = tmp_path / f"x.csv{suffix}"
    path.write_bytes(whole[: int(len(whole) * kept)])
    with pytest.raises(ValueError, match="is cut short: its compressed data ends before the end of the stream"):
        as_dask(str(path))
    assert main(["fit", str(path), "-k", "2", "--store", str(tmp_path / "s.dkpca.zarr")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dkpca: error: ") and err.count("\n") == 1 and "is cut short" in err


def test_a_named_member_not_2d_suggests_the_file_with_another_member(tmp_path, data):
    """'f.h5:/oned' of shape (n,): the suggestion names the file and another member ('f.h5:name'), which works
    with a real name; before: 'f.h5:/oned:name', which does not exist."""
    path = str(tmp_path / "f.h5")
    with h5py.File(path, "w") as f:
        f["oned"], f["good"] = data[:, 0], data
    with pytest.raises(ValueError, match=re.escape(f"or name another, e.g. '{path}:name'.")):
        as_dask(f"{path}:/oned")
    np.testing.assert_array_equal(as_dask(f"{path}:good").compute(), data)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_a_zarr_group_read_past_its_stale_consolidated_metadata_fits_every_row(tmp_path, data, zarr_format):
    """Before: rows appended after ``consolidate_metadata`` (xarray's to_zarr consolidates) were dropped without a
    word: the group path fitted the consolidated copy's 120 rows, its array path all 240."""
    path = str(tmp_path / "g.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    group.create_array("X", shape=(120, D), chunks=(40, D), dtype="f8")[...] = data[:120]
    zarr.consolidate_metadata(path)
    zarr.open_array(path + "/X", mode="r+").append(data[120:])
    np.testing.assert_array_equal(as_dask(path).compute(), data)


def test_a_zarr_group_s_only_array_not_2d_is_named_with_the_groups_beside_it(tmp_path, data):
    """Before: 'X must be 2-D ...; got shape (3,)' -- of an array named 'other', the data in a subgroup."""
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.create_group("sub").create_array("X", data=data)
    g.create_array("other", data=np.ones(3))
    with pytest.raises(ValueError, match=re.escape("its array 'other' has shape (3,); dkpca fits a 2-D array "
                                                   f"(n_samples, n_features) -- pass the data array's path, e.g. "
                                                   f"'{tmp_path / 'g.zarr'}/sub/X' (its groups: ['sub'])")):
        dkpca.fit(str(tmp_path / "g.zarr"), store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_array_equal(as_dask(str(tmp_path / "g.zarr/sub/X")).compute(), data)
    del g["other"]
    with pytest.raises(ValueError, match=re.escape("holds no array -- pass the data array's path")):
        dkpca.fit(str(tmp_path / "g.zarr"), store=tmp_path / "s.dkpca.zarr")


def test_a_zarr_member_named_the_hdf5_way_is_told_its_path(tmp_path, data):
    """Before: "input 'g.zarr:sub/X' does not exist; dkpca reads Zarr, ..." -- of a group holding sub/X."""
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_group("sub").create_array("X", data=data)
    with pytest.raises(FileNotFoundError, match=re.escape(f"a Zarr group's member is named by its path: "
                                                          f"'{tmp_path / 'g.zarr'}/sub/X'")):
        dkpca.fit(str(tmp_path / "g.zarr") + ":sub/X", store=tmp_path / "s.dkpca.zarr")


def test_member_must_exist_and_be_named_when_ambiguous(tmp_path, data):
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a"], f["b"] = data, data
    with pytest.raises(ValueError, match=r"holds 2 2-D datasets \['/a', '/b'\]; name the one to fit"):
        dkpca.fit(str(tmp_path / "two.h5"), store=tmp_path / "s.dkpca.zarr")
    with pytest.raises(ValueError, match=r"no dataset '/c'; its datasets are \['/a', '/b'\]"):
        dkpca.fit(str(tmp_path / "two.h5") + ":/c", store=tmp_path / "s.dkpca.zarr")


def test_a_damaged_hdf5_link_name_is_listed_as_it_decodes(tmp_path, data):
    """Before: h5py gives a name that is no longer UTF-8 as bytes, and listing the file's datasets raised
    ``TypeError: can only concatenate str (not "bytes") to str`` (found by an input-damage fuzzer)."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f["features_matrix"] = data
    raw = bytearray(path.read_bytes())
    at = raw.index(b"features_matrix")
    raw[at + 1] |= 0x80  # 'e' -> 0xe5: a lead byte without its continuation
    path.write_bytes(bytes(raw))
    listed = r"its datasets are \['/f\ufffdatures_matrix'\]"
    with pytest.raises(ValueError, match=r"no dataset '/features_matrix'; " + listed):
        dkpca.fit(f"{path}:/features_matrix")


def test_a_damaged_hdf5_chunk_is_refused_naming_the_file_and_dataset(tmp_path, data):
    """Before: h5py's ``OSError`` (no errno: HDF5's own) from a dask task, a traceback through the CLI."""
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=data, chunks=(10, data.shape[1]), compression="gzip")
        info = f["X"].id.get_chunk_info(1)
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset:info.byte_offset + info.size] = b"\xff" * info.size
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"HDF5 file '{re.escape(str(path))}': dataset '/X' cannot be read \("):
        dkpca.fit(f"{path}:/X")


def test_an_hdf5_fill_value_is_read_only_where_chunks_were_never_written(tmp_path, data, monkeypatch):
    """h5py crashed the process (SIGSEGV) reading a damaged fill-value message: a dataset whose chunks are all
    written (the common case) no longer reads it."""
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("X", data=data, chunks=(10, data.shape[1]))

    def crash(self):
        raise AssertionError("fillvalue read")

    monkeypatch.setattr(h5py.Dataset, "fillvalue", property(crash))
    assert as_dask(f"{tmp_path / 'x.h5'}:/X").shape == data.shape


@pytest.mark.parametrize("module, writer, extra", [
    ("h5py", _h5, "h5"), ("xarray", _netcdf4, "netcdf"), ("pyarrow", _parquet, "tables"),
    ("dask.dataframe", _csv, "tables"),
])
def test_missing_reader_names_its_extra(tmp_path, data, monkeypatch, module, writer, extra):
    source = writer(tmp_path, data)
    monkeypatch.setitem(sys.modules, module, None)  # what an environment without it gives: ImportError
    with pytest.raises(ImportError, match=rf"pip install 'dkpca\[{extra}\]'"):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npy", "csv"])
def test_cli_fit_and_transform_files(tmp_path, data, reference, fmt):
    source = WRITERS[fmt](tmp_path, data)
    args = ["-k", str(K), "--gamma", str(GAMMA), "--dtype", "float64", "--no-progress", "--quiet"]
    proc = subprocess.run(dkpca_cmd("fit", source, *args), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    store = source + ".dkpca.zarr"
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    out = str(tmp_path / "z.zarr")
    proc = subprocess.run(dkpca_cmd("transform", store, source, out, "--quiet"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(da.from_zarr(out).compute(), reference.transform(data), atol=1e-10)


# -- data frames: scikit-learn's conventions --------------------------------------------------------------
def test_a_data_frame_s_column_names_are_kept_and_a_transform_in_another_order_is_refused(tmp_path, data):
    """numpy reads a frame's columns by position: reordered, they would be projected as the wrong features."""
    frame = pd.DataFrame(data, columns=[f"f{i}" for i in range(D)])
    store = tmp_path / "s.dkpca.zarr"
    model = dkpca.fit(frame, n_components=K, gamma=GAMMA, dtype="float64", store=store)
    assert model.feature_names == ("f0", "f1", "f2", "f3")
    for m in (model, dkpca.load(store)):  # kept with the model
        assert m.feature_names == model.feature_names
        np.testing.assert_array_equal(m.transform(frame), m.transform(data))  # a frame or its values: the same
        with pytest.raises(ValueError, match=r"feature names should match.*X\[list\(model.feature_names\)\]"):
            m.transform(frame[["f3", "f1", "f2", "f0"]])
    assert dkpca.fit(data, n_components=K, gamma=GAMMA, dtype="float64").feature_names is None


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_table_file_s_column_names_are_kept_and_a_file_in_another_order_is_refused(tmp_path, data, fmt, capsys):
    """A CSV's header or a Parquet file's columns are read by position as well: a file whose columns were
    reordered would be projected as the wrong features (before: max |diff| of the scores 0.77, no word)."""
    source = WRITERS[fmt](tmp_path, data)
    model = dkpca.fit(source, n_components=K, gamma=GAMMA, dtype="float64")
    assert model.feature_names == dkpca.load(source + ".dkpca.zarr").feature_names == ("f0", "f1", "f2", "f3")
    np.testing.assert_array_equal(model.transform(source), model.transform(data))
    np.testing.assert_array_equal(model.transform(pd.DataFrame(data, columns=list(model.feature_names))),
                                  model.transform(data))
    (tmp_path / "other").mkdir()
    other = WRITERS[fmt](tmp_path / "other", data)
    frame = pd.read_csv(other) if fmt == "csv" else pd.read_parquet(other)
    (frame[["f3", "f1", "f2", "f0"]].to_csv(other, index=False) if fmt == "csv" else
     frame[["f3", "f1", "f2", "f0"]].to_parquet(other))
    with pytest.raises(ValueError, match=r"has columns \['f3', 'f1', 'f2', 'f0'\], but the model was fitted on"):
        model.transform(other)
    out = tmp_path / "z.zarr"
    line = cli_error(capsys, ["transform", source + ".dkpca.zarr", other, str(out)])
    assert "has columns" in line and "\n" not in line.strip() and not out.exists()


def test_a_csv_without_a_header_keeps_no_names(tmp_path, data):
    model = dkpca.fit(_csv_no_header(tmp_path, data), n_components=K, gamma=GAMMA, dtype="float64")
    assert model.feature_names is None
    np.testing.assert_array_equal(model.transform(pd.DataFrame(data, columns=list("abcd"))), model.transform(data))


def test_a_data_frame_of_float_and_bool_columns_fits_as_its_float_values(reference, data):
    frame = pd.DataFrame({"a": data[:, 0], "b": data[:, 1] > 0, "c": data[:, 2], "d": data[:, 3]})
    values = frame.to_numpy(dtype=np.float64)
    model = dkpca.fit(frame, n_components=K, gamma=GAMMA, dtype="float64")
    np.testing.assert_allclose(model.eigenvalues_, dkpca.fit(values, n_components=K, gamma=GAMMA,
                                                             dtype="float64").eigenvalues_, rtol=1e-12)


# -- found by a probe of the readers' edges (each: what it did before) ------------------------------------------


def _csv_lines(tmp_path, text):
    (tmp_path / "t.csv").write_text(text)
    return str(tmp_path / "t.csv")


def test_a_csv_header_naming_fewer_columns_than_its_rows_have_is_refused(tmp_path):
    """Before: pandas made the two extra leading fields an index; the last three columns were fitted as a, b, c."""
    source = _csv_lines(tmp_path, "a,b,c\n" + "".join(f"{i},{i + 1},0.{i},0.{i + 2},0.{i + 4}\n" for i in range(9)))
    with pytest.raises(ValueError, match=re.escape("its header names 3 column(s) but its first row has 5 fields")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


def test_a_csv_with_decimal_commas_is_refused_naming_the_separator(tmp_path):
    """Before: fitted as one column of the digits after the last decimal comma, read as integers."""
    source = _csv_lines(tmp_path, "c0;c1;c2\n" + "0,125;-0,132;0,640\n" * 5)
    with pytest.raises(ValueError, match=re.escape("Its header looks separated by ';' (decimal commas?)")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


def test_a_csv_with_thousands_separators_is_refused_naming_them(tmp_path):
    """Before: 'Drop or encode them first' -- of numbers, which no encoding needs."""
    source = _csv_lines(tmp_path, "a,b\n" + "".join(f'"{i},234.5",{i}\n' for i in range(1, 9)))
    with pytest.raises(ValueError, match=re.escape("Its numbers are written with thousands separators (column 'a': "
                                                   "'1,234.5'): write them without.")):
        dkpca.fit(source, store=tmp_path / "s.dkpca.zarr")


def test_a_csv_with_row_names_reads_them_as_its_index(tmp_path, data, reference):
    """R's write.table(sep=','): a header one field short over rows that start with their name."""
    rows = "".join(f'"{i + 1}",' + ",".join(f"{v:.17g}" for v in row) + "\n" for i, row in enumerate(data))
    source = _csv_lines(tmp_path, ",".join(f'"f{j}"' for j in range(D)) + "\n" + rows)
    model = dkpca.fit(source, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


def test_a_csv_header_of_integers_over_measurements_is_a_header(tmp_path, data, reference):
    """Wavelengths naming columns: before, '400,450,500,550' was fitted as a first row of data."""
    text = ",".join(str(400 + 50 * j) for j in range(D)) + "\n" + "".join(
        ",".join(f"{v:.17g}" for v in row) + "\n" for row in data)
    model = dkpca.fit(_csv_lines(tmp_path, text), n_components=K, gamma=GAMMA, dtype="float64",
                      store=tmp_path / "s.dkpca.zarr")
    assert model.n_samples == N and model.feature_names == ("400", "450", "500", "550")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


GOOD_ROWS = "a,b\n" + "1.25,2.5\n" * 40000  # past the sample dask infers the columns' types from


@pytest.mark.parametrize("text, said", [
    (GOOD_ROWS + "3,4,5\n", "is not a readable CSV file of numbers (Error tokenizing data"),
    (GOOD_ROWS + "3,n/a?\n", "is not a readable CSV file of numbers (could not convert string to float: 'n/a?')"),
    ("# only a comment\n\n", "is empty: no line but blanks or comments"),
])
def test_a_csv_that_cannot_be_read_is_named(tmp_path, text, said):
    """Before: pandas' words alone ('Error tokenizing data. C error: ...'), naming no file."""
    with pytest.raises(ValueError, match=re.escape(said)) as err:
        dkpca.fit(_csv_lines(tmp_path, text), store=tmp_path / "s.dkpca.zarr")
    assert "t.csv" in str(err.value)


def test_spaces_after_a_csv_s_commas_are_not_part_of_its_names(tmp_path):
    model = dkpca.fit(_csv_lines(tmp_path, "a, b, c\n1, 2, 3.5\n4, 5, 6.5\n7, 8, 0.5\n"), n_components=2)
    assert model.feature_names == ("a", "b", "c")


def test_a_data_frame_of_nullable_and_arrow_numbers_fits_as_its_values(tmp_path, data, reference):
    """Before: 'X has dtype object; it must be real numeric' for Float64, float64[pyarrow], Int64 and boolean."""
    for dtype in ("Float64", "float64[pyarrow]"):
        frame = pd.DataFrame(data, columns=[f"f{j}" for j in range(D)]).astype(dtype)
        model = dkpca.fit(frame, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / f"{dtype}.zarr")
        np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    frame = frame.assign(s=pd.array(["x"] * N, dtype="string"))
    with pytest.raises(ValueError, match=re.escape("column(s) ['s'] of the data frame are not numeric")):
        dkpca.fit(frame, store=tmp_path / "s.dkpca.zarr")


@pytest.mark.parametrize("column, fix", [
    (np.array([1.5, 2, None, 4] * 5, dtype=object), "They hold numbers as text or objects: convert them first"),
    (pd.array(["1.5", "2", "3", "4"] * 5, dtype="string"), "They hold numbers as text or objects: convert them first"),
    (pd.array(["a", "2", "3", "4"] * 5, dtype="string"), "Drop or encode them first."),
    (pd.Categorical(["x", "y"] * 10), "Drop or encode them first."),
    (pd.date_range("2020", periods=20), "Drop or encode them first."),  # to_numeric makes times numbers: not those
], ids=["objects", "strings of numbers", "text", "category", "times"])
def test_a_data_frame_column_of_numbers_as_text_is_refused_with_the_conversion(tmp_path, column, fix):
    frame = pd.DataFrame({"a": np.arange(20.0), "s": column})
    with pytest.raises(ValueError, match=re.escape("column(s) ['s'] of the data frame are not numeric; dkpca reads "
                                                   f"numeric columns only. {fix}")):
        dkpca.fit(frame, store=tmp_path / "s.dkpca.zarr")


def test_a_dask_data_frame_fits_as_its_values_and_keeps_its_column_names(tmp_path, data, reference):
    """Before: AttributeError: 'DataFrame' object has no attribute 'to_numpy', a traceback."""
    frame = dd.from_pandas(pd.DataFrame(data, columns=[f"f{j}" for j in range(D)]).astype("Float64"), npartitions=3)
    model = dkpca.fit(frame, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)
    assert model.feature_names == tuple(f"f{j}" for j in range(D))
    np.testing.assert_allclose(model.transform(frame), reference.transform(data), atol=1e-10)
    with pytest.raises(ValueError, match=re.escape("column(s) ['s'] of the data frame are not numeric")):
        dkpca.fit(frame.assign(s="x"), store=tmp_path / "t.dkpca.zarr")


def test_a_masked_array_s_masked_entries_are_refused_as_missing(tmp_path, data, reference):
    """Before: 'cannot reshape array of size 1500 into shape (12000,)' from dask; the values under a mask are no
    data (scikit-learn's KernelPCA fits them, ignoring the mask: dkpca.KernelPCA does as it does)."""
    mask = np.zeros(data.shape, dtype=bool)
    mask[7, 2] = mask[9, 0] = True
    with pytest.raises(ValueError, match=re.escape("X is a masked array with 2 masked entries (first in row 7, "
                                                   "column 2); fill or impute them")):
        dkpca.fit(np.ma.masked_array(data, mask=mask), store=tmp_path / "s.dkpca.zarr")
    model = dkpca.fit(np.ma.masked_array(data), n_components=K, gamma=GAMMA, dtype="float64",
                      store=tmp_path / "t.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


def test_an_xarray_dataset_is_refused_naming_its_variables(tmp_path, data):
    """Before: AttributeError: 'Dataset' object has no attribute 'columns', a traceback."""
    ds = xr.Dataset({"v": (("s", "f"), data), "w": ("s", data[:, 0])})
    with pytest.raises(ValueError, match=re.escape("X is an xarray Dataset of variables ['v', 'w']; pass one 2-D "
                                                   "variable, ds['name']")):
        dkpca.fit(ds, store=tmp_path / "s.dkpca.zarr")


def test_long_double_data_fits_as_float64(tmp_path, data, reference):
    """Before: zarr's 'No Zarr data type found that matches dtype float128', after the store was created."""
    model = dkpca.fit(data.astype(np.longdouble), n_components=K, gamma=GAMMA, dtype="float64",
                      store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


def test_parquet_integers_beyond_float_precision_round_as_numpy_rounds_them(tmp_path):
    """Before: pyarrow's 'Integer value ... not in range' naming no file (and, twice in 45 runs, an abort)."""
    big = np.arange(40, dtype=np.int64) + 1_600_000_000_000_000_001
    pd.DataFrame({"t": big, "x": np.linspace(0, 1, 40)}).to_parquet(tmp_path / "t.parquet")
    np.testing.assert_array_equal(as_dask(str(tmp_path / "t.parquet")).compute()[:, 0], big.astype(np.float64))


def test_an_hdf5_external_link_reads_its_target(tmp_path, data):
    """Before: the link's target path was read in the linking file -- another dataset of the same shape fitted
    quietly (or, of another shape, dask's 'Array chunk size or shape is unknown')."""
    with h5py.File(tmp_path / "target.h5", "w") as f:
        f["data/X"] = data
    with h5py.File(tmp_path / "parent.h5", "w") as f:
        f["data/X"] = data + 5.0  # what the target's own path names in the linking file
        f["linked"] = h5py.ExternalLink("target.h5", "/data/X")
    np.testing.assert_array_equal(as_dask(str(tmp_path / "parent.h5") + ":linked").compute(), data)


def test_an_hdf5_external_links_target_rewritten_is_new_data(tmp_path, data):
    """The token covers the target file: a rewritten target is not the cached old data."""
    with h5py.File(tmp_path / "parent.h5", "w") as f:
        f["linked"] = h5py.ExternalLink("target.h5", "/X")
    tokens = []
    for values in (data, data[::-1]):
        with h5py.File(tmp_path / "target.h5", "w") as f:
            f["X"] = values
        tokens.append(as_dask(str(tmp_path / "parent.h5") + ":linked").name)
    assert tokens[0] != tokens[1]


def test_an_hdf5_dataset_without_a_dataspace_is_refused_as_empty(tmp_path):
    """Before: TypeError: 'NoneType' object is not iterable, a traceback."""
    with h5py.File(tmp_path / "n.h5", "w") as f:
        f.create_dataset("X", data=h5py.Empty("f8"))
    with pytest.raises(ValueError, match=re.escape("the HDF5 dataset '/X' is empty (a null dataspace: no values)")):
        dkpca.fit(str(tmp_path / "n.h5") + ":/X", store=tmp_path / "s.dkpca.zarr")


@pytest.mark.parametrize("write, name, said", [
    (lambda p, X: pd.DataFrame(X, columns=list("abcd")).to_parquet(p), "x.csv", "is a Parquet file by its content, "
     "but its name says a CSV file: rename it (e.g. to end in .parquet)"),
    (lambda p, X: h5py.File(p, "w").create_dataset("X", data=X).file.close(), "x.npy", "is an HDF5 file by its "
     "content, but its name says a NumPy file"),
])
def test_a_file_named_as_another_format_is_refused_naming_both(tmp_path, data, write, name, said):
    """Before: "'utf-8' codec can't decode byte 0xc0" and "This file contains pickled (object) data"."""
    write(tmp_path / name, data)
    with pytest.raises(ValueError, match=re.escape(said)):
        dkpca.fit(str(tmp_path / name), store=tmp_path / "s.dkpca.zarr")


def test_a_transform_input_missing_a_fitted_column_names_it(tmp_path, data):
    """Before: 'write its columns in that order', as if they were only reordered."""
    model = dkpca.fit(_csv(tmp_path, data), n_components=2, store=tmp_path / "s.dkpca.zarr")
    pd.DataFrame(data[:, :3], columns=["f0", "f1", "f2"]).to_csv(tmp_path / "three.csv.gz", index=False)
    with pytest.raises(ValueError, match=re.escape("(missing ['f3']); write those columns in that order (pandas: "
                                                   "df[list(model.feature_names)].to_csv(path, index=False))")):
        model.transform(str(tmp_path / "three.csv.gz"))


def test_a_hash_in_a_csv_header_name_is_part_of_it(tmp_path):
    """Before: pandas' comment='#' cut the header at 'n#': 2 of 4 columns fitted, a pandas warning alone."""
    model = dkpca.fit(_csv_lines(tmp_path, "temp,n#,pressure,depth\n" + "1.5,2,3.5,4\n2.5,1,0.5,3\n0.5,4,2.5,1\n"),
                      n_components=2)
    assert model.feature_names == ("temp", "n#", "pressure", "depth")


def test_a_csv_of_quoted_numbers_after_a_space_has_no_header(tmp_path):
    """Before: '"1.5", "2.5"' split without skipping the space read ' "2.5"' as text, so the first row was taken
    for a header: a row lost without a word (pandas reads the rest with skipinitialspace)."""
    X = np.array([[1.5, 2.5, -3.0], [0.25, 4.0, 1.0], [2.0, -1.5, 0.5]])
    text = "".join(", ".join(f'"{float(v)!r}"' for v in row) + "\n" for row in X)
    np.testing.assert_array_equal(np.asarray(open_input(_csv_lines(tmp_path, text))), X)


@pytest.mark.parametrize("text, said", [
    ("1.5,2\n?,3\n4,5\n", "(column '0', row 1: '?') are not numeric"),  # a missing value pandas does not know
    ("1.5,2\n# checked\n4,5\n", "Its row 1 is a comment line ('# checked'): '#' lines are comments only before"),
])
def test_a_text_field_in_a_csv_without_a_header_is_named(tmp_path, text, said):
    """Before: KeyError: '0' (and a traceback from the command line) -- the refusal looked the column up by its
    name as text, where a file without a header has integer column keys."""
    with pytest.raises(ValueError, match=re.escape(said)):
        open_input(_csv_lines(tmp_path, text))


@pytest.mark.parametrize("text", ["1.5,2.5,\n3,4,\n", "a,b,\n1.5,2.5,\n3,4,\n"], ids=["no header", "header"])
def test_a_csv_whose_lines_end_in_a_comma_is_refused_saying_so(tmp_path, text):
    """Before: an empty third column refused as NaN 'first in row 0' -- and without a header its first line, an
    empty field in it, was taken for one: the row named was the file's second."""
    with pytest.raises(ValueError, match=re.escape("its lines end in a comma")):
        open_input(_csv_lines(tmp_path, text))


def test_a_csv_of_booleans_has_no_header(tmp_path):
    """Before: 'True,False' was taken for column names: a row lost (pandas reads the rest as booleans, numbers)."""
    X = np.asarray(open_input(_csv_lines(tmp_path, "True,False\nFalse,True\nTrue,True\n")))
    np.testing.assert_array_equal(X, [[True, False], [False, True], [True, True]])


def _flags_then(token: str, rows: int = 30, at: int = 25) -> str:
    """A CSV whose column 'flag' reads True/False in the rows dask infers types from (its first ten) and holds
    ``token`` in row ``at``; column 'x' is numbers."""
    lines = ["flag,x"] + [f"{i % 2 == 0},{i / 7!r}" for i in range(rows)]
    lines[1 + at] = f"{token},{at / 7!r}"
    return "\n".join(lines) + "\n"


def test_a_missing_field_under_a_csv_s_first_booleans_is_refused_as_missing(tmp_path):
    """Before: read as 1.0 (numpy's bool takes an empty field by its truthiness) and fitted without a word."""
    with pytest.raises(ValueError, match=re.escape("(first in row 25, column 0)")):
        dkpca.fit(_csv_lines(tmp_path, _flags_then("")), store=tmp_path / "s.dkpca.zarr")


def test_a_token_no_boolean_under_a_csv_s_first_booleans_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=re.escape("no cannot be cast to bool")):
        open_input(_csv_lines(tmp_path, _flags_then("no")))


def test_a_zero_under_a_csv_s_first_booleans_leaves_its_false_fields_zero(tmp_path):
    """Before: one '0' further down made every 'False' of the column read 1.0 (14 of 14 here)."""
    X = np.asarray(open_input(_csv_lines(tmp_path, _flags_then("0"))))
    expected = (np.arange(30) % 2 == 0).astype(float)
    expected[25] = 0.0
    np.testing.assert_array_equal(X[:, 0], expected)


def test_a_csv_whose_first_row_has_a_missing_value_is_data_not_a_header(tmp_path):
    """Before: '1.5,NA,2.5' became the column names (a row lost; a transform's rows all shifted by one)."""
    with pytest.raises(ValueError, match=re.escape("(first in row 0, column 1)")):
        dkpca.fit(_csv_lines(tmp_path, "1.5,NA,2.5\n1,2,3\n4,5,6\n"), store=tmp_path / "s.dkpca.zarr")


def test_an_equals_sign_above_a_parquet_input_is_no_partition(tmp_path, data, reference):
    """Before: any '=' in the absolute path ('/scratch/user=bob/') refused the file as a partitioned dataset."""
    (tmp_path / "user=bob").mkdir()
    source = _parquet(tmp_path / "user=bob", data)
    model = dkpca.fit(source, n_components=K, gamma=GAMMA, dtype="float64", store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, reference.eigenvalues_, rtol=1e-10)


@pytest.mark.parametrize("call, said", [
    (lambda X, model: dkpca.fit(X), "dkpca's kernel PCA"),
    (lambda X, model: model.transform(X), "dkpca's transform"),  # before: "not supported by dkpca.fit"
])
def test_a_sparse_matrix_is_refused_naming_the_call_and_the_fix(call, said):
    sp = pytest.importorskip("scipy.sparse")
    X = np.random.default_rng(0).standard_normal((40, 3))
    model = dkpca.fit(X, 2)
    with pytest.raises(ValueError, match=f"X is a sparse matrix, which {said} does not take; densify it with "
                                         r"X.toarray\(\), or use dkpca.KernelPCA"):
        call(sp.csr_matrix(X), model)


def test_a_dask_array_of_unknown_chunk_lengths_is_fitted_and_projected():
    """A dask DataFrame's ``.values`` (or ``to_dask_array()``) does not know its chunks' lengths; before: dask's
    multi-line 'Array chunk sizes are unknown ... x.compute_chunk_sizes()'.  Reference: the fit of the numpy array."""
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).standard_normal((300, 4))
    values = dd.from_pandas(pd.DataFrame(X), npartitions=3).values
    assert np.isnan(values.chunks[0]).all()
    ref = dkpca.fit(X, 3, gamma=0.2, dtype="float64")
    model = dkpca.fit(values, 3, gamma=0.2, dtype="float64")
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-12)
    np.testing.assert_allclose(np.abs(model.transform(values).compute()), np.abs(ref.transform(X)), atol=1e-10)
    assert np.isnan(values.chunks[0]).all()  # the caller's array is not changed


def test_the_estimator_counts_unknown_chunk_lengths_once(monkeypatch):
    """Counting is a pass over the caller's whole pipeline: KernelPCA.fit out of core made it twice (its shape
    probe and the fit).  Reference for the values: the estimator on the same rows as a dask array of known chunks."""
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X = np.random.default_rng(0).standard_normal((300, 4))
    values = dd.from_pandas(pd.DataFrame(X), npartitions=3).values
    counted, real = [], da.Array.compute_chunk_sizes
    monkeypatch.setattr(da.Array, "compute_chunk_sizes", lambda self: counted.append(1) or real(self))
    est = dkpca.KernelPCA(3, gamma=0.2, random_state=0).fit(values)
    assert len(counted) == 1
    ref = dkpca.KernelPCA(3, gamma=0.2, random_state=0).fit(da.from_array(X, chunks=100))
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-12)
