"""The centred kernel operator: ``K~ @ V`` without ever forming K~.

Every solver talks to a :class:`CenteredKernelOperator` and nothing else.  K~ =
H K H is applied through the rank-one corrections of DESIGN.md::

    K~ V = K V - 1 (r^T V) - r (1^T V) + c 1 (1^T V),   r = K 1 / n,  c = 1^T K 1 / n^2

so one product costs one pass over K.  Two sources of K blocks share all of
the product code:

* :class:`StoredKernelOperator` reads the upper-triangular blocks of a Gram
  store; block (I, J) contributes ``K_IJ V_J`` to rows I and ``K_IJ^T V_I``
  to rows J, so each stored block is read exactly once per pass;
* :class:`MatrixFreeKernelOperator` re-evaluates the same blocks from X on the
  workers each pass (no store; memory is one block per running task).

Products accumulate in float64 whatever the storage precision: a float32
block is widened strip by strip (cache-sized, into reused buffers) before the
GEMM, so the operator is the exact symmetric matrix ``fl32(K)`` and residuals
can be driven far below float32 rounding.
"""

from __future__ import annotations

import os
import time
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from zarr.core.buffer.cpu import NDBuffer

from . import store as _store
from ._compute import compute
from ._workspace import scratch
from .gram import GramInfo, block_bounds
from .kernels import Kernel, from_dict

__all__ = ["CenteredKernelOperator", "StoredKernelOperator", "MatrixFreeKernelOperator"]

#: rows widened to float64 at a time; 256 x 4096 x 8 B = 8 MiB stays in cache
_STRIP = 256


def block_products(blk: np.ndarray, VI: np.ndarray, VJ: np.ndarray, symmetric_pair: bool):
    """``(blk @ VJ, blk.T @ VI)`` in float64 (second is None on the diagonal).

    ``V`` in float32 asks for a single-precision product (solvers use it for
    early passes, whose errors later passes correct): no widening, half the
    GEMM cost.
    """
    bi, bj = blk.shape
    if VI.dtype == np.float32 and blk.dtype == np.float32:
        yI = (blk @ VJ).astype(np.float64)
        return yI, (blk.T @ VI).astype(np.float64) if symmetric_pair else None
    yI = np.empty((bi, VJ.shape[1]), dtype=np.float64)
    yJ = np.zeros((bj, VI.shape[1]), dtype=np.float64) if symmetric_pair else None
    if blk.dtype == np.float64:
        np.matmul(blk, VJ, out=yI)
        if symmetric_pair:
            np.matmul(blk.T, VI, out=yJ)
        return yI, yJ
    for s in range(0, bi, _STRIP):
        e = min(s + _STRIP, bi)
        strip = scratch("op-strip", (e - s, bj), np.float64)
        np.copyto(strip, blk[s:e])
        np.matmul(strip, VJ, out=yI[s:e])
        if symmetric_pair:
            yJ += strip.T @ VI[s:e]
    return yI, yJ


def _read_block(path: str, raw_dir: str | None, I: int, J: int, i0: int, i1: int, j0: int, j1: int,
                block: int, dtype: str) -> np.ndarray:
    """Block (I, J) of K, read into this thread's reused buffer (a view of it).

    ``raw_dir`` is K's chunk directory when its chunks are plain files
    (:func:`dkpca.store.chunk_file`, resolved once per operator): the block
    is then read straight into the buffer; otherwise, or if the file is
    missing, through zarr.
    """
    if raw_dir is not None:
        # Edge chunks are stored padded to the full chunk shape.
        full = scratch("op-block", (block, block), dtype)
        try:
            with open(os.path.join(raw_dir, str(I), str(J)), "rb") as f:
                nread = f.readinto(memoryview(full).cast("B"))
        except FileNotFoundError:
            nread = 0
        if nread == full.nbytes:
            return full[: i1 - i0, : j1 - j0]
    # Reading into a reused buffer avoids zarr allocating (and the kernel
    # page-faulting) a fresh block-sized array per read.
    buf = scratch("op-block", (i1 - i0, j1 - j0), dtype)
    Kz = zarr.open_array(path, path="gram/K", mode="r")
    Kz.get_basic_selection((slice(i0, i1), slice(j0, j1)), out=NDBuffer.from_numpy_array(buf))
    return buf


