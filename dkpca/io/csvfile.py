"""CSV input through dask.dataframe: whether the first line is a header, a row index warned of, compressed files.

A file is read by blocks of bytes (dask's ``read_csv``), or whole per task where it is compressed (``.csv.gz``,
``.csv.bz2``, ``.csv.xz``: a compressed stream cannot be split).  Lines starting with ``#`` before the
first line of the table are comments, skipped (a ``#`` further on may be part of a name).
"""

from __future__ import annotations

import csv
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
from fsspec.utils import infer_compression

from .optional import require

__all__ = ["RowIndexWarning", "HeaderGuessWarning", "counts_rows", "csv_columns", "is_csv", "open_csv", "not_numeric",
           "text_fields"]

COMMENT = "#"
#: separators other than commas that a CSV's fields may be found split by: said so, not as text columns
SEPARATORS = ";\t|"


def is_csv(path: str) -> bool:
    """``.csv``, or ``.csv`` then a compression suffix fsspec decompresses (``.gz``, ``.bz2``, ``.xz``)."""
    base = path.rstrip("/").lower()
    if infer_compression(base):
        base = os.path.splitext(base)[0]
    return base.endswith(".csv")


#: what pandas reads as a missing value (but the empty field, which heads pandas' index column): data, not a header
MISSING = {"NA", "N/A", "NaN", "nan", "NAN", "NULL", "null", "None", "-NaN", "-nan", "<NA>", "#N/A", "n/a"}

#: at most this many columns, a first line of numbers is as likely a row of data as the header it looks like
#: (pandas' labels '0' or '0,1'; integers over fractions): read as :attr:`Layout.header` decides, and warned of
NARROW = 2


#: what pandas reads as a boolean (a numeric column): data, not a header
BOOLEANS = {"True", "TRUE", "true", "False", "FALSE", "false"}


def _number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return field in MISSING or field in BOOLEANS
    return True


def _integer(field: str) -> bool:
    return field.lstrip("+-").isdigit()


@dataclass(frozen=True)
class Layout:
    """What a CSV's head says of how to read it, from one read of its first lines.

    ``skip``: the blank and comment (``#``) lines before the table, skipped (pandas' ``comment`` would cut a
    header name or a field at any later ``#``); ``lines``: the table's first two lines (fewer in a short file),
    split into fields as ``csv`` does (quotes removed, spaces after a comma too).
    """

    skip: int
    lines: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, path: str) -> Layout:
        skip, lines = 0, []
        with fsspec.open(path, "rt", compression="infer", encoding="utf-8-sig", newline="") as f:
            for line in f:
                if not line.strip() or line.lstrip().startswith(COMMENT):
                    if not lines:
                        skip += 1
                    continue
                lines.append(tuple(field.strip() for field in next(csv.reader([line], skipinitialspace=True))))
                if len(lines) == 2:
                    break
        return cls(skip, tuple(lines))

    @property
    def header(self) -> bool:
        """Whether the first line names the columns.

        A line of numbers (and missing-value markers) is data, except the labels ``0,1,...,d-1``
        (``DataFrame(X).to_csv(path, index=False)`` writes them for a frame made from an array) and, in a file
        of more than :data:`NARROW` columns, a line of integers over a line with fractions (wavelengths, years
        or channel numbers naming columns of measurements): a data row of exactly those is far rarer than
        either header.  In a narrower file it is not (:attr:`guessed`).
        """
        if not self.lines:
            return False
        first = self.lines[0]
        return not all(map(_number, first)) or self._labels or (len(first) > NARROW and self._integers_over_fractions)

    @property
    def _labels(self) -> bool:
        first = self.lines[0]
        return first == tuple(str(i) for i in range(len(first)))

    @property
    def _integers_over_fractions(self) -> bool:
        return (len(self.lines) == 2 and all(map(_integer, self.lines[0]))
                and not all(map(_integer, self.lines[1])))

    @property
    def guessed(self) -> bool:
        """Whether :attr:`header` decided between a header and a row of data that read the same: a first line
        of at most :data:`NARROW` numbers that is pandas' labels (read as a header) or integers over fractions
        (read as data) -- '0' heads a one-column frame pandas wrote, and starts a column of counts as often."""
        return (bool(self.lines) and len(self.lines[0]) <= NARROW and all(map(_number, self.lines[0]))
                and (self._labels or self._integers_over_fractions))

    def warn_if_guessed(self, source: str) -> None:
        """:class:`HeaderGuessWarning` where the first line's reading was a guess (:attr:`guessed`), saying which
        and how to make it certain."""
        if not self.guessed:
            return
        line, d = ",".join(self.lines[0]), len(self.lines[0])
        names = ",".join(f"x{j}" for j in range(d))
        read = ("as column names (as pandas' DataFrame(X).to_csv(path, index=False) writes them for unnamed "
                "columns), not as a row of data" if self.header else "as a row of data, not as column names")
        other, this = ("data", "a header") if self.header else ("a header", "data")
        warnings.warn(f"input {source!r}: its first line {line!r} was read {read}: in a file of {d} column"
                      f"{'s' if d > 1 else ''} either reads the same. If it is {other}, write a line of names first "
                      f"(e.g. {names!r}); if it is {this}, the answer stands (a line of names silences this).",
                      HeaderGuessWarning, stacklevel=4)

    @property
    def row_names(self) -> bool:
        """Whether the first field of each row names it: a header one field short, over rows whose first field
        is a label or counts (R's ``write.table(sep=",")``); pandas reads it as the index, as here."""
        if not self.header or len(self.lines) < 2 or len(self.lines[1]) != len(self.lines[0]) + 1:
            return False
        first = self.lines[1][0]
        return _integer(first) or not _number(first)

    def check_fields(self, source: str) -> None:
        """Refuse lines that end in a comma (one more column, of nothing: its NaN were refused naming a row that
        was not the file's where it also made the first line a header), and a header naming fewer or more columns
        than the first row has fields (but for :attr:`row_names`): pandas would make the extra leading fields an
        index, fitting the rest under the header's names (a file with decimal commas too)."""
        if self.lines and all(len(line) > 1 and line[-1] == "" for line in self.lines):
            raise ValueError(f"input {source!r}: its lines end in a comma ({','.join(self.lines[0])!r}), which reads "
                             "as one more column, of nothing; write the rows without it.")
        if not self.header or len(self.lines) < 2 or len(self.lines[0]) == len(self.lines[1]) or self.row_names:
            return
        names, fields = self.lines
        hint = next((f" Its header looks separated by {s!r} (decimal commas?): write the file with ',' between "
                     "fields and '.' in numbers." for s in SEPARATORS if len(names) == 1 and s in names[0]), "")
        raise ValueError(f"input {source!r}: its header names {len(names)} column(s) but its first row has "
                         f"{len(fields)} fields; every row must have one field per column.{hint}")


