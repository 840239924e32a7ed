"""Input files: which format a path is, and a lazy, row-sliceable array for each.

dkpca reads

* **Zarr** arrays and groups (a directory, or an fsspec URL);
* **NumPy** ``.npy`` files, memory-mapped;
* **HDF5** datasets, ``file.h5:/group/dataset`` (h5py, the ``h5`` extra);
* **netCDF** and other files xarray reads, ``file.nc:variable`` (the ``netcdf`` extra);
* **Parquet** and **CSV** of numeric columns, through dask.dataframe (the ``tables`` extra).

None of them is loaded whole: every reader returns either a dask array or a small picklable object with
``shape``, ``dtype`` and ``__getitem__`` that opens the file and reads only the rows asked for, so dask tasks
(also on another machine's workers) read one row block each.  Paths are made absolute when opened, for workers
in another working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from ..linalg import default_block_size
from ..storage import FORMAT, absolute, is_url, without_local_scheme
from ..storage.integrity import VerifiedArray, read_verified
from ..storage.outputs import readable
from ..storage.paths import unreachable
from .csvfile import RowIndexWarning, csv_columns, is_csv, open_csv
from .hdf5 import open_h5, warn_unwritten_h5
from .members import READABLE, AbsentChunksWarning, file_stamp, pick_member, two_dimensional, warn_absent
from .optional import quiet_teardown, require
from .parquet import SUFFIXES as PARQUET_SUFFIXES
from .parquet import is_parquet_directory, open_parquet, parquet_columns
from .shards import stored_chunks

__all__ = ["READABLE", "AbsentChunksWarning", "RowIndexWarning", "open_path", "split_member", "input_path", "anchored",
           "table_columns", "zarr_input", "named_kind", "SAID"]

H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf", ".cdf")

#: first bytes of the file formats recognised without a telling suffix
MAGIC = {b"\x93NUMPY": "npy", b"\x89HDF\r\n\x1a\n": "h5", b"CDF\x01": "netcdf", b"CDF\x02": "netcdf",
         b"PAR1": "parquet"}


def split_member(source: str) -> tuple[str, str | None]:
    """``'file.h5:/group/x'`` -> ``('file.h5', '/group/x')``; other paths and URLs -> ``(source, None)``.

    The split is at the last colon whose left part is an existing file, so paths and members that contain colons
    themselves still work (``'f.h5:/a:b'``: the dataset ``/a:b``); a ``file://`` URL names a local file.
    """
    local = without_local_scheme(source)
    if is_url(local) or os.path.exists(local) or ":" not in local:
        return source, None
    at = len(local)
    while (at := local.rfind(":", 0, at)) > 0:
        if at + 1 < len(local) and os.path.isfile(local[:at]):
            return local[:at], local[at + 1:]
    return source, None


def input_path(source: Any) -> str | None:
    """The file, directory or URL a path input reads (without ``:member``); None for in-memory input."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    return split_member(os.fspath(source))[0]


def _suffix(path: str) -> str:
    return os.path.splitext(path.rstrip("/"))[1].lower()


def _sniff(path: str) -> str | None:
    with open(path, "rb") as f:
        head = f.read(8)
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


#: each format as a message names it, and the suffix a file of it takes
SAID = {"npy": ("a NumPy file", ".npy"), "h5": ("an HDF5 file", ".h5"), "netcdf": ("a netCDF file", ".nc"),
        "parquet": ("a Parquet file", ".parquet"), "csv": ("a CSV file", ".csv")}


def named_kind(path: str) -> str | None:
    """The format a path's name says (its suffix), if any."""
    suffix = _suffix(path)
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if is_csv(path):
        return "csv"
    return {".npy": "npy", **dict.fromkeys(H5_SUFFIXES, "h5"), **dict.fromkeys(NETCDF_SUFFIXES, "netcdf")}.get(suffix)


def _kind(path: str, member: str | None, source: str) -> str:
    """The format of a path: by suffix, else by its first bytes; a local file whose first bytes are another
    format's than its name says is refused (each reader's own error would be about something else)."""
    named = named_kind(path)
    if is_url(path):
        if named in ("npy", "h5", "netcdf"):
            raise ValueError(f"input {source!r}: {_suffix(path)} files are read from local paths only; copy it to "
                             "a local file, or convert it to Zarr.")
        return named or ("parquet" if is_parquet_directory(path) else "zarr")
    if os.path.isdir(path):
        return "parquet" if is_parquet_directory(path) else "zarr"
    found = _sniff(path)
    if named and found and found != named and (named, found) != ("netcdf", "h5"):  # netCDF-4 is HDF5 inside
        raise ValueError(f"input {source!r} is {SAID[found][0]} by its content, but its name says {SAID[named][0]}: "
                         f"rename it (e.g. to end in {SAID[found][1]}).")
    if named or found:
        return named or found
    if member is not None:
        return "netcdf"  # file:variable of any other format: xarray's backends decide
    raise ValueError(f"input {source!r} is not in a format dkpca reads; dkpca reads {READABLE}.")


