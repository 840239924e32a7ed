"""Blockwise construction of the Gram matrix K into a Zarr store.

K is symmetric, so only blocks ``(I, J)`` with ``I <= J`` are computed and
written; the operator reads each once and applies it and its transpose.  The
same task that writes a block also writes its row sums (and, for ``I < J``,
its column sums, i.e. the row sums of the mirrored block) into its own chunk of
``gram/partial_sums``, so the centering statistics come out of the build pass
at no extra read.

Crash safety.  Each block task writes whole chunks, each to a temporary file
renamed into place (:class:`dkpca.storage.GramWriters`; zarr >= 3.1.3 does the
same on its own path), and only then its done marker.  A rerun trusts the markers and nothing else: a chunk
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

import time
from typing import Any

import dask.array as da
import numpy as np

from .execution import compute, placed, placement
from .io import Fingerprint
from .kernels import Kernel, NonFiniteKernelError, largest_value
from .linalg import (
    TaskGraph,
    block_bounds,
    block_products,
    formed_block_products,
    pair_weights,
    retire,
    scatter_sum,
    scratch,
    touched_rows,
)
from .machine import cores
from .storage import FitStore, GramInfo, GramStore, GramWriters, Lease, gram_bytes, use_direct_io
from .storage.growth import damaged_gram_of_prefix

__all__ = ["build_gram", "gram_identity", "refuse_other_gram"]


def _ones(m: int) -> np.ndarray:
    v = scratch("gram-ones", (m,), np.float64)
    v[:] = 1.0
    return v


def _build_block(out: GramWriters, I: int, J: int, XI: np.ndarray, XJ: np.ndarray, kernel: Kernel, dtype: str,
                 probe_I: np.ndarray | None = None, probe_J: np.ndarray | None = None):
    """Evaluate block (I, J), write it, its sums and then its done marker.

    With probes, also return the block's contributions to ``K @ probe`` (the
    solver's first product, fused into the build while the block is in cache).
    """
    buf = scratch("gram-block", (XI.shape[0], XJ.shape[0]), dtype)
    formed = _formed(kernel, XI, XJ, dtype, I == J, buf, probe_I, probe_J)
    if formed is not None:
        # the block, its sums (and a float64 probe's products) from one call without the GIL: written whole
        blk, row_sums, col_sums, products = formed
    else:  # formed strip by strip; its sums taken by the writer's visit, each strip while it is in cache
        blk = kernel.block(XI, None if I == J else XJ, dtype, out=buf)
        row_sums = np.empty(blk.shape[0], np.float64)
        col_sums = np.zeros(blk.shape[1], np.float64) if I != J else None
        products = None

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

    def finite() -> None:
        # a non-finite entry makes its row's (float64) sum non-finite: the
        # check costs nothing beyond the sums the build takes anyway
        if not (np.isfinite(row_sums).all() and (col_sums is None or np.isfinite(col_sums).all())):
            raise NonFiniteKernelError.of(f"kernel block ({I}, {J})", kernel.to_dict(),
                                          largest_value("its rows'", XI, XJ))

    out.write_block(I, J, blk, row_sums, col_sums, visit=None if formed is not None else sums, check=finite)
    if probe_I is None or products is not None:
        return products
    # the probe's product apart (a single-precision one, or not formed); a side where the probe is zero (an
    # update's, on its new rows) is not multiplied: half of each computed block's GEMM there
    VI, VJ = (p if p.any() else None for p in (probe_I, probe_J))
    if VI is None and VJ is None:
        width = probe_I.shape[1]
        return np.zeros((blk.shape[0], width)), np.zeros((blk.shape[1], width)) if I != J else None
    return block_products(blk, VI, VJ, I != J)


def _formed(kernel: Kernel, XI: np.ndarray, XJ: np.ndarray, dtype: str, same: bool, buf: np.ndarray,
            probe_I: np.ndarray | None, probe_J: np.ndarray | None) -> tuple | None:
    """``(blk, row_sums, col_sums, probe products or None)`` by :func:`formed_block_products`, or None (form it
    as usual).

    The sums are the products with a column of ones, put first beside the
    probe's columns: exact float64 sums of the stored values, as the strip loop's.
    """
    # a single-precision probe is not fused: its float32 product is made apart from the formed block
    fused = probe_I is not None and probe_I.dtype == np.float64 and probe_J.dtype == np.float64
    VI, VJ = (np.hstack([np.ones((len(X), 1)), p]) if fused else np.ones((len(X), 1))
              for X, p in ((XI, probe_I), (XJ, probe_J)))
    formed = formed_block_products(kernel, XI, XJ, dtype, same, buf, VI, VJ)
    if formed is None:
        return None
    blk, yI, yJ = formed
    products = (yI[:, 1:], None if same else yJ[:, 1:]) if fused else None
    return blk, np.ascontiguousarray(yI[:, 0]), None if same else np.ascontiguousarray(yJ[:, 0]), products


def gram_identity(X: da.Array, kernel: Kernel, fingerprint: Fingerprint, dtype: Any) -> dict[str, Any]:
    """What a stored K is of (fingerprint, kernel, block, dtype, n): recorded by the build, compared on reuse."""
    return {"fingerprint": fingerprint.to_dict(), "kernel": kernel.to_dict(), "block": X.chunks[0][0],
            "dtype": np.dtype(dtype).name, "n": X.shape[0]}


def refuse_other_gram(store: FitStore, X: da.Array, kernel: Kernel, fingerprint: Fingerprint, dtype: Any) -> None:
    """Raise ``ValueError`` where ``store`` holds K of another kernel, precision, tile or data than this
    build's (what :func:`build_gram` refuses without ``overwrite``), before a fit says anything."""
    want = gram_identity(X, kernel, fingerprint, dtype)
    if not damaged_gram_of_prefix(store, want):  # this data's own K of earlier rows, damaged: the build remakes it
        GramStore(store).refuse_other(want)


