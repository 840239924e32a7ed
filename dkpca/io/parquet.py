"""Parquet input: a file or a directory of files, read by row groups with pyarrow.

dask.dataframe's reader restores the pandas metadata that ``DataFrame.to_parquet`` writes, and fails on
what pandas writes by default (measured with dask 2026.8 and pandas 3.1: integer column names, from
``pd.DataFrame(X).to_parquet(path)``, and a named ``RangeIndex`` raised ``KeyError`` at the first read).
Reading a matrix of numeric columns needs none of that: the schema's columns, less the index columns the
pandas metadata names (pandas restores them as the index, not as data), one dask chunk per row group (their
row counts are in the footers: no pass to count rows), each cast to one float type, a null read as NaN.
A row group is read whole, so it bounds a task's memory (pyarrow writes up to 1,048,576 rows a group):
write large files with a ``row_group_size`` of a few thousand rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import dask
import dask.array as da
import fsspec
import numpy as np
from dask.utils import natural_sort_key

from .csvfile import RowIndexWarning, counts_rows, not_numeric
from .optional import require

__all__ = ["ParquetRows", "open_parquet", "parquet_columns", "is_parquet_directory"]

SUFFIXES = (".parquet", ".pq")


def _pyarrow() -> tuple[Any, Any]:
    """pyarrow and its Parquet module (the ``tables`` extra)."""
    return require("pyarrow", "tables", "Parquet files"), require("pyarrow.parquet", "tables", "Parquet files")


def _hidden(name: str) -> bool:
    """Files a Parquet dataset's writers leave beside its parts (``_SUCCESS``, ``_metadata``, ``.crc``): not data."""
    return name.startswith(("_", "."))


def _parts(fs: Any, root: str) -> list[str]:
    """The files below ``root`` but those hidden at any depth, in dask's order (part.2 before part.10)."""
    found = [f for f in fs.find(root) if not any(_hidden(p) for p in f[len(root) + 1:].split("/"))]
    return sorted(found, key=natural_sort_key)


def _files(path: str) -> list[str]:
    """A file's own path, or a directory's Parquet parts (as URLs where ``path`` is one)."""
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.isdir(root):
        return [path]
    return [fs.unstrip_protocol(f) if "://" in path else f for f in _parts(fs, root.rstrip("/"))]


def is_parquet_directory(path: str) -> bool:
    """A directory (local or a URL's prefix), not Zarr, holding files named ``.parquet`` or ``.pq``."""
    try:
        fs, root = fsspec.core.url_to_fs(path)
        root = root.rstrip("/")
        if not fs.isdir(root) or any(fs.exists(f"{root}/{meta}") for meta in ("zarr.json", ".zarray", ".zgroup")):
            return False
        return any(f.lower().endswith(SUFFIXES) for f in _parts(fs, root))
    except Exception:  # unreachable, refused: the Zarr reader says so in its words
        return False


@dataclass(frozen=True)
class ParquetRows:
    """Row groups of Parquet files as one matrix: ``groups`` are (file, row group, rows), ``columns`` those read."""

    groups: tuple[tuple[str, int, int], ...]
    columns: tuple[str, ...]
    dtype: np.dtype

    def read_group(self, index: int) -> np.ndarray:
        """One row group as a ``(rows, columns)`` array of :attr:`dtype`, a null as NaN."""
        pa, pq = _pyarrow()
        path, group, rows = self.groups[index]
        try:
            with fsspec.open(path, "rb") as f:
                table = pq.ParquetFile(f).read_row_group(group, columns=list(self.columns))
        except (OSError, ValueError) as exc:  # a damaged page: pyarrow's OSError, ArrowInvalid (a ValueError)
            raise ValueError(f"Parquet file {path!r}: row group {group} is not readable ({exc}).") from None
        if table.num_rows != rows:  # the chunk dask was promised: another length would shift every later row
            raise ValueError(f"Parquet file {path!r}: row group {group} holds {table.num_rows} rows where its footer "
                             f"says {rows}; the file is damaged.")
        target = pa.from_numpy_dtype(self.dtype)
        out = np.empty((table.num_rows, len(self.columns)), dtype=self.dtype)
        for j, column in enumerate(table.columns):
            # unsafe: an int64 beyond 2^53 rounds to the nearest float, as numpy and a CSV's reading round it
            out[:, j] = column.cast(target, safe=False).to_numpy(zero_copy_only=False)
        return out

    def to_dask(self) -> da.Array:
        """One chunk per row group (the caller rechunks to its block rows)."""
        read = dask.delayed(ParquetRows.read_group, pure=True)
        blocks = [da.from_delayed(read(self, i), (g[2], len(self.columns)), dtype=self.dtype)
                  for i, g in enumerate(self.groups)]
        return da.concatenate(blocks, axis=0)