def _stored_product(path: str, raw_dir: str | None, I: int, J: int, i0: int, i1: int, j0: int, j1: int,
                    block: int, VI: np.ndarray, VJ: np.ndarray, dtype: str):
    return block_products(_read_block(path, raw_dir, I, J, i0, i1, j0, j1, block, dtype), VI, VJ, I != J)


def _matrix_free_product(I: int, J: int, XI: np.ndarray, XJ: np.ndarray, spec: dict, dtype: str,
                         VI: np.ndarray, VJ: np.ndarray):
    kernel = from_dict(spec)
    buf = scratch("op-block", (XI.shape[0], XJ.shape[0]), dtype)
    blk = kernel.block(XI, None if I == J else XJ, dtype, out=buf)
    return block_products(blk, VI, VJ, I != J)


def _add(*parts: np.ndarray) -> np.ndarray:
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def scatter_sum(pairs: list[tuple[int, int]], tasks: list, nb: int, fan_in: int = 8) -> list:
    """Per row block R, the lazy sum of every block product landing in R.

    ``tasks[i]`` is a 2-output delayed ``(K_IJ V_J, K_IJ^T V_I)`` for
    ``pairs[i] = (I, J)``.  Each row block's contributions are added in a tree
    of ``fan_in``-way additions inside the graph, so a partial product is freed
    as soon as it is added: memory stays O(n l) plus a few blocks per worker,
    instead of holding all nb^2 / 2 partial products until the end.
    """
    contrib: list[list] = [[] for _ in range(nb)]
    for (I, J), t in zip(pairs, tasks, strict=True):
        contrib[I].append(t[0])
        if I != J:
            contrib[J].append(t[1])
    sums = []
    for parts in contrib:
        while len(parts) > 1:
            parts = [dask.delayed(_add, pure=True)(*parts[i:i + fan_in]) for i in range(0, len(parts), fan_in)]
        sums.append(parts[0])
    return sums


