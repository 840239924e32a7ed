"""What dkpca's file readers share: the formats named in refusals, a member picked from a file of many and
checked 2-D, a file's stamp (part of dask's token), and the warning of chunks never written."""

from __future__ import annotations

import os
import warnings
from typing import Any

__all__ = ["READABLE", "AbsentChunksWarning", "file_stamp", "pick_member", "two_dimensional", "warn_absent"]

#: what dkpca reads, for messages about inputs it cannot read
READABLE = ("Zarr (a directory or URL), NumPy .npy, HDF5 'file.h5:/dataset', netCDF and other xarray-readable "
            "files 'file.nc:variable', Parquet, and CSV of numeric columns")


class AbsentChunksWarning(UserWarning):
    """Chunks of a user's Zarr array are not stored: zarr reads each as the array's fill value."""


def warn_absent(source: str, kind: str, absent: int, total: int, fill: Any, why: str) -> None:
    """Warn (:class:`AbsentChunksWarning`) that ``absent`` of the ``total`` chunks of an input were never stored:
    they read as ``fill``; ``why`` says what that may mean for this format."""
    if absent > 0:
        warnings.warn(f"input {source!r}: {absent} of {total} chunks of the {kind} are not stored, and each reads "
                      f"as its fill value {fill}; {why}: check the writer finished", AbsentChunksWarning, stacklevel=4)


def pick_member(source: str, kind: str, example: str, every: dict[str, tuple[int, ...] | str]) -> str:
    """The member to read when none is named (``every``: each member's shape, or what it holds if not numbers):
    ``X`` of any shape, as in a Zarr group (a wrong one is refused by its shape, not passed over for another),
    else the only 2-D one -- unless a member of more dimensions is beside it: a 3-D cube's 2-D bounds or
    calibration are no data to fit quietly."""
    x = next((m for m in every if m.lstrip("/") == "X"), None)
    if x is not None:
        return x
    names = sorted(m for m, shape in every.items() if isinstance(shape, tuple) and len(shape) == 2)
    bigger = sorted(m for m, shape in every.items() if isinstance(shape, tuple) and len(shape) > 2)
    if len(names) == 1 and not bigger:
        return names[0]
    if not names:  # naming one would not help: say what there is
        said = ", ".join(f"{m} {shape}" for m, shape in sorted(every.items())) or "none"
        raise ValueError(f"{kind} file {source!r} holds no 2-D {example} of numbers (its {example}s: {said}); "
                         f"write the data as one 2-D {example} (n_samples, n_features).")
    which = f"{len(names)} 2-D {example}s {names}" if len(names) > 1 else \
        f"one 2-D {example} {names[0]!r} {every[names[0]]} beside the larger {bigger}"
    raise ValueError(f"{kind} file {source!r} holds {which}; name the one to fit, e.g. '{source}:{names[0]}'.")


def two_dimensional(source: str, example: str, member: str, shape: tuple[int, ...]) -> None:
    """Refuse a named or picked member that is not 2-D, naming it (as_dask would say only "X")."""
    if len(shape) != 2:
        path = source[:-len(member) - 1] if source.endswith(f":{member}") else source  # the file, member named or not
        raise ValueError(f"input {source!r}: the {example} {member!r} has shape {shape}; dkpca fits a 2-D {example} "
                         f"(n_samples, n_features): reshape it, or name another, e.g. '{path}:name'.")


def file_stamp(path: str) -> tuple[int, int]:
    """``(mtime_ns, size)`` of a file: part of dask's token of its reader, so a rewritten file is new data."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size