def _numeric(pa: Any, kind: Any) -> bool:
    t = pa.types
    return t.is_integer(kind) or t.is_floating(kind) or t.is_boolean(kind) or t.is_decimal(kind)


def _schema(pq: Any, path: str, source: str, part: bool) -> Any:
    try:
        with fsspec.open(path, "rb") as f:
            meta = pq.ParquetFile(f)
            schema = meta.schema_arrow
            _ = schema.pandas_metadata  # JSON in the footer, parsed here: damage there is the file's to name
            return schema, [meta.metadata.row_group(i).num_rows for i in range(meta.num_row_groups)]
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid, json's and UTF-8's errors are ValueErrors
        where = f" (its part {path!r})" if part else ""
        raise ValueError(f"input {source!r}{where} is not a readable Parquet file ({exc}).") from None


def _index_columns(schema: Any) -> set[str]:
    """Columns pandas wrote for its index (``pandas`` metadata): restored as the index, so not data."""
    meta = schema.pandas_metadata or {}
    return {c for c in meta.get("index_columns", []) if isinstance(c, str)}


def open_parquet(path: str, source: str) -> da.Array:
    """A Parquet file or directory of parts as a dask array of its numeric columns (see the module docstring).

    Raises
    ------
    ValueError
        Not Parquet (the part named), parts with other columns than the first, non-numeric columns (named), or
        a partitioned dataset (``key=value`` directories, whose values are no file's column).
    """
    pa, pq = _pyarrow()
    files = _files(path)
    if not files:
        raise ValueError(f"input {source!r} is a directory without Parquet files.")
    base = path.rstrip("/")  # key=value directories below the input count; an ancestor's name ('user=bob') not
    below = [f[len(base) + 1:].split("/")[:-1] for f in files if f != path and f.startswith(base + "/")]
    partitioned = sorted({p.split("=")[0] for parts in below for p in parts if "=" in p})
    if partitioned:
        raise ValueError(f"input {source!r} is a partitioned Parquet dataset (directories {partitioned} = value): "
                         "the partition values are in no file's columns; read it with pandas or dask.dataframe and "
                         "pass the numeric columns as a data frame.")
    schema, groups = None, []
    for f in files:
        got, counts = _schema(pq, f, source, part=len(files) > 1)
        if schema is None:
            schema = got
        elif got.names != schema.names or got.types != schema.types:
            raise ValueError(f"input {source!r}: its part {f!r} has columns {got.names} of types "
                             f"{[str(t) for t in got.types]}, where the first part has {schema.names} of types "
                             f"{[str(t) for t in schema.types]}; every part must have the same columns.")
        groups += [(f, i, rows) for i, rows in enumerate(counts) if rows]
    skip = _index_columns(schema)
    fields = [field for field in schema if field.name not in skip]
    bad = [field.name for field in fields if not _numeric(pa, field.type)]
    if bad:
        raise not_numeric(bad, f"of input {source!r}")
    if not fields:
        raise ValueError(f"input {source!r} has no columns of data.")
    single = all(pa.types.is_floating(f.type) and f.type.bit_width <= 32 for f in fields)
    dtype = np.dtype(np.float32 if single and any(f.type.bit_width == 32 for f in fields) else np.float64)
    rows = ParquetRows(tuple(groups), tuple(f.name for f in fields), dtype)
    if not groups:  # no rows: the shape says so (as_dask refuses too few samples)
        return da.zeros((0, len(fields)), dtype=dtype)
    if fields[0].name in INDEX_NAMES and pa.types.is_integer(fields[0].type):
        _check_row_index(rows, source)
    return rows.to_dask()


#: what a row index that became a column is named: a CSV's unnamed first column read by pandas, reset_index()'s
INDEX_NAMES = ("Unnamed: 0", "index", "")


def _check_row_index(rows: ParquetRows, source: str) -> None:
    """Warn (:class:`RowIndexWarning`) where the first column, named as a row index is, counts 0, 1, 2, ... (that
    column of the first row group is read: Parquet reads by column, and a wide file's group is the whole file)."""
    if counts_rows(replace(rows, columns=rows.columns[:1]).read_group(0)[:, 0]):
        name = rows.columns[0]
        warnings.warn(f"input {source!r}: the first column {name!r} counts 0, 1, 2, ...: a row index (pandas' "
                      "read_csv of a file with one, or reset_index()), which would be fitted as a feature. Drop it: "
                      f"df.drop(columns={name!r}).to_parquet(path).", RowIndexWarning, stacklevel=4)


def parquet_columns(path: str) -> tuple[str, ...]:
    """The data columns of a Parquet file or directory (the first part's schema, less pandas' index columns)."""
    _, pq = _pyarrow()
    first = _files(path)[0]
    with fsspec.open(first, "rb") as f:
        schema = pq.ParquetFile(f).schema_arrow
    skip = _index_columns(schema)
    return tuple(name for name in schema.names if name not in skip)