class CenteredKernelOperator:
    """``V -> K~ V`` for the centred kernel matrix of the training data.

    Attributes
    ----------
    n : int
        Number of training points.
    block : int
        Block edge; products run one task per upper-triangular block.
    row_means : ndarray of shape (n,)
        ``r = K 1 / n``.
    grand_mean : float
        ``c = 1^T K 1 / n^2``.
    diag_sum : float
        ``trace(K)``.
    passes : int
        Products computed so far (each is one pass over K).
    pass_seconds : list of float
        Wall time of each product.
    """

    n: int
    block: int
    dtype: np.dtype
    row_means: np.ndarray
    grand_mean: float
    diag_sum: float
    kind = "abstract"

    def __init__(self) -> None:
        self.passes = 0
        self.fused_passes = 0
        #: passes made before any solver product (matrix-free: K 1)
        self.setup_passes = 0
        self.pass_seconds: list[float] = []
        self._primed: tuple[np.ndarray, np.ndarray] | None = None

    def prime(self, V: np.ndarray, KV: np.ndarray) -> None:
        """Hand over ``K @ V`` computed elsewhere (fused into the Gram build).

        The next ``matmat`` with this very ``V`` object returns it centred
        without a pass over K; it still counts as a product (``passes``) and is
        recorded in ``fused_passes``.
        """
        self._primed = (V, KV)

    # -- to be provided by subclasses -------------------------------------
    def _block_task(self, I: int, J: int, VI: Any, VJ: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _read_block(self, I: int, J: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    # -- shared -----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def bounds(self) -> list[tuple[int, int]]:
        return block_bounds(self.n, self.block)

    @property
    def trace(self) -> float:
        """``trace(K~) = trace(K) - n c``, exact without any eigenvalue."""
        return float(self.diag_sum - self.n * self.grand_mean)

    def raw_matmat(self, V: np.ndarray, single: bool = False) -> np.ndarray:
        """``K @ V`` (uncentred), one pass over the upper-triangular blocks.

        ``single=True`` computes the products in float32 when K is stored in
        float32 (relative error ~1e-6; for early solver passes only).
        """
        V = np.ascontiguousarray(V, dtype=np.float32 if single and self.dtype == np.float32 else np.float64)
        bounds = self.bounds
        pieces = [dask.delayed(V[a:b], pure=True) for a, b in bounds]
        nb = len(bounds)
        pairs = [(I, J) for I in range(nb) for J in range(I, nb)]
        tasks = [self._block_task(I, J, pieces[I], pieces[J]) for I, J in pairs]
        return np.concatenate(compute(*scatter_sum(pairs, tasks, nb), label=""), axis=0)

    def center(self, KV: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Apply the rank-one corrections to ``K V`` (in place) -> ``K~ V``."""
        r, c = self.row_means, self.grand_mean
        sV = V.sum(axis=0)
        KV -= (r @ V)[None, :]
        KV -= np.outer(r, sV)
        KV += c * sV[None, :]
        return KV

    def matmat(self, V: np.ndarray, single: bool = False) -> np.ndarray:
        """``K~ @ V`` for ``V`` of shape (n, l); counts one pass.

        ``single=True`` allows single-precision products (see ``raw_matmat``);
        the result is float64 either way.
        """
        t0 = time.perf_counter()
        primed, self._primed = self._primed, None
        if primed is not None and primed[0] is V:
            self.fused_passes += 1
            raw = primed[1]
        else:
            raw = None
        V = np.asarray(V, dtype=np.float64)
        if V.ndim != 2 or V.shape[0] != self.n:
            raise ValueError(f"V must have shape ({self.n}, l); got {V.shape}.")
        out = self.center(raw if raw is not None else self.raw_matmat(V, single=single), V)
        self.passes += 1
        self.pass_seconds.append(time.perf_counter() - t0)
        return out

    def dense(self) -> np.ndarray:
        """Materialise K~ (n x n, float64). Only for small n (dense solver, tests)."""
        n = self.n
        K = np.empty((n, n), dtype=np.float64)
        bounds = self.bounds
        for I, (i0, i1) in enumerate(bounds):
            for J in range(I, len(bounds)):
                j0, j1 = bounds[J]
                blk = self._read_block(I, J)
                K[i0:i1, j0:j1] = blk
                K[j0:j1, i0:i1] = blk.T
        r, c = self.row_means, self.grand_mean
        K -= r[None, :]
        K -= r[:, None]
        K += c
        self.passes += 1
        return K


class StoredKernelOperator(CenteredKernelOperator):
    """Centred operator over a Gram store built by :func:`dkpca.gram.build_gram`."""

    kind = "stored"

    def __init__(self, gram: GramInfo) -> None:
        super().__init__()
        self.gram = gram
        self.path = gram.path
        self.n = gram.n
        self.block = gram.block
        self.dtype = gram.dtype
        self.kernel = gram.kernel
        self.row_means = gram.row_sums / gram.n
        self.grand_mean = float(gram.row_sums.sum() / gram.n**2)
        self.diag_sum = gram.diag_sum
        self.raw_dir = _store.chunk_file(gram.K(), ())

    def _block_task(self, I, J, VI, VJ):
        (i0, i1), (j0, j1) = self.bounds[I], self.bounds[J]
        return dask.delayed(_stored_product, pure=True, nout=2)(
            self.path, self.raw_dir, I, J, i0, i1, j0, j1, self.block, VI, VJ, self.dtype.name)

    def _read_block(self, I, J):
        (i0, i1), (j0, j1) = self.bounds[I], self.bounds[J]
        return _read_block(self.path, self.raw_dir, I, J, i0, i1, j0, j1, self.block, self.dtype.name).copy()


class MatrixFreeKernelOperator(CenteredKernelOperator):
    """Centred operator that re-evaluates kernel blocks from X every pass.

    Parameters
    ----------
    X : dask array or ndarray of shape (n, d)
        Training data; rechunked to row blocks of ``block`` rows and all columns.
    kernel : Kernel
        Resolved kernel.
    dtype : {float32, float64}
        Precision of block evaluation (products still accumulate in float64).
    probe : ndarray of shape (n, l), optional
        A solver's starting block whose product is fused into that pass
        (see :meth:`CenteredKernelOperator.prime`).
    block : int, optional
        Block edge (default: X's first row chunk).
    statistics : bool, default=True
        Compute the centering statistics (one pass).  ``False`` leaves
        ``row_means`` as None and ``grand_mean``/``diag_sum`` as NaN: for the
        Nystroem solver, which never multiplies by K~ and supplies the
        statistics of its approximation instead; ``matmat`` then raises.

    Notes
    -----
    Construction costs one pass (``K 1`` for the centering statistics).  X is
    persisted (in worker memory with a distributed client), O(n d).
    """

    kind = "matrix-free"

    def __init__(self, X: da.Array, kernel: Kernel, dtype: Any = np.float64,
                 probe: np.ndarray | None = None, block: int | None = None, statistics: bool = True) -> None:
        super().__init__()
        if not isinstance(X, da.Array):
            X = np.asarray(X)
            X = da.from_array(X, chunks=(block or X.shape[0], X.shape[1]))
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {X.shape}.")
        block = int(block or X.chunks[0][0])
        # One task per row block needs equal row chunks (matching ``bounds``)
        # and every column in one chunk (to_delayed gives one object per row block).
        if set(X.chunks[0][:-1]) - {block} or X.chunks[0][-1] > block or len(X.chunks[1]) != 1:
            X = X.rechunk((block, X.shape[1]))
        self.X = X.persist() if _has_client() else X
        self.n = X.shape[0]
        self.block = block
        self.dtype = np.dtype(dtype)
        self.kernel = kernel
        self._rows = self.X.to_delayed().ravel()
        self._spec = kernel.to_dict()
        self.row_means = None
        self.grand_mean = float("nan")
        self.diag_sum = float("nan")
        if not statistics:
            if probe is not None:
                raise ValueError("probe needs statistics=True (its product is fused into the statistics pass).")
            return
        self.row_means = np.zeros(self.n)
        self.grand_mean = 0.0
        # K 1 (centering statistics) and, if given, the solver's first product
        # K probe share this pass.
        ones = np.ones((self.n, 1))
        raw = self.raw_matmat(ones if probe is None else np.hstack([ones, probe]))
        row_sums = raw[:, 0]
        self.setup_passes = 1
        if probe is not None:
            self.prime(probe, raw[:, 1:])
        self.row_means = row_sums / self.n
        self.grand_mean = float(row_sums.sum() / self.n**2)
        diag_parts = [dask.delayed(_diag_sum)(r, self._spec, self.dtype.name) for r in self._rows]
        self.diag_sum = float(sum(compute(*diag_parts)))

    def center(self, KV: np.ndarray, V: np.ndarray) -> np.ndarray:
        if self.row_means is None:
            raise ValueError("this operator was built with statistics=False; K~ products need the centering "
                             "statistics (build it with statistics=True).")
        return super().center(KV, V)

    def _block_task(self, I, J, VI, VJ):
        return dask.delayed(_matrix_free_product, pure=True, nout=2)(
            I, J, self._rows[I], self._rows[J], self._spec, self.dtype.name, VI, VJ)

    def _read_block(self, I, J):
        XI = self._rows[I].compute()
        XJ = XI if I == J else self._rows[J].compute()
        return self.kernel.block(XI, None if I == J else XJ, self.dtype)


def _diag_sum(X: np.ndarray, spec: dict, dtype: str) -> float:
    return float(np.sum(from_dict(spec).diag(X, dtype), dtype=np.float64))


def _has_client() -> bool:
    from ._compute import active_client

    return active_client() is not None
