"""What lies at a transform output's path: dkpca's output (its record, chunks, debris) or something to refuse.

:mod:`dkpca.storage.outputs` decides from it what to write, resume or
replace.  The files of a transform's writer lock (``.dkpca.lock`` and its
claims and temporaries, :mod:`dkpca.storage.lock`) are the output's own while
a transform writes it: neither foreign nor zarr's debris.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from .lock import LOCK_NAME
from .paths import exists, is_url, url_fs

__all__ = ["KEY", "OUTPUT_FORMAT_VERSION", "HeadlessOutputError", "NotAnOutputError", "OutputState", "chunk_grid",
           "output_state"]

#: the attribute that marks a Zarr array as a dkpca transform output
KEY = "dkpca_transform"
OUTPUT_FORMAT_VERSION = 1

_CHUNK = re.compile(r"c/(\d+)/(\d+)")
#: zarr's temporary of a key being written (``zarr/storage/_local.py``: the key's suffix replaced by
#: ``.<uuid hex>.partial``, so ``zarr.json`` -> ``zarr.<hex>.partial``): debris of a write that was killed
_PARTIAL = re.compile(r"(?P<key>zarr|c/\d+/\d+)\.[0-9a-f]{32}\.partial")
#: the writer lock of a transform (:mod:`dkpca.storage.lock`): the lock, its claims, its temporaries
_LOCK = re.compile(re.escape(LOCK_NAME) + r"(\..*)?")


class NotAnOutputError(ValueError):
    """The output path holds something that dkpca did not write as a transform output."""


class HeadlessOutputError(NotAnOutputError):
    """The output path holds a 2-D Zarr array's chunk files whose metadata (``zarr.json``) is lost or unreadable:
    perhaps a transform output, which dkpca can no longer tell (``dkpca verify`` and ``info`` say so too)."""


def chunk_grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    """How many chunks of ``chunks`` cover ``shape``, per dimension."""
    return tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))


@dataclass(frozen=True)
class OutputState:
    """A transform output as found: its record, shape, chunks, which chunk files are there, and other files."""

    path: str
    record: dict[str, Any]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    present: frozenset[tuple[int, ...]]
    foreign: tuple[str, ...]  # files dkpca did not write
    debris: tuple[str, ...]  # zarr's temporaries of our keys

    @property
    def total(self) -> int:
        return int(np.prod(chunk_grid(self.shape, self.chunks)))

    @property
    def complete(self) -> bool:
        """Marked complete, and every chunk file there."""
        return bool(self.record.get("complete")) and len(self.present) == self.total

    def missing(self) -> list[tuple[int, ...]]:
        return [c for c in np.ndindex(*chunk_grid(self.shape, self.chunks)) if c not in self.present]


def _files(path: str) -> list[str]:
    """Every file under ``path``, relative to it (``[""]``: ``path`` is itself a file)."""
    fs, where = url_fs(path)
    where = where.rstrip("/")
    if is_url(path):
        fs.invalidate_cache(where)  # what other processes wrote since this instance last listed
    if fs.isfile(where):
        return [""]
    return sorted(p[len(where) + 1:] for p in fs.find(where) if p.startswith(where + "/"))


def _not_ours(shown: str, what: str) -> NotAnOutputError:
    return NotAnOutputError(
        f"output {shown!r} exists and is not a dkpca transform output (it is {what}); dkpca writes a new output "
        "or replaces one it wrote, and never removes files it did not write: choose another output path, or "
        "remove it yourself.")


def _headless(shown: str, files: list[str]) -> HeadlessOutputError:
    lost = "unreadable" if "zarr.json" in files else "missing"
    return HeadlessOutputError(
        f"output {shown!r} holds a Zarr array's chunk files, but its metadata (zarr.json) is {lost}, so dkpca "
        "cannot tell whether it is a transform output it wrote, and neither reads nor replaces it: restore that "
        "file from a backup, or remove the directory yourself and run the transform again.")


def _zarr_node(path: str) -> zarr.Array | zarr.Group | None:
    try:
        return zarr.open(path, mode="r")
    except Exception:  # no Zarr metadata (yet): a file, a directory of files, or an empty directory
        return None


def _open_node(path: str, shown: str) -> zarr.Array | zarr.Group | None:
    """The Zarr node at ``path``; None for nothing there (only dkpca's lock, zarr's temporaries).

    A ``zarr.json`` listed after the open failed was written meanwhile -- by another transform creating the same
    output, which its lock then names -- and is read again; before, that transform was called "a directory of
    other files".
    """
    node = _zarr_node(path)
    if node is None and "zarr.json" in _files(path):
        node = _zarr_node(path)
    if node is not None:
        return node
    listed = [f for f in _files(path) if not _LOCK.fullmatch(f)]
    if all(_PARTIAL.fullmatch(f) for f in listed):  # nothing, or only zarr's temporary of a killed creation
        return None
    if any(_CHUNK.fullmatch(f) for f in listed) and all(
            f == "zarr.json" or _CHUNK.fullmatch(f) or _PARTIAL.fullmatch(f) for f in listed):
        raise _headless(shown, listed)
    raise _not_ours(shown, "a file" if listed == [""] else "a directory of other files")


def output_state(path: str, shown: str | None = None) -> OutputState | None:
    """The transform output at ``path`` (``shown``: the path as the user wrote it); None if nothing is there.

    An empty directory counts as nothing (there is nothing in it to lose).
    Only an output is listed file by file: a store or a user's directory is
    refused from its metadata, however many files it holds.

    Raises
    ------
    NotAnOutputError
        Something is there that is not a transform output dkpca wrote.
    """
    shown = path if shown is None else shown
    if not exists(path):
        return None
    node = _open_node(path, shown)
    if node is None:
        return None
    if isinstance(node, zarr.Group):
        raise _not_ours(shown, "a dkpca store" if node.attrs.get("format") == "dkpca-store" else "a Zarr group")
    record = node.attrs.get(KEY)
    if not isinstance(record, dict) or record.get("format_version") != OUTPUT_FORMAT_VERSION or node.ndim != 2:
        raise _not_ours(shown, "a Zarr array that 'dkpca transform' did not write")
    shape, chunks = tuple(node.shape), tuple(node.chunks)
    grid = chunk_grid(shape, chunks)
    present, foreign, debris = set(), [], []
    for f in _files(path):
        m = _CHUNK.fullmatch(f)
        if f == "zarr.json" or _LOCK.fullmatch(f):
            continue
        if m and all(int(i) < g for i, g in zip(m.groups(), grid, strict=True)):
            present.add(tuple(int(i) for i in m.groups()))
        elif _PARTIAL.fullmatch(f):
            debris.append(f)
        else:
            foreign.append(f)
    return OutputState(path, record, shape, chunks, frozenset(present), tuple(foreign), tuple(debris))