class HeaderGuessWarning(UserWarning):
    """A CSV's first line, at most :data:`NARROW` numbers, could be its header or its first row: read as one of them,
    said so."""


class RowIndexWarning(UserWarning):
    """A CSV's first column is an unnamed row index (pandas' ``to_csv`` writes one): it would be fitted as a feature."""


def not_numeric(bad: list[str], where: str, fix: str | None = None) -> ValueError:
    """The refusal of columns that are not numbers (a CSV's, a Parquet file's, a data frame's), naming them;
    ``fix``: what their values say of the cause (None: drop or encode them)."""
    return ValueError(f"column(s) {bad} {where} are not numeric; dkpca reads numeric columns only. "
                      f"{fix or 'Drop or encode them first.'}")


def text_fields(column: Any) -> np.ndarray:
    """Which of a pandas column's values are text, not numbers (missing values are neither)."""
    pd = require("pandas", "tables", "data frames")
    return (column.notna() & pd.to_numeric(column, errors="coerce").isna()).to_numpy()


def counts_rows(values: Any) -> bool:
    """Whether a column's first values count 0, 1, 2, ...: a row index, not a feature."""
    values = np.asarray(values, dtype=np.float64)
    return values.size > 1 and np.array_equal(values, np.arange(values.size))


def _check_row_index(df: Any, source: str) -> None:
    """Warn (:class:`RowIndexWarning`) when the first column has no name and counts 0, 1, 2, ... (its first block).

    ``DataFrame.to_csv(path)`` writes the index as a first column headed by nothing, which readers
    name ``Unnamed: 0``; fitted, it becomes a feature that grows with the row number and outweighs
    the data.  Only the first block of rows is read (an unnamed first column is rare; the values are
    the evidence).
    """
    name = str(df.columns[0])
    if name.strip() and name != "Unnamed: 0":
        return
    if counts_rows(df.get_partition(0)[df.columns[0]].compute(scheduler="sync")):
        warnings.warn(f"input {source!r}: the first column has no name and counts 0, 1, 2, ...: a row index (as "
                      "pandas' DataFrame.to_csv writes one), which would be fitted as a feature. Write the file with "
                      "to_csv(path, index=False), or drop the column: pandas.read_csv(path, index_col=0) and fit "
                      "its values.", RowIndexWarning, stacklevel=3)


def _read(path: str, layout: Layout, **kw: Any) -> Any:
    dd = require("dask.dataframe", "tables", "CSV files")
    compressed = infer_compression(path) is not None  # one task per file: a compressed stream has no offsets
    # row names: pandas' own reading takes them as the index; else no field ever becomes one
    index = {} if layout.row_names else {"index_col": False}
    return dd.read_csv(path, header=0 if layout.header else None, skiprows=layout.skip, compression="infer",
                       skipinitialspace=True, **index, **({"blocksize": None} if compressed else {}), **kw)


