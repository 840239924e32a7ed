"""``exp`` of non-positive arguments, compiled with numba: the rbf and laplacian kernels' elementwise bottleneck.

Why a bypass of ``numpy.exp``: on CPUs without AVX-512 (measured on AMD
EPYC hosts, AVX2) numpy's exp costs 3.1-4.5 ns an entry in float32 and
7.3-9.3 in float64, more than the d = 50 GEMM that makes the exponent
(3 ns).  The loop below is vectorised by LLVM (AVX2 there): 1.4-2.1 ns /
4.3-5.9 ns an entry, measured on 1 MiB strips in cache.  It is the textbook reduction
``exp(x) = 2**n exp(y)``, ``n = round(x / ln 2)``, ``y = x - n ln 2`` with
``ln 2`` split in two (Cody & Waite), so ``|y| <= ln(2) / 2``, and the Taylor
polynomial of ``exp(y)`` to degree 7 (float32) or 12 (float64), whose
truncation error there is below 5e-9 / 2e-16 relative.  Measured against
float64 ``numpy.exp`` on 1.6e7 arguments in [-99, 0]: at most 8.9e-8
relative in float32 (numpy's own float32 exp: 2.0e-7) and 3.2e-16 in
float64.  Results below the smallest normal number (arguments under
-87.3 / -708.3) are 0, an absolute error under 1.2e-38 / 2.3e-308; a NaN
argument gives NaN, as numpy's does (blocks are checked for finiteness).

The price is numba's import and compilation, about 1.7 s once per process
(measured: import 0.45 s, first compile 1.2 s), ~3 s with the product loops below: worth it only for fits that
evaluate billions of entries, which :func:`dkpca.planning.use_compiled_exp`
decides.  No compiled code is cached on disk (numba's cache index is a
pickle).

The same module holds the two loops a pass runs per block on many threads
(:func:`widened_products`, :func:`exp_gemm_products`): each is one call that
holds no GIL from its first strip to its last.  The numpy version of the same
strip loop takes and drops the GIL a few hundred times a block (a GEMM, an exp,
a copy per 64-row strip), and every hand-over waits for the threads that hold
it: on a 16-core machine 16 threads ran a recomputed pass at 8.2 s of task CPU
in 1.03 s, 8 threads' worth.
"""

from __future__ import annotations

import importlib.util
import math
import threading
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace

import numpy as np

__all__ = ["available", "ready", "exp_nonpositive", "widened_products", "exp_gemm_products", "exp_gemm_block"]

#: fast-math flags without ``reassoc`` (it could fold the two halves of ln 2
#: back into one and lose the reduction's accuracy) and without ``nnan`` /
#: ``ninf``: a NaN exponent must come out NaN, for the callers' finiteness check
_FASTMATH = {"nsz", "arcp", "contract", "afn"}

#: per precision: (Taylor degree, ln 2 high part (exact in few bits), ln 2 low part, smallest argument whose
#: exp is normal, integer type of the same width, mantissa bits, exponent bias)
_PARAMS = {
    "float32": (7, 0.693359375, -2.12194440e-4, -87.33654, "int32", 23, 127),
    "float64": (12, 6.93145751953125e-1, 1.42860682030941723212e-6, -708.3964, "int64", 52, 1023),
}


#: the precisions whose exp and product loops this process has compiled (:func:`_build_products`)
_READY: set[str] = set()


def ready(dtype_name: str = "float32") -> bool:
    """Whether this process has compiled the loops for ``dtype_name`` already: using them costs nothing more."""
    return dtype_name in _READY


def available() -> bool:
    """Whether numba can be imported here (dkpca falls back to ``numpy.exp`` where it cannot)."""
    return importlib.util.find_spec("numba") is not None


#: one compilation per process: without it every worker thread that reaches its first block at once would
#: compile its own copy (numba serialises compilations: 1.2 s each)
_COMPILE_LOCK = threading.Lock()


def _compiled(dtype_name: str) -> Callable[[np.ndarray, int, int, int], None]:
    with _COMPILE_LOCK:
        return _build(dtype_name)


