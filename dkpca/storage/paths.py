"""Where paths meet: absolute paths, and refusing writes that would destroy what is being read.

dkpca never deletes or overwrites a file the user did not ask it to: an
output may not be, contain or lie inside an input or a store, and an
existing output is replaced only on request -- and then only if it is a
Zarr node (never a directory of other files).
"""

from __future__ import annotations

import os

import zarr

from .fitstore import absolute, exists, relation

__all__ = ["absolute", "relation", "check_output", "check_apart"]


_WORDS = {"same": "is", "inside": "lies inside", "contains": "contains"}


def check_apart(name: str, path: str | os.PathLike, others: dict[str, str | os.PathLike | None]) -> None:
    """``ValueError`` if ``path`` is, contains or lies inside any of ``others`` (name -> path)."""
    for other_name, other in others.items():
        if other is None:
            continue
        rel = relation(path, other)
        if rel is not None:
            raise ValueError(f"{name} {os.fspath(path)!r} {_WORDS[rel]} the {other_name} {os.fspath(other)!r}; "
                             f"writing there would destroy data that is being read. Choose another {name}.")


def check_output(output: str | os.PathLike, others: dict[str, str | os.PathLike | None], overwrite: bool) -> str:
    """The absolute output path, after refusing every write that could destroy data.

    Refused always: an output that is, contains or lies inside one of
    ``others`` (inputs and stores).  Refused without ``overwrite``: an
    existing output.  Refused even with it: an existing output that is not a
    Zarr array or group (``--overwrite`` replaces projections, not a directory
    of someone's files).
    """
    out = absolute(output)
    check_apart("output", out, others)
    if not exists(out):  # local or URL: an object store's output is refused the same way
        return out
    if not overwrite:
        raise FileExistsError(f"output {os.fspath(output)!r} already exists; choose another path, or pass "
                              "--overwrite (overwrite=True) to replace it.")
    try:
        zarr.open(out, mode="r")
    except Exception:
        raise ValueError(f"output {os.fspath(output)!r} exists and is not a Zarr array or group; --overwrite "
                         "replaces earlier projections only. Choose another path.") from None
    return out
