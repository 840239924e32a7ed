"""Blockwise construction of the Gram matrix K into a Zarr store.

K is symmetric, so only blocks ``(I, J)`` with ``I <= J`` are computed and
written; the operator reads each once and applies it and its transpose.  The
same task that writes a block also writes its row sums (and, for ``I < J``,
its column sums, i.e. the row sums of the mirrored block) into its own chunk of
``gram/partial_sums``, so the centering statistics come out of the build pass
at no extra read.

Crash safety.  Each block task writes whole chunks, each to a temporary file
renamed into place (:class:`dkpca.store.ChunkWriter`; zarr >= 3.1.3 does the
same on its own path), and only then writes its one-chunk marker in
``gram/done``.  A rerun trusts the markers and nothing else: a chunk
without a marker is recomputed, and recomputing is idempotent (same
inputs, same bytes), so a task that dask runs twice is harmless.

Codec.  Measured on a 4096^2 float32 rbf block (this machine, zarr 3.1):
uncompressed 1.00x size; blosc-lz4+shuffle 1.13x; zstd-1 1.14x;
blosc-lz4+bitshuffle 1.23x.  Kernel values are dense, high-entropy floats:
a 10-20 % saving does not pay for compressing on every write and decompressing
on every one of the tens of solver passes (reads are the per-pass cost), so K
is stored uncompressed.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

from . import store as _store
from ._compute import compute
from ._workspace import scratch
from .io import Fingerprint
from .kernels import Kernel, from_dict

__all__ = ["GramInfo", "build_gram", "open_gram", "gram_bytes", "InsufficientDiskSpace", "block_bounds"]


class InsufficientDiskSpace(OSError):
    """The Gram store would not fit in the free space of its filesystem."""


@dataclass
class GramInfo:
    """A complete Gram store and the centering statistics built with it.

    Attributes
    ----------
    path : str
        Store root.
    n, block : int
        Matrix size and square chunk edge.
    dtype : numpy.dtype
        Storage precision of K.
    kernel : Kernel
        The (resolved) kernel K was built with.
    row_sums : ndarray of shape (n,)
        ``K @ 1`` of the stored (rounded) K, float64.
    diag_sum : float
        ``trace(K)``.
    reused_blocks, computed_blocks : int
        Blocks found complete in the store vs evaluated by this call.
    """

    path: str
    n: int
    block: int
    dtype: np.dtype
    kernel: Kernel
    row_sums: np.ndarray
    diag_sum: float
    reused_blocks: int = 0
    computed_blocks: int = 0
    build_seconds: float = 0.0
    probe_product: np.ndarray | None = None

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.block)

    def K(self) -> zarr.Array:
        return zarr.open_array(self.path, path="gram/K", mode="r")


def block_bounds(n: int, block: int) -> list[tuple[int, int]]:
    return [(s, min(s + block, n)) for s in range(0, n, block)]


def gram_bytes(n: int, block: int, dtype: Any) -> int:
    """Bytes on disk of the upper-triangular blocks of K (uncompressed)."""
    bounds = block_bounds(n, block)
    itemsize = np.dtype(dtype).itemsize
    return sum((i1 - i0) * (j1 - j0) * itemsize for a, (i0, i1) in enumerate(bounds) for (j0, j1) in bounds[a:])


def _build_block(out: dict[str, _store.ChunkWriter], I: int, J: int, XI: np.ndarray, XJ: np.ndarray,
                 kernel_spec: dict, dtype: str, probe_I: np.ndarray | None = None,
                 probe_J: np.ndarray | None = None):
    """Evaluate block (I, J), write it, its sums and then its done marker.

    With probes, also return the block's contributions to ``K @ probe`` (the
    solver's first product, fused into the build while the block is in cache).
    """
    kernel = from_dict(kernel_spec)
    buf = scratch("gram-block", (XI.shape[0], XJ.shape[0]), dtype)
    blk = kernel.block(XI, None if I == J else XJ, dtype, out=buf)
    row_sums = np.empty(blk.shape[0], np.float64)
    col_sums = np.zeros(blk.shape[1], np.float64) if I != J else None

    def sums(s: int, e: int) -> None:
        # Exact float64 sums of the stored values, so that the operator is
        # exactly the centred fl32(K) (tested to 1e-10): each cache-sized
        # strip is widened once into a reused buffer and reduced by GEMV
        # (measured 18 ms a 4000^2 block vs 26 ms for numpy's casting sums).
        wide = scratch("gram-strip", (e - s, blk.shape[1]), np.float64)
        np.copyto(wide, blk[s:e])
        np.matmul(wide, _ones(blk.shape[1]), out=row_sums[s:e])
        if col_sums is not None:
            col_sums[:] += _ones(e - s) @ wide

    out["K"].write((I, J), blk, visit=sums)
    out["partial_sums"].write((J, I), row_sums[None])
    if I != J:
        out["partial_sums"].write((I, J), col_sums[None])
    else:
        out["diag"].write((I,), np.ascontiguousarray(np.diagonal(blk)))
    # The marker goes last: only a block whose data and sums are all on disk
    # is ever trusted by a rerun.
    out["done"].write((I, J), np.ones((1, 1), np.uint8))
    if probe_I is None:
        return None
    from .operator import block_products

    return block_products(blk, probe_I, probe_J, I != J)


#: K larger than this fraction of the machine's memory is written with O_DIRECT
DIRECT_IO_FRACTION = 0.5


def use_direct_io(nbytes: int) -> bool:
    """Whether the Gram build writes K with ``O_DIRECT``.

    Dask config ``dkpca.direct-io``: ``True``/``False``, or ``"auto"`` (the
    default): direct when K exceeds ``DIRECT_IO_FRACTION`` of this machine's
    memory.  Such a K will not stay in the page cache for the solver's passes
    anyway, and buffered, its build is bound by dirty-page writeback.
    Measured here (24 GB): at n = 60,000 (K 7.7 GB) O_DIRECT halves the build
    (8.6 s vs 14.6 s) but the first pass then fills the page cache itself
    (13.8 s vs 6.2 s), a net loss; so only a K too large to cache goes
    direct.  On a cluster this is the client's memory, a proxy for the
    workers'.
    """
    import dask
    import psutil

    mode = dask.config.get("dkpca.direct-io", "auto")
    if isinstance(mode, bool):
        return mode
    if str(mode).lower() in ("true", "false"):
        return str(mode).lower() == "true"
    return nbytes > DIRECT_IO_FRACTION * psutil.virtual_memory().total


def _ones(m: int) -> np.ndarray:
    v = scratch("gram-ones", (m,), np.float64)
    v[:] = 1.0
    return v


def _describe_mismatch(attrs: dict, want: dict) -> str:
    diffs = []
    for key in ("fingerprint", "kernel", "block", "dtype"):
        if attrs.get(key) != want[key]:
            label = {"fingerprint": "data X"}.get(key, key)
            diffs.append(f"{label} differs (store: {attrs.get(key)!r}, now: {want[key]!r})")
    return "; ".join(diffs)


def check_disk_space(path: str, needed: int) -> None:
    """Raise :class:`InsufficientDiskSpace` if ``needed`` bytes will not fit."""
    if _store.is_url(path):
        return
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(os.path.abspath(probe))
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise InsufficientDiskSpace(
            errno.ENOSPC,
            f"the Gram store needs {needed / 1e9:.2f} GB but {probe!r} has {free / 1e9:.2f} GB free; "
            "choose a store on a larger filesystem (store=...), use dtype='float32', "
            "or a matrix-free solver that stores no Gram matrix",
        )


def open_gram(path: str) -> GramInfo:
    """Open a complete Gram store (``ValueError`` if it is incomplete)."""
    root = _store.open_existing(path)
    g = root["gram"]
    a = dict(g.attrs)
    if not a.get("complete"):
        raise ValueError(f"the Gram matrix in {path!r} is incomplete; rerun the fit to finish building it.")
    return GramInfo(
        path=path, n=a["n"], block=a["block"], dtype=np.dtype(a["dtype"]), kernel=from_dict(a["kernel"]),
        row_sums=g["row_sums"][:], diag_sum=float(a["diag_sum"]),
    )


def build_gram(
    path: str,
    X: da.Array,
    kernel: Kernel,
    fingerprint: Fingerprint,
    dtype: Any = np.float32,
    overwrite: bool = False,
    probe: np.ndarray | None = None,
) -> GramInfo:
    """Build (or reuse, or finish) the Gram matrix of ``X`` in store ``path``.

    Parameters
    ----------
    path : str
        Store root (created if absent).
    X : dask array of shape (n, d)
        Row chunks all equal to the block edge (the last may be shorter).
    kernel : Kernel
        Resolved kernel (no data-dependent defaults left).
    fingerprint : Fingerprint
        Identity of X, recorded in the store and compared on reuse.
    dtype : {float32, float64}
        Storage precision of K.
    overwrite : bool
        Rebuild even if the store holds K for other data or another kernel.
    probe : ndarray of shape (n, l), optional
        If given and every block is computed by this call, ``K @ probe`` is
        accumulated during the build and returned as ``GramInfo.probe_product``
        (a solver's first pass for free).  float32 probes give a
        single-precision product.

    Raises
    ------
    ValueError
        The store holds K of other data, kernel, chunking or dtype and
        ``overwrite`` is False.
    InsufficientDiskSpace
        K would not fit on the store's filesystem.
    """
    import time

    t0 = time.perf_counter()
    dtype = np.dtype(dtype)
    n = X.shape[0]
    block = X.chunks[0][0]
    nb = len(X.chunks[0])
    want = {"fingerprint": fingerprint.to_dict(), "kernel": kernel.to_dict(), "block": block,
            "dtype": dtype.name, "n": n}
    root = _store.create_or_open(path)
    done = None
    if "gram" in root:
        attrs = dict(root["gram"].attrs)
        mismatch = _describe_mismatch(attrs, want)
        if mismatch and not overwrite:
            raise ValueError(
                f"store {path!r} holds a Gram matrix that does not match this fit: {mismatch}. "
                "Pass overwrite=True (CLI: --overwrite) to rebuild it, or choose another store."
            )
        if mismatch or overwrite:
            _store.remove_member(root, "gram")
            _store.remove_member(root, "model")
        else:
            done = root["gram"]["done"][:]
    if done is None:
        check_disk_space(path, gram_bytes(n, block, dtype))
        g = root.create_group("gram")
        # Attributes first: an interrupted build is then recognisable as ours.
        g.attrs.update(_store.json_safe({**want, "complete": False}))
        g.create_array("K", shape=(n, n), chunks=(block, block), dtype=dtype, compressors=None,
                       fill_value=0.0)
        g.create_array("partial_sums", shape=(nb, n), chunks=(1, block), dtype="float64",
                       compressors=None, fill_value=0.0)
        g.create_array("diag", shape=(n,), chunks=(block,), dtype=dtype, compressors=None, fill_value=0.0)
        g.create_array("done", shape=(nb, nb), chunks=(1, 1), dtype="uint8", compressors=None, fill_value=0)
        g.create_array("row_sums", shape=(n,), chunks=(block,), dtype="float64", compressors=None,
                       fill_value=0.0)
        done = np.zeros((nb, nb), dtype=np.uint8)
    g = root["gram"]
    todo = [(I, J) for I in range(nb) for J in range(I, nb) if not done[I, J]]
    total = nb * (nb + 1) // 2
    probe_product = None
    if todo:
        rows = X.to_delayed().ravel()
        spec = kernel.to_dict()
        out = {name: _store.ChunkWriter.of(path, g[name]) for name in ("partial_sums", "diag", "done")}
        direct = use_direct_io(gram_bytes(n, block, dtype))
        out["K"] = _store.ChunkWriter.of(path, g["K"], direct=direct)
        # A direct write blocks its thread for the whole transfer without
        # using a core: twice as many threads as cores keep the cores busy.
        threads = 2 * (os.cpu_count() or 1) if direct else None
        bounds = block_bounds(n, block)
        fuse = probe is not None and len(todo) == total
        pieces = [dask.delayed(probe[a:b], pure=True) for a, b in bounds] if fuse else [None] * nb
        tasks = [
            dask.delayed(_build_block, pure=True, nout=2 if fuse else None)(
                out, I, J, rows[I], rows[J], spec, dtype.name, pieces[I], pieces[J],
                dask_key_name=f"dkpca-gram-{I}-{J}-{fingerprint.checksum[:8]}")
            for I, J in todo
        ]
        label = f"Gram matrix: {len(todo)} of {total} blocks to compute"
        if fuse:
            from .operator import scatter_sum

            # every block task feeds some row block's sum, so this builds all of K
            probe_product = np.concatenate(compute(*scatter_sum(todo, tasks, nb), label=label, threads=threads),
                                           axis=0)
        else:
            compute(*tasks, label=label, threads=threads)
    if not g.attrs.get("complete"):
        row_sums = np.empty(n, dtype=np.float64)
        ps = g["partial_sums"]
        for s in range(0, n, block):
            row_sums[s:s + block] = ps[:, s:s + block].sum(axis=0)
        g["row_sums"][:] = row_sums
        diag_sum = float(np.sum(g["diag"][:], dtype=np.float64))
        g.attrs.update({"complete": True, "diag_sum": diag_sum})
    info = open_gram(path)
    info.reused_blocks = total - len(todo)
    info.computed_blocks = len(todo)
    info.build_seconds = time.perf_counter() - t0
    info.probe_product = probe_product
    return info
