"""Open and validate inputs: paths of every readable format, zarr arrays, numpy, dask, xarray.

Everything downstream sees a 2-D floating dask array whose row chunks are the
Gram block size.  Validation that needs to look at the values (finiteness) and
the fingerprint of X (a checksum that identifies the data a Gram store was
built from) are computed together in one blockwise pass, so X is read once and
never held in memory as a whole -- whatever the format (:mod:`.formats`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

from ..execution import compute, for_the_client
from ..linalg import default_block_size
from ..storage.datachunks import chunk_digest, copy_edge
from ..storage.integrity import block_checksum, rows_checksum
from .csvfile import is_csv, not_numeric, text_fields
from .formats import anchored, open_path, table_columns, zarr_input

__all__ = ["open_input", "as_dask", "scan", "Fingerprint", "feature_names", "check_feature_names",
           "read_feature_names"]


def open_input(source: Any) -> Any:
    """Return an array-like for ``source`` without reading its values.

    Parameters
    ----------
    source : str, os.PathLike, zarr.Array, numpy.ndarray, dask.array.Array or xarray.DataArray
        Strings are paths or fsspec URLs in any format of :mod:`dkpca.io.formats`
        (Zarr, ``.npy``, ``file.h5:/dataset``, ``file.nc:variable``, Parquet,
        CSV); a Zarr group must hold an array ``X`` or exactly one array.
    """
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if isinstance(source, str):
        return open_path(source)
    if isinstance(source, zarr.Array):  # as a path to it is read (opened once: as_dask's own call finds it opened)
        source = anchored(source)
        return zarr_input(source, str(source.store_path))
    if hasattr(source, "data_vars"):  # an xarray Dataset: which variable is X is the user's to say
        raise ValueError(f"X is an xarray Dataset of variables {sorted(str(v) for v in source.data_vars)}; pass "
                         "one 2-D variable, ds['name'] (a DataArray).")
    if hasattr(source, "dims") and hasattr(source, "data") and not isinstance(source, np.ndarray):
        return _counted(source.data)  # xarray.DataArray: its backing numpy or dask array
    if hasattr(source, "to_dask_array") and hasattr(source, "columns"):
        return _dask_frame_values(source)
    if isinstance(source, np.ma.MaskedArray):  # masked entries are missing values: never fitted as the data under
        masked = np.ma.getmaskarray(source)
        if masked.ndim == 2 and masked.any():  # another shape is refused for its shape
            row, column = np.argwhere(masked)[0]
            raise ValueError(f"X is a masked array with {int(masked.sum())} masked entries (first in row {row}, "
                             f"column {column}); fill or impute them (X.filled(value)) or drop those rows first.")
        return source.data
    return _counted(source)


def _counted(arr: Any) -> Any:
    """A dask array whose chunks' lengths are unknown (a dask DataFrame's ``.values``, ``to_dask_array()``) with
    them counted, one pass over its chunks (dask can neither rechunk nor slice it else); the caller's unchanged."""
    if isinstance(arr, da.Array) and any(np.isnan(c) for dim in arr.chunks for c in dim):
        arr = arr.copy()  # compute_chunk_sizes counts in place
        arr.compute_chunk_sizes()
    return arr


def feature_names(source: Any) -> tuple[str, ...] | None:
    """A data frame's column names where all are strings (what scikit-learn records as ``feature_names_in_``), a
    CSV's header or a Parquet file's columns, else None: arrays and other files carry none a transform could be
    checked by."""
    if isinstance(source, (str, os.PathLike)):
        return table_columns(source)
    columns = getattr(source, "columns", None) if hasattr(source, "dtypes") else None
    names = [] if columns is None else list(columns)
    return tuple(names) if names and all(isinstance(c, str) for c in names) else None


