"""The one conversion of dkpca's values to JSON types (store attributes, ``dkpca info --json``, the plan),
and of stored strings to printable text (``printable``: control characters escaped).

Its own module, importing only numpy, so that the CLI's ``info`` (and ``--help``) loads neither Zarr nor
Dask to print JSON, and the store, the planner and the CLI convert alike.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

import numpy as np

__all__ = ["json_safe", "printable"]


def json_safe(obj: Any, *, nonfinite_null: bool = False) -> Any:
    """``obj`` in JSON types: dicts (keys as strings), lists, str, int, float, bool and None.

    numpy scalars and arrays become Python numbers and lists, tuples lists, an ``Enum`` its value (a
    ``StrEnum`` a plain ``str``).  Non-finite floats stay floats (zarr writes them, and a stored report
    round-trips) unless ``nonfinite_null``: strict JSON (RFC 8259, ``allow_nan=False``) has no NaN, and
    strict parsers reject Python's extension, so printed JSON has ``null`` there.

    Raises
    ------
    TypeError
        ``obj`` holds a value with no JSON form (named): writing its ``str`` would store a quiet wrong value.
    """
    if isinstance(obj, dict):
        return {str(k): json_safe(v, nonfinite_null=nonfinite_null) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, nonfinite_null=nonfinite_null) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist(), nonfinite_null=nonfinite_null)
    if isinstance(obj, Enum):  # before str and int: a StrEnum or IntEnum is written as its plain value
        return json_safe(obj.value, nonfinite_null=nonfinite_null)
    if obj is None or isinstance(obj, (bool, np.bool_)):
        return None if obj is None else bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return None if nonfinite_null and not math.isfinite(value) else value
    if isinstance(obj, str):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} object {obj!r} has no JSON form; convert it to a number, string, "
                    "list or dict first.")


def printable(value: Any) -> str:
    """``str(value)`` with control characters escaped: stored strings never drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))
