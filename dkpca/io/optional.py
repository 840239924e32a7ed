"""Optional readers: import one, or say which extra installs it; quiet a reader's failed open."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["quiet_teardown", "require"]


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` (a reader ``what`` needs), or raise ImportError naming ``pip install 'dkpca[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"reading {what} needs {module.split('.')[0]}, which is not installed: "
                          f"pip install 'dkpca[{extra}]' (or 'dkpca[formats]' for every format).") from exc


@contextlib.contextmanager
def quiet_teardown(module: str) -> Iterator[None]:
    """Drop the errors that finalisers of ``module``'s objects raise while the block runs and as it ends.

    h5netcdf's ``File`` half-made by an open that failed (a damaged netCDF file) raises ``AttributeError:
    '_writable'`` from its ``__del__``, which Python prints as a traceback on stderr -- after dkpca's one-line
    refusal.  Such an object is freed when the exception that holds it is, at the end of the caller's ``except``
    inside the block (no collection needed: a ``gc.collect()`` here cost 76 ms a netCDF open); the caller raises
    its refusal after the block, so no exception keeps it alive past the hook.
    """
    hook = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        if not getattr(unraisable.object, "__module__", "").startswith(module):
            hook(unraisable)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        sys.unraisablehook = hook