def open_path(source: str) -> Any:
    """A lazy array for a path or URL (see the module docstring); nothing but metadata is read.

    Raises
    ------
    FileNotFoundError
        The path does not exist.
    ValueError
        Not a format dkpca reads, a member that is not there (the message
        lists those that are), or non-numeric columns (named).
    ImportError
        The optional library for the format is missing (the message names the extra).
    """
    path, member = split_member(source)
    if not is_url(path) and not os.path.exists(path):
        head, _, tail = source.rpartition(":")
        if head and os.path.isdir(head):  # 'group.zarr:sub/X': the HDF5 and netCDF way of naming a member
            raise FileNotFoundError(f"input {source!r} does not exist; a Zarr group's member is named by its path: "
                                    f"'{head.rstrip('/')}/{tail.lstrip('/')}'.")
        raise FileNotFoundError(f"input {source!r} does not exist; dkpca reads {READABLE}.")
    path = absolute(path)  # tasks reading it may run in another working directory
    kind = _kind(path, member, source)
    if member is not None and kind not in ("h5", "netcdf"):
        raise ValueError(f"input {source!r}: only HDF5 and xarray-readable files take a ':member' name.")
    return READERS[kind](path, member, source)


# -- one reader per format --------------------------------------------------------------
def _open_zarr(path: str, member: str | None, source: str) -> Any:
    try:  # an array's own metadata, never a group's consolidated copy: that predates an append to it
        node = zarr.open(path, mode="r", use_consolidated=False)
    except Exception as exc:  # zarr's own message names its internals (store paths, classes): not for the user
        if isinstance(exc, PermissionError) or unreachable(exc):
            raise  # said as they are (the CLI names the credentials or the endpoint), not as "not Zarr"
        reach = " (for a URL: check that it is reachable and the credentials)" if is_url(path) else ""
        raise ValueError(f"input {source!r} is neither a Zarr array or group nor another format dkpca reads{reach}; "
                         f"dkpca reads {READABLE}.") from None
    if isinstance(node, zarr.Group) and node.attrs.get("format") == FORMAT:
        raise ValueError(f"input {source!r} is a dkpca store, not data; the training data it copied is the array "
                         f"'{source.rstrip('/')}/data/X', and its model projects new data with 'dkpca transform'.")
    if isinstance(node, zarr.Group):
        arrays = sorted(name for name, _ in node.arrays())
        groups = sorted(name for name, _ in node.groups())
        # the groups it holds, where the data may be: a path into them is the fix
        deeper = f" -- pass the data array's path, e.g. '{source.rstrip('/')}/{groups[0]}/X' (its groups: {groups})" \
            if groups else ""
        empty = deeper or "; write the data into it as an array 'X' (n_samples, n_features)"
        if "X" not in arrays and len(arrays) != 1:
            raise ValueError(
                f"Zarr group {source!r} holds arrays {arrays}; name the data array 'X' "
                f"or pass its path, e.g. '{source}/{arrays[0]}'." if arrays else
                f"Zarr group {source!r} holds no array{empty}."
            )
        name = "X" if "X" in arrays else arrays[0]
        node = node[name]  # its metadata read once (a request each on an object store)
        if node.ndim != 2 and not node.dtype.names:  # named (as_dask says "X")
            raise ValueError(f"Zarr group {source!r}: its array {name!r} has shape {node.shape}; dkpca fits a "
                             f"2-D array (n_samples, n_features){deeper}.")
    return zarr_input(node, source)


def anchored(arr: zarr.Array) -> zarr.Array:
    """``arr`` opened again by its local store's absolute path where that store was opened by a relative one: tasks
    read it where they run, and a worker in another working directory found no chunks there -- rows of the fill
    value, projected without a word."""
    root = getattr(arr.store, "root", None)
    if not isinstance(arr.store, zarr.storage.LocalStore) or root is None or os.path.isabs(root):
        return arr
    return zarr.open_array(zarr.storage.LocalStore(os.path.abspath(root), read_only=True), path=arr.path, mode="r")


def zarr_input(node: zarr.Array, source: str) -> Any:
    """A Zarr array to read, named by path or passed alike: a transform output as ``storage.outputs.readable``
    reads it, a user's array through its checksums (:class:`ZarrInput`), its absent chunks warned of."""
    node = readable(node, source)
    if isinstance(node, zarr.Array):
        warn_absent_chunks(node, source)
        return ZarrInput(node)
    return node


