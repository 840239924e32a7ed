"""The chunks a sharded Zarr v3 array holds: each shard's index read, where zarr counts a shard as all of its chunks.

zarr's ``nchunks_initialized`` multiplies the shards stored by the chunks per shard, so a shard its writer
stopped filling part way (its other chunks read as the fill value) counts as whole, and the absent chunks of a
user's array go unsaid.  A shard's index (the last or first bytes of it: an (offset, length) pair of little-endian
uint64 per chunk, 2**64 - 1 for a chunk not in it, then a CRC-32C) says which chunks it holds; zarr has no
public call that reads it, so this module does, for the index codecs zarr writes by default only, and says
nothing (None) for any other -- the one place dkpca reads zarr's bytes itself.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import numpy as np
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

__all__ = ["stored_chunks"]

#: an index entry of a chunk the shard does not hold
EMPTY = np.uint64(2**64 - 1)
#: shards whose indexes are read at most (one small read each); past it, zarr's own count is what there is
MAX_SHARDS = 4096


def _value(choice: object) -> object:
    """An enum's value (zarr's ``Endian``, ``ShardingCodecIndexLocation``), or the choice itself."""
    return getattr(choice, "value", choice)


def stored_chunks(arr: zarr.Array) -> int | None:
    """How many of ``arr``'s chunks (within its shape) its stored shards hold; None for an array without shards,
    with index codecs other than zarr's defaults, or of more than :data:`MAX_SHARDS` shards."""
    codec = arr.metadata.codecs[0] if arr.metadata.zarr_format == 3 and arr.metadata.codecs else None
    if not isinstance(codec, ShardingCodec) or arr.shards is None:
        return None
    kinds = tuple(type(c) for c in codec.index_codecs)
    little = _value(codec.index_codecs[0].endian) in (None, "little")
    if kinds not in ((BytesCodec,), (BytesCodec, Crc32cCodec)) or not little:
        return None
    per = tuple(s // c for s, c in zip(arr.shards, arr.chunks, strict=True))
    grid = tuple(-(-n // s) for n, s in zip(arr.shape, arr.shards, strict=True))
    if math.prod(grid) > MAX_SHARDS:
        return None
    entries = 16 * math.prod(per)
    size = entries + 4 * (len(kinds) == 2)
    request = RangeByteRequest(0, size) if _value(codec.index_location) == "start" else SuffixByteRequest(size)
    shards = list(itertools.product(*map(range, grid)))

    async def index(coords: tuple[int, ...]) -> np.ndarray | None:
        where = arr.store_path / arr.metadata.encode_chunk_key(coords)
        found = await where.get(prototype=default_buffer_prototype(), byte_range=request)
        return None if found is None else np.frombuffer(found.to_bytes()[:entries], "<u8").reshape(*per, 2)

    async def every() -> list[np.ndarray | None]:
        return await asyncio.gather(*map(index, shards))

    chunks = tuple(-(-n // c) for n, c in zip(arr.shape, arr.chunks, strict=True))  # the chunk grid within the shape
    held = 0
    for coords, found in zip(shards, sync(every()), strict=True):
        if found is not None:  # a chunk of an edge shard past the array's shape is never stored: not counted
            inside = np.ix_(*(np.arange(p) + s * p < c for p, s, c in zip(per, coords, chunks, strict=True)))
            held += int(((found[..., 0] != EMPTY)[inside]).sum())
    return held