@cache
def _build(dtype_name: str) -> Callable[[np.ndarray, int, int, int], None]:
    """The compiled loop for one precision, built on first use (lazily: importing numba costs 0.45 s)."""
    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    degree, ln2_hi, ln2_lo, lowest, int_name, mantissa, bias = _PARAMS[dtype_name]
    ft, it = np.dtype(dtype_name).type, np.dtype(int_name).type
    nb_float, nb_int = getattr(types, dtype_name), getattr(types, int_name)
    ir_float = ir.FloatType() if dtype_name == "float32" else ir.DoubleType()

    @intrinsic
    def as_float(typingctx, bits):  # reinterpret an integer's bits as the float of the same width
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir_float)
        return nb_float(nb_int), codegen

    coef = tuple(ft(1.0 / math.factorial(k)) for k in range(degree + 1))
    zero, low, log2e, half = ft(0.0), ft(lowest), ft(1.0 / math.log(2.0)), ft(0.5)
    hi, lo, one_bias = ft(ln2_hi), ft(ln2_lo), it(bias)

    @njit(fastmath=_FASTMATH, nogil=True, error_model="numpy")
    def kernel(flat, rows, cols, stride):
        for i in range(rows):
            # a slice of the C-contiguous span is unit-stride for LLVM, so the loop vectorises
            # (indexing the span as flat[i * stride + j] instead measured 5.6 ns an entry, not 1.8)
            r = flat[i * stride:i * stride + cols]
            for j in range(cols):
                v = r[j]
                x = max(min(v, zero), low)  # finite from here on, whatever v is
                n = np.floor(x * log2e + half)
                y = (x - n * hi) - n * lo
                p = coef[degree]
                for c in range(degree - 1, -1, -1):  # unrolled: degree is a compile-time constant
                    p = p * y + coef[c]
                # through int32: AVX2 converts floats to int32 in vectors, not to int64
                scale = as_float((it(np.int32(n)) + one_bias) << mantissa)
                # below the smallest normal (and -inf): 0; NaN stays NaN, so a non-finite block is still caught
                r[j] = p * scale if v >= low else (zero if v < low else v)

    return kernel


def _loop_types(dtype_name: str) -> SimpleNamespace:
    """The compiled loops' argument types for blocks of one precision: inputs typed read-only (writable arrays
    convert to them), so a worker's read-only V blocks and K's read-only chunks meet the same machine code."""
    from numba import types

    ft, ro = getattr(types, dtype_name), dict(readonly=True)
    return SimpleNamespace(blk=types.Array(ft, 2, "C", **ro), bt=types.Array(ft, 2, "F", **ro),
                           out=types.Array(ft, 2, "C"), v=types.Array(types.float64, 2, "C", **ro),
                           f64=types.Array(types.float64, 2, "C"))


@cache
def _build_products(dtype_name: str) -> tuple[Callable, Callable, Callable]:
    """The compiled product loops for blocks of one precision (float64 products), built on first use.

    Compiled here, once, for the signatures below: their inputs typed read-only, which writable arrays
    convert to, so that the read-only arrays a worker receives (V's blocks) or reads (K's chunks) meet
    the same machine code (lazily typed, each such variant compiled again, ~1 s, measured in every
    worker process of a LocalCluster inside its first pass).
    """
    from numba import njit, types

    exp = _build(dtype_name)
    t = _loop_types(dtype_name)
    widened_sig = types.void(t.blk, t.v, t.v, t.f64, t.f64, t.f64, t.f64, types.boolean)
    exp_gemm_sig = types.void(t.blk, t.bt, t.v, t.v, t.f64, t.f64, t.out, t.f64, t.f64)

    @njit(nogil=True)
    def widen_multiply(strip, VI, VJ, yI, yJ, w, part, s, symmetric):
        # strip (of the block's rows s:s+r) widened to float64, then strip VJ and strip^T VI
        r = strip.shape[0]
        ws = w[:r]
        for i in range(r):
            src, dst = strip[i], ws[i]
            for j in range(strip.shape[1]):
                dst[j] = src[j]
        np.dot(ws, VJ, yI[s:s + r])
        if symmetric:
            np.dot(ws.T, VI[s:s + r], part)
            yJ += part

    @njit(widened_sig, nogil=True)
    def widened(blk, VI, VJ, yI, yJ, w, part, symmetric):
        rows = w.shape[0]
        for s in range(0, blk.shape[0], rows):
            widen_multiply(blk[s:min(s + rows, blk.shape[0])], VI, VJ, yI, yJ, w, part, s, symmetric)

    @njit(exp_gemm_sig, nogil=True)
    def exp_gemm(A, Bt, VI, VJ, yI, yJ, G, w, part):
        rows, cols = G.shape
        for s in range(0, A.shape[0], rows):
            e = min(s + rows, A.shape[0])
            Gs = G[:e - s]
            np.dot(A[s:e], Bt, Gs)
            exp(Gs.reshape(-1), e - s, cols, cols)
            widen_multiply(Gs, VI, VJ, yI, yJ, w, part, s, True)

    _READY.add(dtype_name)  # compiled above, for their signatures (exp_gemm calls the exp and widen_multiply)
    return widened, exp_gemm, widen_multiply