def warn_absent_chunks(arr: zarr.Array, source: str) -> None:
    """Warn (:class:`AbsentChunksWarning`) where chunks of ``arr`` are not in its store: zarr reads an absent
    chunk as the fill value and writes no chunk equal to it, so it may be data -- or the part a writer killed
    part way never wrote, fitted as fill values without a word.  Not refused; said before any work, with the
    count (one listing of the array's prefix)."""
    try:  # a sharded array's shards' indexes say which chunks they hold: zarr counts a stored shard as all
        held = stored_chunks(arr)
        absent = arr.nchunks - (arr.nchunks_initialized if held is None else held)
    except Exception:  # a store that cannot list (an HTTP server without listings): nothing to say
        return
    warn_absent(source, "Zarr array", absent, arr.nchunks, arr.fill_value,
            "if the array was written in full (zarr stores no chunk equal to the fill value) this is the data, but a "
            "writer that stopped part way leaves the same gap")


@dataclass(frozen=True)
class ZarrInput(VerifiedArray):
    """A user's Zarr array, each read through its chunks' checksums: one failing it is named with the array
    (zarr's codec error names neither); a missing chunk reads as the fill value, as zarr reads it (a
    :class:`~dkpca.storage.integrity.VerifiedArray` would refuse it: dkpca did not write this array)."""

    def __getitem__(self, key: Any) -> np.ndarray:
        return read_verified(self.array, key)


@dataclass(frozen=True)
class NpyFile:
    """A ``.npy`` file read by rows through a memory map (never loaded whole; no pickle: ``allow_pickle=False``)."""

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    stamp: tuple[int, int]  # (mtime_ns, size): part of dask's token, so a rewritten file is new data

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        return np.array(np.load(self.path, mmap_mode="r")[key])


def _open_npy(path: str, member: str | None, source: str) -> NpyFile:
    try:
        m = np.load(path, mmap_mode="r")
    except ValueError as exc:  # object arrays cannot be mapped (and would need pickle)
        raise ValueError(f"input {source!r} cannot be memory-mapped ({exc}); save numeric data with np.save.") \
            from None
    except EOFError:  # numpy's word for an empty file
        raise ValueError(f"input {source!r} is empty, not a .npy array; save the data with np.save.") from None
    if not isinstance(m, np.ndarray):
        raise ValueError(f"input {source!r} is not a single .npy array.")
    return NpyFile(path, tuple(m.shape), m.dtype, file_stamp(path))


def _open_xarray(path: str, member: str | None, source: str) -> Any:
    xr = require("xarray", "netcdf", "netCDF and other xarray-readable files")
    with quiet_teardown("h5netcdf"):  # a damaged file's half-opened File: its finaliser's traceback, not ours
        try:
            ds, why = xr.open_dataset(path, cache=False), None  # lazy: nothing is read until a block is computed
        except Exception as exc:  # xarray's message names the backends it tried: what to install
            ds, why = None, str(exc)  # raised below: this exception would keep the half-opened file alive
    if ds is None:
        raise ValueError(f"input {source!r} cannot be read by xarray ({why}); dkpca reads {READABLE}.")
    if member is None:
        member = pick_member(source, "netCDF", "variable", {str(v): ds[v].shape if ds[v].dtype.kind in "biuf" else
                                                      f"of {ds[v].dtype}" for v in ds.data_vars})
    if member not in ds.variables:
        raise ValueError(f"input {source!r}: the file has no variable {member!r}; its variables are "
                         f"{sorted(str(v) for v in ds.variables)}.")
    var = ds[member]
    two_dimensional(source, "variable", member, var.shape)
    if _sniff(path) == "h5":
        _warn_unwritten_netcdf4(path, member, source)
    # xarray reads each dask chunk by itself: row blocks of the Gram block's edge
    return var.chunk({var.dims[0]: default_block_size(var.shape[0]), var.dims[1]: -1}).data


def _warn_unwritten_netcdf4(path: str, member: str, source: str) -> None:
    """A netCDF-4 file is HDF5: a variable's chunks never written read as its fill value, which xarray turns into
    NaN only where the variable names a ``_FillValue`` (netCDF's default fill, 9.97e36 or -2147483647, is fitted
    as data): warned of as an HDF5 dataset's."""
    h5py = require("h5py", "h5", "HDF5 files")
    with h5py.File(path, "r") as f:
        node = f.get(member)
        if isinstance(node, h5py.Dataset):
            warn_unwritten_h5(node, source, "netCDF-4 variable")


def _open_parquet(path: str, member: str | None, source: str) -> Any:
    return open_parquet(path, source)


def _open_csv(path: str, member: str | None, source: str) -> Any:
    return open_csv(path, source)


def table_columns(source: Any) -> tuple[str, ...] | None:
    """The column names of a CSV with a header or of a Parquet file, which a model keeps and its transform checks
    (None: any other input, a CSV whose first line is data, or one the reader will refuse, naming why); only the
    header or the schema is read."""
    path = input_path(source)
    if path is None or not (is_url(path) or os.path.exists(path)):
        return None
    try:
        kind = _kind(path, None, path)
        if kind == "csv":
            return csv_columns(path)
        if kind == "parquet":
            return parquet_columns(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return None


READERS = {"zarr": _open_zarr, "npy": _open_npy, "h5": open_h5, "netcdf": _open_xarray, "parquet": _open_parquet,
           "csv": _open_csv}
