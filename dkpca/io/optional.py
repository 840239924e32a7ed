"""Optional readers: import one, or say which extra installs it."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["require"]


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` (a reader ``what`` needs), or raise ImportError naming ``pip install 'dkpca[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"reading {what} needs {module.split('.')[0]}, which is not installed: "
                          f"pip install 'dkpca[{extra}]' (or 'dkpca[formats]' for every format).") from exc