@cache
def _build_block_loop(dtype_name: str) -> Callable:
    """A Gram build's block loop (:func:`exp_gemm_block`), compiled apart on first use: ~1.6 s more (measured
    here: the loops' import and compilation 4.5 -> 6.2 s with it), which a fit that never stores K does not pay."""
    from numba import njit, types

    exp = _build(dtype_name)
    widen_multiply = _build_products(dtype_name)[2]
    t = _loop_types(dtype_name)
    exp_block_sig = types.void(t.blk, t.bt, t.out, t.v, t.v, t.f64, t.f64, t.f64, t.f64, types.boolean)

    @njit(nogil=True)
    def mirror(K, tile):
        # the upper triangle onto the lower, tile by tile (both tiles stay in cache)
        n = K.shape[0]
        for a in range(0, n, tile):
            for b in range(a, n, tile):
                for i in range(a, min(a + tile, n)):
                    for j in range(max(b, i + 1), min(b + tile, n)):
                        K[j, i] = K[i, j]

    @njit(exp_block_sig, nogil=True)
    def exp_block(A, Bt, K, VI, VJ, yI, yJ, w, part, same):
        rows, cols = w.shape[0], K.shape[1]
        for s in range(0, K.shape[0], rows):
            e = min(s + rows, K.shape[0])
            c0 = s if same else 0  # a diagonal block: its upper triangle, then mirrored
            G = K[s:e]
            np.dot(A[s:e], Bt, G)
            if same:
                for i in range(e - s):
                    G[i, s + i] = 0.0  # exp(0) = 1 exactly on the diagonal
            exp(G.reshape(-1)[c0:], e - s, cols - c0, cols)
            if not same:
                widen_multiply(G, VI, VJ, yI, yJ, w, part, s, True)
        if same:
            mirror(K, 64)
            for s in range(0, K.shape[0], rows):
                widen_multiply(K[s:min(s + rows, K.shape[0])], VI, VJ, yI, yJ, w, part, s, False)

    return exp_block


def _products(dtype_name: str) -> tuple[Callable, Callable, Callable]:
    with _COMPILE_LOCK:
        return _build_products(dtype_name)