def check_feature_names(X: Any, fitted: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Refuse a data frame (or a CSV or Parquet file) whose columns are not those fitted, in their order: numpy
    would read them by position and project the wrong features without a word (scikit-learn's estimators refuse a
    data frame's too).  Returns X's names (:func:`feature_names`), read once."""
    names = feature_names(X)
    if fitted is None or names is None or names == fitted:
        return names
    missing, unknown = [c for c in fitted if c not in names], [c for c in names if c not in fitted]
    differ = (f" (missing {missing}" + (f", not fitted {unknown}" if unknown else "") + ")" if missing
              else f" (not fitted {unknown})" if unknown else "")
    if isinstance(X, (str, os.PathLike)):  # a file: the fix is writing it in the fitted order
        write = "to_csv(path, index=False)" if is_csv(os.fspath(X)) else "to_parquet(path)"
        raise ValueError(f"input {os.fspath(X)!r} has columns {list(names)}, but the model was fitted on "
                         f"{list(fitted)}{differ}; write those columns in that order (pandas: "
                         f"df[list(model.feature_names)].{write}).")
    raise ValueError(f"The feature names should match those that were passed during fit: X has columns "
                     f"{list(names)}, the model was fitted on {list(fitted)}{differ}; select them in that order "
                     "(X[list(model.feature_names)]).")


def read_feature_names(attrs: dict, refuse: Any) -> tuple[str, ...] | None:
    """The feature names a model's ``attrs`` record (None: none), checked against its ``n_features``; anything
    else raises ``refuse(field, why)`` (the model's reader names the damaged field)."""
    value = attrs.get("feature_names")
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != attrs.get("n_features") or not all(
            isinstance(v, str) for v in value):
        raise refuse("feature_names", f"is {value!r}, not a list of {attrs.get('n_features')} column names")
    return tuple(value)


def _numeric_columns(frame: Any) -> bool:
    """Refuse a data frame (pandas or dask) with columns that are not numbers, naming them; whether every column
    is of a numpy type (False: nullable or Arrow numbers, read as float64 with NA as NaN)."""
    kinds = zip(frame.columns, frame.dtypes, strict=True)
    keys = [c for c, t in kinds if getattr(t, "kind", "O") not in "biuf"]
    if keys:
        raise not_numeric([str(c) for c in keys], "of the data frame", _frame_fix(frame, keys))
    return all(isinstance(t, np.dtype) for t in frame.dtypes)


def _frame_fix(frame: Any, keys: list) -> str | None:
    """The fix for a pandas frame's columns that are numbers held as text or objects (read from JSON or a
    spreadsheet, built from lists): convert them (None: nothing more to say; a dask frame is not read for it)."""
    if hasattr(frame, "npartitions"):
        return None
    try:
        # (objects, strings, categories: kind "O"; times are not numbers, though to_numeric makes them some)
        numbers = all(frame[key].dtype.kind == "O" and not text_fields(frame[key]).any() for key in keys)
    except (TypeError, ValueError):  # a column of lists, a nested frame: not numbers
        numbers = False
    return "They hold numbers as text or objects: convert them first, e.g. df.astype(float)." if numbers else None


def _frame_values(frame: Any) -> Any:
    """A data frame's values in its columns' common type: ``np.asarray`` makes float and bool columns objects."""
    if not len(frame.columns):
        return np.asarray(frame)  # (n, 0): refused for its features
    if _numeric_columns(frame):
        return frame.to_numpy(dtype=np.result_type(*frame.dtypes))
    return frame.to_numpy(dtype=np.float64, na_value=np.nan)  # NA as NaN: the finiteness check names it


def _dask_frame_values(frame: Any) -> da.Array:
    """A dask DataFrame's values as a dask array, its partitions' lengths counted (one pass over them)."""
    if len(frame.columns) and not _numeric_columns(frame):
        frame = frame.astype(np.float64)  # nullable and Arrow numbers: NA as NaN, named by the finiteness check
    return frame.to_dask_array(lengths=True)


def as_dask(source: Any, block_rows: int | None = None, min_samples: int = 2, purpose: str = "kernel PCA",
            keep_row_chunks: bool = False) -> da.Array:
    """Validate shape and dtype and wrap ``source`` as a dask array.

    Row chunks are set to ``block_rows`` (the Gram block edge) and columns to a
    single chunk.  ``keep_row_chunks=True`` keeps a dask array's own row chunks
    (results of ``transform`` then have the user's chunks).  Integer and
    boolean data are converted to float64; other dtypes keep their precision
    (float32 stays float32), in this machine's byte order.

    Raises
    ------
    ValueError
        Not 2-D, not numeric (complex, object, strings), or fewer than ``min_samples`` samples
        (2 for a fit; ``purpose`` names what needs them in the message).
    """
    arr = open_input(source)
    if hasattr(arr, "tocsr") or type(arr).__module__.startswith("scipy.sparse"):
        raise ValueError(
            f"X is a sparse matrix, which dkpca's {purpose} does not take; densify it with X.toarray(), or use "
            "dkpca.KernelPCA (in memory, as scikit-learn's)."
        )
    if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
        arr = _frame_values(arr) if hasattr(arr, "dtypes") else np.asarray(arr)
    shape = tuple(arr.shape)
    fields = np.dtype(arr.dtype).names
    if fields:  # a record array: its fields are the columns, which numpy does not count as a dimension
        raise ValueError(f"X has a structured dtype with fields {list(fields)}; stack its numeric fields as columns: "
                         "numpy.lib.recfunctions.structured_to_unstructured(X).")
    if len(shape) != 2:
        raise ValueError(
            f"X must be 2-D (n_samples, n_features); got shape {shape}. "
            "Reshape with X.reshape(len(X), -1) or X[:, None] for a single feature."
        )
    n, d = shape
    if n < min_samples:
        raise ValueError(f"X has {n} sample(s); {purpose} needs at least {min_samples}.")
    if d < 1:
        raise ValueError("X has 0 features; it needs at least 1.")
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biuf":
        raise ValueError(f"X has dtype {dtype}; it must be real numeric (float, int or bool).")
    # native byte order: a big-endian file's values, computed and stored, read back in this machine's order
    # float128 too: no Zarr type stores it, and the kernels compute in float64 at most
    target = (dtype if dtype.kind == "f" and 4 <= dtype.itemsize <= 8 else np.dtype(np.float64)).newbyteorder("=")
    rows = block_rows or default_block_size(n)
    if isinstance(arr, da.Array):
        X = arr.rechunk({1: -1} if keep_row_chunks else (rows, d))
    else:
        X = da.from_array(arr, chunks=(rows, d), asarray=True, name=False if isinstance(arr, np.ndarray) else None)
    if X.dtype != target:
        X = X.astype(target)
    return X


@dataclass(frozen=True)
class Fingerprint:
    """Identity of a data matrix: shape, dtype and a checksum of its values.

    ``chunks``: the digest a store's data copy records for each row chunk
    (:func:`~dkpca.storage.datachunks.chunk_digest`), as :func:`scan` read it; the copy compares
    what it writes with them, so an input that changed between the two reads (still being written)
    is found.  Not part of the identity (nor of :meth:`to_dict`); empty where X's row chunks are not
    the copy's (irregular).
    """

    shape: tuple[int, int]
    dtype: str
    checksum: str
    chunks: tuple[int, ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "checksum": self.checksum}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fingerprint:
        return cls(tuple(d["shape"]), d["dtype"], d["checksum"])


def _scan_block(block: np.ndarray, edge: tuple[int, int] | None) -> tuple[str, int, int, int | None]:
    """The block's digest, its first non-finite entry's row and column (-1, -1: none), and the digest a data
    copy's chunk of shape ``edge`` holding it records (None: no ``edge``)."""
    block = np.ascontiguousarray(block)
    finite = np.isfinite(block)
    rows = finite.all(axis=1)
    bad = -1 if rows.all() else int(np.argmin(rows))
    column = -1 if bad < 0 else int(np.argmin(finite[bad]))
    copied = None if edge is None else int(chunk_digest(block, edge)[0])
    return block_checksum(block), bad, column, copied


def scan(X: da.Array, purpose: str = "fitting") -> Fingerprint:
    """Check X is finite and fingerprint it, reading each row block once.

    An X of at most :data:`dkpca.execution.LOCAL_BYTES` is read by this
    process's threads even with a cluster; a larger one by the cluster's workers.

    Raises
    ------
    ValueError
        X holds NaN or infinity; the message names the first bad row.
    """
    edge = copy_edge(X)  # blocks as a store's data copy writes them: their digests are the copy's
    parts = [dask.delayed(_scan_block, pure=True)(b, edge) for b in X.to_delayed().ravel()]
    results = compute(*parts, local=for_the_client(X.nbytes))
    offset = 0
    for (_, bad, column, _), rows in zip(results, X.chunks[0], strict=True):
        if bad >= 0:  # a CSV's short row or empty field is read as NaN: the column says which field
            raise ValueError(
                f"X contains NaN or infinity (first in row {offset + bad}, column {column}); "
                f"remove or impute non-finite values before {purpose} (a CSV's empty or missing field, a Parquet "
                "null, a data frame's NA or a netCDF fill value reads as NaN)."
            )
        offset += rows
    checksum = rows_checksum((r[0] for r in results), X.chunks[0])
    copied = tuple(r[3] for r in results) if edge is not None else ()
    return Fingerprint(tuple(int(s) for s in X.shape), str(X.dtype), checksum, copied)
