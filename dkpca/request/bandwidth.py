"""``fs_bandwidth``'s check: a size per second, read as Dask reads sizes.

Apart from :mod:`.checks` because ``dask.utils`` loads Dask, and :mod:`.checks`
is on the light path of ``dkpca --help`` (:class:`~dkpca.request.FitOptions`
checks its values with it).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from dask.utils import parse_bytes

from .checks import is_bool

__all__ = ["check_bandwidth"]


def check_bandwidth(name: str, value: Any) -> float | None:
    """Bytes per second > 0: a number, or a size per second as Dask writes sizes (``"100GB/s"``, ``"2 GiB/s"``)."""
    if value is None:
        return None
    number = None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            number = float(parse_bytes(text[:-2] if text.lower().endswith("/s") else text))
        except (ValueError, TypeError, OverflowError):  # OverflowError: a size past float's range (1e400)
            number = None
    elif isinstance(value, numbers.Real) and not is_bool(value):
        number = float(value)
    if number is None or not np.isfinite(number) or number <= 0:
        raise ValueError(f"{name}={value!r} is invalid; it must be None or a bandwidth in bytes per second > 0: a "
                         "number, or a size per second such as '100GB/s' or '2GiB/s'.")
    return number