def widened_products(blk: np.ndarray, VI: np.ndarray, VJ: np.ndarray, symmetric_pair: bool, w: np.ndarray,
                     part: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``(blk @ VJ, blk.T @ VI)`` of a float32 block in float64 (the second None unless ``symmetric_pair``).

    The block is widened strip by strip into ``w`` (float64, ``(rows, blk.shape[1])``:
    its rows are the strip's); ``part`` (float64, ``(blk.shape[1], VI.shape[1])``)
    takes each strip's transposed product.  Exactly the product of ``fl32(blk)``
    in float64, as :func:`dkpca.linalg.block_products`' numpy loop computes it.
    """
    yI = np.empty((blk.shape[0], VJ.shape[1]))
    yJ = np.zeros((blk.shape[1], VI.shape[1])) if symmetric_pair else part
    blk = np.require(blk, requirements=("C", "A"))  # the compiled signature's layout
    VI, VJ = (np.require(V, np.float64, ("C", "A")) for V in (VI, VJ))
    _products(blk.dtype.name)[0](blk, VI, VJ, yI, yJ, w, part, symmetric_pair)
    return yI, yJ if symmetric_pair else None


def exp_gemm_products(A: np.ndarray, B: np.ndarray, VI: np.ndarray, VJ: np.ndarray, G: np.ndarray,
                      w: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(K @ VJ, K.T @ VI)`` in float64 for ``K = exp(min(A B^T, 0))``, never forming K.

    Strip by strip: ``G`` (``(rows, B.shape[0])``, A's dtype) takes the
    strip's GEMM and exp, ``w`` and ``part`` as in :func:`widened_products`.
    The strip's values are those :meth:`~dkpca.kernels.Kernel.block` gives
    with the compiled exp, up to the GEMM's rounding.
    """
    yI = np.empty((A.shape[0], VJ.shape[1]))
    yJ = np.zeros((B.shape[0], VI.shape[1]))
    A, B = (np.require(a, requirements=("C", "A")) for a in (A, B))  # the compiled signature's layout
    VI, VJ = (np.require(V, np.float64, ("C", "A")) for V in (VI, VJ))
    _products(A.dtype.name)[1](A, B.T, VI, VJ, yI, yJ, G, w, part)
    return yI, yJ


def exp_gemm_block(A: np.ndarray, B: np.ndarray, K: np.ndarray, VI: np.ndarray, VJ: np.ndarray, same: bool,
                   w: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``K = exp(min(A B^T, 0))`` into ``K`` (C-contiguous, A's dtype), with ``(K @ VJ, K.T @ VI)`` in float64.

    One call without the GIL for a Gram build's block: each strip's GEMM, its
    exp and its products with V while the strip is in cache.  ``same``: a
    diagonal block (B's rows are A's points): its upper triangle with exact
    ones on the diagonal, mirrored, so exactly symmetric as
    :meth:`~dkpca.kernels.Kernel.block` makes it; the second product is then
    None.  ``w`` and ``part`` as in :func:`widened_products`.
    """
    yI = np.empty((A.shape[0], VJ.shape[1]))
    yJ = np.zeros((B.shape[0], VI.shape[1])) if not same else part
    A, B = (np.require(a, requirements=("C", "A")) for a in (A, B))
    VI, VJ = (np.require(V, np.float64, ("C", "A")) for V in (VI, VJ))
    with _COMPILE_LOCK:
        loop = _build_block_loop(A.dtype.name)
    loop(A, B.T, K, VI, VJ, yI, yJ, w, part, same)
    return yI, None if same else yJ


def exp_nonpositive(G: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``exp(min(G, 0))`` in place on a 2-D float32 or float64 array whose rows are contiguous.

    ``out`` must be ``G`` or None (the signature of ``numpy.exp``, which it replaces).
    """
    if out is not None and out is not G:
        raise ValueError("exp_nonpositive works in place: out must be G")
    if (G.ndim != 2 or G.dtype not in (np.float32, np.float64) or G.strides[0] < 0
            or (G.shape[1] > 1 and G.strides[1] != G.itemsize) or not G.flags.writeable):
        raise ValueError(f"exp_nonpositive takes a writeable 2-D float32/float64 array with contiguous rows, "
                         f"not {G.dtype} {G.shape} with strides {G.strides}")
    rows, cols = G.shape
    if G.size == 0:
        return G
    stride = G.strides[0] // G.itemsize
    # One unit-stride vector over the rows' span (a view, no copy): the compiled loop indexes it row by row.
    span = (rows - 1) * stride + cols
    flat = np.lib.stride_tricks.as_strided(G, shape=(span,), strides=(G.itemsize,))
    _compiled(G.dtype.name)(flat, rows, cols, stride)
    return G