#: a number written with thousands separators, quoted so that its commas are no field separators: "1,234.5"
GROUPED = re.compile(r"\s*[-+]?\d{1,3}(,\d{3})+(\.\d*)?\s*")


def _first_text(df: Any, key: Any) -> tuple[int, str] | None:
    """The first field of column ``key`` that is not a number, and its row, in the first row block (where dask
    inferred the column's type from); None if none there."""
    column = df.get_partition(0)[key].compute(scheduler="sync")
    text = text_fields(column)
    if not text.any():
        return None
    row = int(np.argmax(text))
    return row, str(column.iloc[row])


def _text_fix(name: str, found: tuple[int, str] | None) -> str | None:
    """What a non-numeric field says of its cause: thousands separators, a comment line inside the table (None:
    nothing more than that it is text)."""
    value = found[1] if found is not None else ""
    if GROUPED.fullmatch(value):
        return f"Its numbers are written with thousands separators (column {name!r}: {value!r}): write them without."
    if value.lstrip().startswith(COMMENT):
        return (f"Its row {found[0]} is a comment line ({value!r}): '#' lines are comments only before the table; "
                "move it there or remove it.")
    return None


def open_csv(path: str, source: str) -> Any:
    """A CSV of numeric columns as a dask array (row chunks counted: one read); its columns' common float type.

    Raises
    ------
    ValueError
        Unreadable, no rows, or non-numeric columns (named; a file separated by ``;``, a tab or ``|`` said so).
    """
    pd = require("pandas", "tables", "CSV files")
    try:
        layout = Layout.of(path)
        if not layout.lines:
            raise ValueError(f"input {source!r} is empty: no line but blanks or comments.")
        layout.check_fields(source)
        layout.warn_if_guessed(source)
        df = _read(path, layout)
    except EOFError as exc:  # gzip, bz2, lzma: a compressed stream cut short (not an OSError)
        raise ValueError(_cut_short(source, exc)) from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ValueError(f"input {source!r} is not a readable CSV file ({exc}).") from None
    dtypes = df.dtypes.to_dict()
    keys = [c for c, t in dtypes.items() if not pd.api.types.is_numeric_dtype(t)]  # bools are numeric
    bad = [str(c) for c in keys]  # (a file without a header has integer column keys: the first is 0)
    if bad and len(df.head(1, npartitions=-1)) == 0:  # no row to infer a type from: every column an object
        raise ValueError(f"input {source!r} holds no rows of data, only its columns' names {list(map(str, dtypes))}.")
    if bad:  # one column named 'a;b;c': a file separated by something else than commas, not text
        found = _first_text(df, keys[0])
        where = f"of input {source!r}" + ("" if found is None else f" (column {bad[0]!r}, row {found[0]}: "
                                                                   f"{found[1]!r})")
        fix = next((f"Its fields look separated by {s!r}, not commas: write it with commas." for s in SEPARATORS
                    if len(dtypes) == 1 and s in bad[0]), None) or _text_fix(bad[0], found)
        raise not_numeric(bad, where, fix)
    # dtypes were inferred from the first rows; a later float in an int column must not fail the read, and a
    # True/False column is read as nullable booleans: numpy's bool would take a later empty field or other token
    # by its truthiness (NA becomes NaN and is refused; a token no boolean fails the read)
    df = _read(path, layout, dtype={c: "boolean" if pd.api.types.is_bool_dtype(t) else "float64"
                                    for c, t in dtypes.items()})
    if layout.header:
        _check_row_index(df, source)
    plain = all(isinstance(t, np.dtype) for t in df.dtypes)
    common = np.result_type(*df.dtypes) if plain else np.dtype(np.float64)  # nullable types: NA -> NaN
    try:  # lengths=True counts the rows of each partition (one read): the row chunks must be known
        return df.astype(common).to_dask_array(lengths=True)
    except EOFError as exc:
        raise ValueError(_cut_short(source, exc)) from None
    except ValueError as exc:  # a bad field or row further on (pandas' ParserError is one): the file named
        raise ValueError(f"input {source!r} is not a readable CSV file of numbers ({exc}).") from None


def _cut_short(source: str, exc: EOFError) -> str:
    """The refusal of a compressed CSV whose stream ends before its end marker: a file not written whole."""
    return (f"input {source!r} is cut short: its compressed data ends before the end of the stream ({exc}); the "
            "file was not written whole -- write it again.")


def csv_columns(path: str) -> tuple[str, ...] | None:
    """A CSV's column names from its header; None where its first line is data."""
    layout = Layout.of(path)
    if not layout.header:
        return None
    pd = require("pandas", "tables", "CSV files")
    with fsspec.open(path, "rt", compression="infer", encoding="utf-8-sig") as f:
        return tuple(str(c) for c in pd.read_csv(f, nrows=0, skiprows=layout.skip, skipinitialspace=True).columns)
