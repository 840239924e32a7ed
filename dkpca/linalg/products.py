"""Block products with K and the tree sums that gather them.

A symmetric K is visited one upper-triangular block ``K_IJ`` (I <= J) at a
time; each block contributes ``K_IJ V_J`` to row block I and ``K_IJ^T V_I``
to row block J (:func:`block_products`), so a pass reads every stored block
exactly once.  :func:`scatter_sum` adds the contributions landing in each row
block inside the task graph, taking each straight out of its block task's
pair of outputs (no getter task per output: a third of a pass's tasks, and of
the scheduler's work, on a cluster).
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np

from ..kernels.fastexp import exp_gemm_block, exp_gemm_products, widened_products
from .grid import FAN_IN, balanced_block, block_bounds, product_strip_rows, rows_per_block, upper_pairs
from .taskgraph import TaskGraph
from .workspace import scratch

__all__ = ["block_products", "kernel_block_products", "formed_block_products", "add", "add_outputs", "tree_sum",
           "touched_rows", "group_products", "scatter_sum", "gather_sum", "dense_rows", "kernel_product",
           "kernel_matrix", "matrix_product", "MEMORY_BLOCK"]


def block_products(blk: np.ndarray, VI: np.ndarray | None, VJ: np.ndarray | None,
                   symmetric_pair: bool, compiled: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """``(blk @ VJ, blk.T @ VI)`` in float64 (the second is None on the diagonal).

    ``VI`` or ``VJ`` None: V is zero on those rows (a product that skips zero
    rows; an update's probe on its new rows), so that side's product is zero,
    not computed.

    ``V`` in float32 asks for a single-precision product (solvers use it for
    early passes, whose errors later passes correct): no widening, half the
    GEMM cost.  Otherwise a float32 block is widened strip by strip into a
    reused buffer, so the product is exactly that of ``fl32(K)`` in float64;
    ``compiled`` runs that loop as one call without the GIL
    (:func:`dkpca.kernels.fastexp.widened_products`: a fit that planned the
    compiled exp has paid for numba already).
    """
    bi, bj = blk.shape
    V = VJ if VJ is not None else VI
    width = V.shape[1]
    VI = VI if symmetric_pair else None  # the diagonal makes no K^T V_I
    if VI is None and VJ is None:  # V zero on a diagonal block's rows: no product at all
        yI = yJ = None
    elif compiled and VJ is not None and blk.dtype == np.float32 and V.dtype == np.float64:
        w, part = _product_buffers(bj, width)
        yI, yJ = widened_products(blk, VI if VI is not None else np.zeros((bi, width)), VJ, VI is not None, w, part)
    elif blk.dtype == np.float64 or V.dtype == np.float32:  # nothing to widen (a single-precision product)
        yI = None if VJ is None else (blk @ VJ).astype(np.float64, copy=False)
        yJ = None if VI is None else (blk.T @ VI).astype(np.float64, copy=False)
    else:
        yI = None if VJ is None else np.empty((bi, width))
        yJ = None if VI is None else np.zeros((bj, width))
        _widened_products(blk, VI, VJ, yI, yJ)
    yI = np.zeros((bi, width)) if yI is None else yI
    return yI, np.zeros((bj, width)) if yJ is None and symmetric_pair else yJ


def _widened_products(blk: np.ndarray, VI: np.ndarray | None, VJ: np.ndarray | None, yI: np.ndarray | None,
                      yJ: np.ndarray | None) -> None:
    """``yI = blk @ VJ`` and ``yJ += blk.T @ VI`` (each where its V is given) of a float32 ``blk``, in float64."""
    bj = blk.shape[1]
    rows = product_strip_rows(max(V.shape[1] for V in (VI, VJ) if V is not None))
    # strip^T VI goes into a reused buffer, not a new array per strip: a Dask worker's allocator
    # (MALLOC_TRIM_THRESHOLD_ set by distributed's nanny) maps each such array afresh, and on
    # this VM a freshly mapped page costs ~3 s/GB: measured, a 4000^2 block times 20 float64
    # columns took 97-119 ms in a worker against 63-71 ms on a thread (6 products each).
    part = scratch("op-strip-product", (bj, VI.shape[1]), np.float64) if VI is not None else None
    for s in range(0, blk.shape[0], rows):
        e = min(s + rows, blk.shape[0])
        strip = scratch("op-strip", (e - s, bj), np.float64)
        np.copyto(strip, blk[s:e])
        if VJ is not None:
            np.matmul(strip, VJ, out=yI[s:e])
        if VI is not None:
            np.matmul(strip.T, VI[s:e], out=part)
            yJ += part


def kernel_block_products(kernel: Any, XI: np.ndarray, XJ: np.ndarray, VI: np.ndarray, VJ: np.ndarray,
                          dtype: str, same: bool, compiled: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`block_products` of the kernel block ``K(XI, XJ)`` (``same``: XJ is XI, a diagonal block).

    A kernel that gives its block as ``exp(A B^T)`` (:meth:`~dkpca.kernels.Kernel.exp_operands`)
    is multiplied strip by strip as it is evaluated, without the GIL and
    without the block ever leaving the cache; any other is formed in a
    reused buffer first.
    """
    if VI is None:  # V zero on rows I: the fused kernel loop makes both products; its K^T V_I is zero
        VI = np.zeros((XI.shape[0], VJ.shape[1]), VJ.dtype)
    operands = None
    if not same and compiled and np.dtype(dtype) == np.float32 and VI.dtype == np.float64:
        operands = kernel.exp_operands(XI, XJ, dtype)
    if operands is not None:
        A, B = operands
        w, part = _product_buffers(B.shape[0], VI.shape[1])
        G = scratch("op-exp-strip", (w.shape[0], B.shape[0]), A.dtype)
        return exp_gemm_products(A, B, VI, VJ, G, w, part)
    buf = scratch("op-block", (XI.shape[0], XJ.shape[0]), dtype)
    blk = kernel.block(XI, None if same else XJ, dtype, out=buf)
    return block_products(blk, VI, VJ, not same, compiled)


def formed_block_products(kernel: Any, XI: np.ndarray, XJ: np.ndarray, dtype: str, same: bool, out: np.ndarray,
                          VI: np.ndarray, VJ: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """The kernel block formed into ``out`` with :func:`block_products` ``(blk, K VJ, K^T VI)`` of it, or None.

    For a Gram build, which stores the block and needs its sums (V = ones)
    and perhaps a probe's products: one call without the GIL from the first
    strip to the last (:func:`~dkpca.kernels.fastexp.exp_gemm_block`), where
    the numpy strip loop takes and drops it ~500 times a 4000^2 block (GEMM,
    exp, widening and sums per 64-row strip).  None where the kernel is not
    one GEMM and the compiled exp (:meth:`~dkpca.kernels.Kernel.exp_operands`)
    or V is not float64: the caller forms the block as usual.
    """
    if VI.dtype != np.float64 or VJ.dtype != np.float64:
        return None
    operands = kernel.exp_operands(XI, XI if same else XJ, dtype)
    if operands is None:
        return None
    A, B = operands
    w, part = _product_buffers(B.shape[0], VI.shape[1])
    yI, yJ = exp_gemm_block(A, B, out, VI, VJ, same, w, part)
    return out, yI, yJ


def _product_buffers(cols: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's strip buffer (float64, a strip of ``cols`` columns) and transposed-product buffer."""
    return (scratch("op-strip", (product_strip_rows(width), cols), np.float64),
            scratch("op-strip-product", (cols, width), np.float64))


def add(*parts: np.ndarray) -> np.ndarray:
    """Sum of arrays of one shape (a new array; the inputs are not modified)."""
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def add_outputs(*refs: list) -> np.ndarray:
    """Sum of ``outputs[i]`` over ``[outputs, i]`` pairs: one output each of multi-output tasks (a new array).

    Pairs are lists, not tuples: a list is where a task graph looks for references.
    """
    outputs, i = refs[0]
    out = np.array(outputs[i], dtype=np.float64)  # float64 whatever travelled (group_products' ``wire``)
    for outputs, i in refs[1:]:
        out += outputs[i]
    return out


def tree_sum(parts: list, fan_in: int = FAN_IN, first: Any = add, graph: TaskGraph | None = None) -> Any:
    """Lazy sum of delayed arrays (or of ``graph``'s task references) in a tree of ``fan_in``-way additions.

    A partial result is freed as soon as it has been added, so memory stays a
    few operands per worker however many parts there are.  ``first`` adds the
    leaves (:func:`add_outputs` for ``[task, index]`` pairs; it runs even for
    a single part, to pick its output).  With ``graph`` the additions are
    tasks of that graph; otherwise ``dask.delayed`` calls.
    """
    def make(func, *args):
        return graph.task(func, *args) if graph is not None else dask.delayed(func, pure=True)(*args)

    func = first
    while len(parts) > 1 or func is not add:
        parts = [make(func, *parts[i:i + fan_in]) for i in range(0, len(parts), fan_in)]
        func = add
    return parts[0]


def touched_rows(pairs: list[tuple[int, int]]) -> list[int]:
    """The row blocks that the blocks ``pairs`` contribute to (I, and J off the diagonal), in order."""
    return sorted({I for I, _ in pairs} | {J for I, J in pairs if I != J})


def group_products(func: Any, pairs: list[tuple[int, int]], args: list[tuple],
                   wire: Any = None) -> tuple[np.ndarray, ...]:
    """``func(*a)`` -> ``(K_IJ V_J, K_IJ^T V_I or None)`` for each block of a group, summed per row block.

    One output per row block of ``touched_rows(pairs)``, in that order: a
    group's partial sums are reduced where it ran (in float64), and only they
    travel, as ``wire`` if given: float32 for a single-precision pass on a
    cluster halves what crosses the network, its rounding (6e-8 relative)
    below the float32 products' own; :func:`add_outputs` adds them in float64.
    """
    acc: dict[int, np.ndarray] = {}
    for (I, J), a in zip(pairs, args, strict=True):
        out = func(*a)
        for R, y in ((I, out[0]), (J, out[1])):
            if y is None:
                continue
            if R in acc:
                acc[R] += y
            else:
                acc[R] = y
    return tuple(acc[R] if wire is None else acc[R].astype(wire) for R in touched_rows(pairs))


def _contributions(rows: list[list[int]], outputs: list, nb: int) -> list[list[list]]:
    """Per row block R, the ``[output, index]`` pairs landing in R."""
    contrib: list[list] = [[] for _ in range(nb)]
    for rs, out in zip(rows, outputs, strict=True):
        for i, R in enumerate(rs):
            contrib[R].append([out, i])
    return contrib


def scatter_sum(rows: list[list[int]], tasks: list, nb: int, *, graph: TaskGraph, fan_in: int = FAN_IN) -> list:
    """Per row block R, the lazy sum of every task output landing in R.

    ``tasks[i]`` is ``graph``'s reference to a tuple with one output per row
    block of ``rows[i]`` (a block task's ``(K_IJ V_J, K_IJ^T V_I)`` for rows
    ``[I, J]``, or a group's, :func:`group_products`); each sum reads its
    operand out of that tuple itself.  Memory stays O(n l) plus a few blocks per worker,
    instead of holding all partial products until the end.  The sums are
    ``graph``'s tasks too.
    """
    return [tree_sum(parts, fan_in, first=add_outputs, graph=graph) for parts in _contributions(rows, tasks, nb)]


def gather_sum(rows: list[list[int]], outputs: list, nb: int) -> list[np.ndarray]:
    """:func:`scatter_sum` of computed outputs, here and now: for a few tasks (at most ``FAN_IN``).

    A few shares' partial sums (a small cluster's pass) are added by the
    caller: no sum tasks, no transfers between workers, and at most
    ``FAN_IN`` times O(n l) received.
    """
    return [add_outputs(*parts) for parts in _contributions(rows, outputs, nb)]


def as_dense(part: Any) -> np.ndarray:
    """A slice of a numpy / zarr / h5py / scipy sparse / dask array, as dense float64."""
    if hasattr(part, "toarray"):
        part = part.toarray()
    elif hasattr(part, "compute"):
        part = part.compute()
    return np.asarray(part, dtype=np.float64)


def dense_rows(Y: Any, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a numpy / zarr / h5py / scipy sparse / dask array, as dense float64."""
    return as_dense(Y[start:stop])


#: Edge of the blocks of an in-memory K (:func:`kernel_matrix`): 1024 x 1024
#: float64 is 8 MiB, in cache-friendly reach, and n = 10,000 gives 55 blocks
#: to share among threads.
MEMORY_BLOCK = 1024


def kernel_matrix(kernel: Any, X: np.ndarray, dtype: Any = np.float64, map: Any = map) -> np.ndarray:
    """``K(X, X)`` in memory, exactly symmetric, evaluated one upper-triangular block at a time.

    ``map(func, blocks)`` runs the blocks (the caller passes a thread pool's;
    each block's BLAS should then run on one thread).  One ``kernel.block``
    call over all of X runs its elementwise part (``exp``, powers) on a single
    thread and evaluates both halves of K; here each block is evaluated once
    and mirrored.
    """
    X = np.asarray(X)
    dtype = np.dtype(dtype)
    n = X.shape[0]
    K = np.empty((n, n), dtype=dtype)
    bounds = block_bounds(n, balanced_block(n, MEMORY_BLOCK))
    if len(bounds) == 1:
        return kernel.block(X, None, dtype, out=K)

    def one(pair: tuple[int, int]) -> None:
        (i0, i1), (j0, j1) = bounds[pair[0]], bounds[pair[1]]
        buf = scratch("memory-gram", (i1 - i0, j1 - j0), dtype)
        blk = kernel.block(X[i0:i1], None if i0 == j0 else X[j0:j1], dtype, out=buf)
        K[i0:i1, j0:j1] = blk
        if i0 != j0:
            K[j0:j1, i0:i1] = blk.T

    for _ in map(one, upper_pairs(len(bounds))):
        pass
    return K


def matrix_product(K: np.ndarray, V: np.ndarray, map: Any = map) -> np.ndarray:
    """``K @ V`` (float64 unless both are float32) for a K held in memory, by row blocks run through ``map``.

    Each row block follows :func:`block_products`' rules; the caller passes a
    thread pool's ``map`` (each block's BLAS then on one thread).  Measured,
    Lanczos at n = 5,000 with a float32 K in memory (``dkpca.fit(X)``, each
    fit in a new process, 2 cores, 6 fits): 1.03-1.34 s with the whole K
    widened in one call, 0.63-0.93 s by row blocks on two threads; 0.73-0.86 s
    with a float64 K.
    """
    bounds = block_bounds(K.shape[0], balanced_block(K.shape[0], MEMORY_BLOCK // 4))  # enough to share out evenly
    return np.concatenate(list(map(lambda b: block_products(K[b[0]:b[1]], V, V, False)[0], bounds)), axis=0)


def kernel_product(kernel: Any, X: np.ndarray, Y: Any, W: np.ndarray,
                   rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(K(X, Y) @ W, K(X, Y) @ 1)`` in float64, holding one ``len(X) x rows`` kernel block at a time.

    ``Y`` (n x d, any array-like with row slicing) is read in row blocks of
    ``rows`` (default: sized by :func:`~dkpca.linalg.grid.rows_per_block`);
    ``kernel`` is anything with dkpca's ``block(X, Y, dtype, out)``.  This is
    the one blocked "kernel times a matrix" loop: projections of new points,
    the estimator's transform and the pre-image sums all run through it.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    m, n = X.shape[0], Y.shape[0]
    rows = rows or rows_per_block(m)
    KW = np.zeros((m, W.shape[1]))
    ksum = np.zeros(m)
    for j0, j1 in block_bounds(n, rows):
        Kx = kernel.block(X, dense_rows(Y, j0, j1), np.float64, out=scratch("kernel-product", (m, j1 - j0),
                                                                              np.float64))
        KW += Kx @ W[j0:j1]
        ksum += Kx.sum(axis=1)
    return KW, ksum