def build_gram(
    store: FitStore,
    X: da.Array,
    kernel: Kernel,
    fingerprint: Fingerprint,
    dtype: Any = np.float32,
    overwrite: bool = False,
    probe: np.ndarray | None = None,
    progress: bool = False,
    needed_bytes: int | None = None,
    lease: Lease | None = None,
    partial: bool = False,
) -> GramInfo:
    """Build (or reuse, or finish) the Gram matrix of ``X`` in ``store``.

    Parameters
    ----------
    store : FitStore
        The fit's store (created if absent).
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
    progress : bool
        Show a progress bar.
    needed_bytes : int, optional
        The fit's whole footprint on disk, checked against the free space
        before anything is written (default: K alone).
    lease : Lease, optional
        The fit's hold on the store (``FitStore.lock()``): a block task whose
        fit no longer holds the store writes nothing (``LeaseLostError``).
    partial : bool
        Fuse ``probe`` also when only some blocks are computed: the product
        is then over the computed blocks alone (an update's extension sums,
        :mod:`dkpca.growth`: every block pairing a new row with an old one is computed).

    Raises
    ------
    ValueError
        The store holds K of other data, kernel, chunking or dtype and
        ``overwrite`` is False.
    InsufficientDiskSpace
        K would not fit on the store's filesystem.
    """
    t0 = time.perf_counter()
    dtype = np.dtype(dtype)
    n = X.shape[0]
    block = X.chunks[0][0]
    nb = len(X.chunks[0])
    direct = use_direct_io(gram_bytes(n, block, dtype))  # a bad config value is refused before the store is touched
    gs = GramStore(store)
    done = gs.prepare(gram_identity(X, kernel, fingerprint, dtype), overwrite, needed_bytes)
    todo = [(I, J) for I in range(nb) for J in range(I, nb) if not done[I, J]]
    total = nb * (nb + 1) // 2
    probe_product = None
    if todo:
        rows = X.to_delayed().ravel()
        out = gs.writers(direct, lease)
        # A direct write blocks its thread for the whole transfer without
        # using a core: twice as many threads as cores keep the cores busy.
        threads = 2 * cores() if direct else None
        bounds = block_bounds(n, block)
        # partial: only where every row block gets a sum (a rerun may have left some without computed blocks)
        fuse = probe is not None and (len(todo) == total or partial and len({R for p in todo for R in p}) == nb)
        graph = TaskGraph("dkpca-gram", rows[:1])  # the row blocks share one graph (to_delayed)
        pieces = [graph.data(probe[a:b]) for a, b in bounds] if fuse else [None] * nb
        tasks = []
        for (I, J), worker in zip(todo, placement(pair_weights(bounds, todo), todo), strict=True):
            with placed(worker):
                tasks.append(graph.task(_build_block, out, I, J, graph.ref(rows[I]), graph.ref(rows[J]), kernel,
                                        dtype.name, pieces[I], pieces[J],
                                        key=f"dkpca-gram-{I}-{J}-{fingerprint.checksum[:8]}"))
        label = f"Gram matrix: {len(todo)} of {total} blocks to compute"
        if fuse:
            # every block task feeds some row block's sum, so this builds all of K (partial: the computed part)
            sums = scatter_sum([touched_rows([p]) for p in todo], tasks, nb, graph=graph)
            probe_product = np.concatenate(
                compute(*graph.outputs(sums), label=label, threads=threads, progress=progress), axis=0)
        else:
            compute(*graph.outputs(tasks), label=label, threads=threads, progress=progress)
        retire()  # this process's threads' block buffers: the passes map their blocks instead
    gs.finish()
    info = gs.open()
    info.reused_blocks = total - len(todo)
    info.computed_blocks = len(todo)
    info.build_seconds = time.perf_counter() - t0
    info.probe_product = probe_product
    return info
