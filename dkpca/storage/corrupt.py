"""A damaged chunk, named: the error every reader of dkpca's arrays raises, and the checks that raise it.

Kept apart from :mod:`.integrity` (how arrays are written and read) so the
error's wording lives in one place: what is wrong with the chunk (missing,
truncated, failing its CRC-32C, not the one written there) and what a rerun
does about it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CorruptChunkError", "TrailerOnlyError", "CRC_MISMATCH", "unreadable", "size_problem", "verify_crc",
           "verify_digest"]

#: what a chunk failing its CRC-32C is called, whichever path read it (zarr's codec or the raw one)
CRC_MISMATCH = "corrupt (its CRC-32C checksum does not match)"


class CorruptChunkError(ValueError):
    """A chunk dkpca wrote is missing, of the wrong size, or fails its checksum.

    ``array`` is the array's path in the store (``gram/K``), ``chunk`` the
    chunk's grid coordinates, or None for a problem of the whole array (its
    metadata: ``problem`` then names the fix itself).  Picklable with its
    fields, so it crosses from a distributed worker to the client unchanged.
    """

    def __init__(self, store: str, array: str, chunk: tuple[int, ...] | None, problem: str) -> None:
        self.store, self.array, self.problem = store, array, problem
        self.chunk = None if chunk is None else tuple(chunk)
        # a user's array at the root of its store (``x.zarr``) has the path '': the array is the store
        what = f"array {array!r} in {store!r}" if array else f"array {store!r}"
        if self.chunk is None:
            super().__init__(f"{what} {problem}")
            return
        where = ", ".join(map(str, self.chunk))
        top = array.split("/", 1)[0].split(".", 1)[0]
        fix = {"data": "; the store's copy of the data is damaged: rerun the fit on the same input to write it "
                       "again (a copy without recorded chunk digests: with overwrite=True, CLI --overwrite)",
               "model": "; the model is damaged: rerun the fit to solve again",
               "gram": "; a rerun of the fit recomputes that block"}.get(top, "")
        super().__init__(f"chunk ({where}) of {what} is {problem}{fix}")

    def __reduce__(self) -> tuple:
        return type(self), (self.store, self.array, self.chunk, self.problem)


class TrailerOnlyError(CorruptChunkError):
    """A chunk whose CRC-32C trailer fails but whose values are the ones written (their recorded digest matches).

    dkpca's reads of such a chunk check the digest, so they read it
    correctly; only a read through zarr alone would refuse it.  ``dkpca
    verify`` says so rather than calling the store damaged.
    """


def unreadable(exc: Exception) -> str:
    """What a zarr read's exception says of a chunk, without the codec's raw bytes (zarr's words vary)."""
    if "checksum" in str(exc).lower():  # the crc32c codec: 'Stored and computed checksum do not match. ...'
        return CRC_MISMATCH
    return f"unreadable ({type(exc).__name__}: {exc})"


def size_problem(size: int, want: int) -> str | None:
    """What a chunk file of ``size`` bytes is, where dkpca's layout stores ``want``; None if that is its size."""
    if size == want:
        return None
    return f"truncated ({size} of {want} bytes)" if size < want else f"{size} bytes, not {want}"


def verify_crc(store: str, array: str, coords: tuple[int, ...], crc: int, trailer: Any,
               values_intact: bool = False) -> None:
    """Raise :class:`CorruptChunkError` unless ``crc`` (the content's) equals the stored ``trailer``.

    ``values_intact``: the content already matched its recorded digest, so
    only the trailer is damaged (:class:`TrailerOnlyError`).
    """
    if crc != int.from_bytes(bytes(trailer), "little"):
        if values_intact:
            raise TrailerOnlyError(store, array, coords, "intact, but its CRC-32C trailer is damaged (its values match "
                                                         "the digest recorded when it was written)")
        raise CorruptChunkError(store, array, coords, CRC_MISMATCH)


def verify_digest(store: str, array: str, coords: tuple[int, ...], got: int, expect: int) -> None:
    """Raise :class:`CorruptChunkError` unless the content's digest ``got`` is the one recorded, ``expect``."""
    if got != expect:
        raise CorruptChunkError(store, array, coords, "not what was written there (its digest differs from the one "
                                                      "recorded when it was written: corrupt, or another chunk's data)")
