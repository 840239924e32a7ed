"""The centred kernel operator: ``K~ @ V`` without ever forming K~.

Every solver talks to a :class:`CenteredKernelOperator` and nothing else.  K~ =
H K H is applied through the rank-one corrections of
:class:`~dkpca.linalg.Centering`, so one product costs one pass over K.  Three
sources of K blocks share all of the product code:

* :class:`StoredKernelOperator` reads the upper-triangular blocks of a Gram
  store; block (I, J) contributes ``K_IJ V_J`` to rows I and ``K_IJ^T V_I``
  to rows J, so each stored block is read exactly once per pass;
* :class:`MatrixFreeKernelOperator` re-evaluates the same blocks from X on the
  workers each pass (no store; memory is one block per running task);
* :class:`InMemoryKernelOperator` holds K as one array (the estimator's
  in-memory path): one GEMM per product.

Products accumulate in float64 whatever the storage precision, so the operator
is the exact symmetric matrix ``fl32(K)`` and residuals can be driven far
below float32 rounding.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import dask.array as da
import numpy as np

from .execution import active_client, compute, local_threads, placed, shares
from .kernels import Kernel, NonFiniteKernelError
from .linalg import (
    Centering,
    TaskGraph,
    block_bounds,
    block_products,
    carried_pass,
    gather_sum,
    group_products,
    kernel_block_products,
    matrix_product,
    pair_weights,
    scatter_sum,
    touched_rows,
    upper_pairs,
)
from .storage import ChunkReader, GramInfo

__all__ = ["CenteredKernelOperator", "StoredKernelOperator", "MatrixFreeKernelOperator", "InMemoryKernelOperator"]


def _stored_product(reader: ChunkReader, I: int, J: int, shape: tuple[int, int], VI: np.ndarray, VJ: np.ndarray,
                    expect: int | None = None, compiled: bool = False):
    return block_products(reader.read(I, J, shape, expect=expect), VI, VJ, I != J, compiled)


def _matrix_free_product(I: int, J: int, XI: np.ndarray, XJ: np.ndarray, kernel: Kernel, dtype: str,
                         VI: np.ndarray, VJ: np.ndarray, compiled: bool = False):
    return kernel_block_products(kernel, XI, XJ, VI, VJ, dtype, I == J, compiled)


def _diag_sum(X: np.ndarray, kernel: Kernel, dtype: str) -> float:
    return float(np.sum(kernel.diag(X, dtype), dtype=np.float64))


class CenteredKernelOperator:
    """``V -> K~ V`` for the centred kernel matrix of the training data.

    Attributes
    ----------
    n : int
        Number of training points.
    block : int
        Block edge; products run one task per upper-triangular block.
    centering : Centering or None
        ``r``, ``c`` and ``trace(K)``; None until known (matrix-free without statistics).
    passes : int
        Products computed so far (each is one pass over K).
    pass_seconds : list of float
        Wall time of each product.
    """

    n: int
    block: int
    dtype: np.dtype
    kernel: Kernel | None = None
    kind = "abstract"

    def __init__(self) -> None:
        self.passes = 0
        self.fused_passes = 0
        #: passes made before any solver product (matrix-free: K 1)
        self.setup_passes = 0
        self.pass_seconds: list[float] = []
        self.centering: Centering | None = None
        self._primed: tuple[np.ndarray, np.ndarray] | None = None

    def prime(self, V: np.ndarray, KV: np.ndarray) -> None:
        """Hand over ``K @ V`` computed elsewhere (fused into the Gram build).

        The next ``matmat`` with this very ``V`` object returns it centred
        without a pass over K; it still counts as a product (``passes``) and is
        recorded in ``fused_passes``.
        """
        self._primed = (V, KV)

    # -- to be provided by subclasses -------------------------------------
    #: ``(K_IJ V_J, K_IJ^T V_I)`` of one block from ``block_args``'s arguments (a module-level function)
    block_func: Any = None

    def block_args(self, graph: TaskGraph, I: int, J: int, VI: Any, VJ: Any) -> tuple:  # pragma: no cover
        """The arguments of ``block_func`` for block (I, J) in ``graph``, with V's row pieces ``VI``, ``VJ``."""
        raise NotImplementedError

    def graph_inputs(self) -> list:
        """Dask collections that ``block_args`` refers to (none: a stored K is read by the tasks themselves)."""
        return []

    def read_block(self, I: int, J: int) -> np.ndarray:  # pragma: no cover
        """Block (I, J) of K as a new array."""
        raise NotImplementedError

    def training_data(self) -> da.Array:  # pragma: no cover
        """The training data K was (or is) evaluated from, lazily (for solvers that evaluate kernel slices)."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def bounds(self) -> list[tuple[int, int]]:
        return block_bounds(self.n, self.block)

    def _stats(self) -> Centering:
        if self.centering is None:
            raise ValueError("this operator has no centering statistics (built with statistics=False); K~ "
                             "products need them (build it with statistics=True).")
        return self.centering

    @property
    def row_means(self) -> np.ndarray:
        return self._stats().row_means

    @property
    def single_error(self) -> float | None:
        """A bound on the error of a single-precision product with a unit vector (2-norm); None where none is made.

        K float32 with entries known to be nonnegative (:attr:`dkpca.kernels.Kernel.nonnegative`): the
        unit roundoff times ``3 + sqrt(b)`` -- V rounded to float32, each block's product rounded to float32
        and a cluster share's partial sums sent in float32, and dot products of ``b`` terms (the block's
        edge) summed in float32, whose error grows like ``sqrt(b)`` (Higham & Mary, "A new approach to
        probabilistic rounding error analysis", SISC 2019) -- times ``|| |K| ||_2``, at most K's largest
        row sum.  At n = 24,000 (rbf, block 4,000): 1.3e-3, where the worst of 20 columns was off by 3.8e-5.  The
        centring's corrections are float64.  Block Lanczos multiplies its late passes in float32 under it.
        """
        if self.dtype != np.float32 or self.kernel is None or not self.kernel.nonnegative or self.centering is None:
            return None
        largest_row_sum = float(self.centering.row_means.max()) * self.n
        return float(np.finfo(np.float32).eps / 2 * (3.0 + np.sqrt(min(self.block, self.n))) * largest_row_sum)

    @property
    def grand_mean(self) -> float:
        return self._stats().grand_mean

    @property
    def trace(self) -> float:
        """``trace(K~) = trace(K) - n c``, exact without any eigenvalue."""
        return self._stats().trace

    def operand(self, V: np.ndarray, single: bool = False) -> np.ndarray:
        """``V`` as a pass multiplies it: float32 when ``single`` is asked and K is float32, else float64."""
        return np.ascontiguousarray(V, dtype=np.float32 if single and self.dtype == np.float32 else np.float64)

    def raw_matmat(self, V: np.ndarray, single: bool = False, zero_above: int = 0) -> np.ndarray:
        """``K @ V`` (uncentred), one pass over the upper-triangular blocks.

        ``single=True`` computes the products in float32 when K is stored in
        float32 (relative error ~1e-6; for early solver passes only).
        ``zero_above``: V's rows before it are zero, so only the blocks reaching past it are read (a grown
        fit's new rows: :mod:`dkpca.growth`).
        """
        V = self.operand(V, single)
        bounds = self.bounds
        graph = TaskGraph("dkpca-pass", self.graph_inputs())
        nb = len(bounds)
        pairs = [(I, J) for I, J in upper_pairs(nb) if bounds[J][1] > zero_above]
        groups = shares(pair_weights(bounds, pairs), pairs)
        # A cluster's shares carry their pieces of V in their own arguments:
        # one message per worker, no piece tasks and no transfers between
        # workers before the products start.  Past a budget they refer to
        # piece tasks instead, so that V does not pass through the scheduler
        # once per share (carried_pass).
        cluster = groups[0][0] is not None
        carried = carried_pass(len(groups), n=self.n, width=V.shape[1], cluster=cluster, itemsize=V.dtype.itemsize)
        # a row block wholly in the zero rows multiplies nothing (None: block_products skips its K^T V_I)
        pieces = [None if b <= zero_above else V[a:b] if carried else graph.data(V[a:b]) for a, b in bounds]
        # a single-precision pass's partial sums cross the network in float32
        # (measured at n = 20,000 on two workers: 6.4 MB a pass otherwise)
        wire = "float32" if V.dtype == np.float32 and cluster else None
        tasks, rows = [], []
        for worker, members in groups:
            group = [pairs[i] for i in members]
            with placed(worker):
                tasks.append(graph.task(group_products, self.block_func, group,
                                        [list(self.block_args(graph, I, J, pieces[I], pieces[J])) for I, J in group],
                                        wire))
            rows.append(touched_rows(group))
        if carried:  # shares that carried their pieces: their outputs added here, no sum tasks
            return np.concatenate(gather_sum(rows, list(compute(*graph.outputs(tasks))), nb), axis=0)
        return np.concatenate(compute(*graph.outputs(scatter_sum(rows, tasks, nb, graph=graph))), axis=0)

    def matmat(self, V: np.ndarray, single: bool = False) -> np.ndarray:
        """``K~ @ V`` for ``V`` of shape (n, l); counts one pass.

        ``single=True`` allows single-precision products (see ``raw_matmat``);
        the result is float64 either way.
        """
        t0 = time.perf_counter()
        primed, self._primed = self._primed, None
        raw = None
        if primed is not None and primed[0] is V:
            self.fused_passes += 1
            raw = primed[1]
        V = np.asarray(V, dtype=np.float64)
        if V.ndim != 2 or V.shape[0] != self.n:
            raise ValueError(f"V must have shape ({self.n}, l); got {V.shape}.")
        stats = self._stats()
        out = stats.center_product(raw if raw is not None else self.raw_matmat(V, single=single), V)
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
                blk = self.read_block(I, J)
                K[i0:i1, j0:j1] = blk
                K[j0:j1, i0:i1] = blk.T
        self.passes += 1
        return self._stats().center_matrix(K)


class StoredKernelOperator(CenteredKernelOperator):
    """Centred operator over a Gram store built by :func:`dkpca.gram.build_gram`."""

    kind = "stored"

    def __init__(self, gram: GramInfo, compiled: bool = False) -> None:
        super().__init__()
        self.gram = gram
        self.compiled = compiled  # the products' compiled loop (block_products): the plan's compiled exp
        self.n = gram.n
        self.block = gram.block
        self.dtype = gram.dtype
        self.kernel = gram.kernel
        self.centering = Centering.from_row_sums(gram.row_sums, gram.diag_sum)
        # K's chunk layout is resolved once here, not per block per pass.
        self.reader = gram.reader()

    block_func = staticmethod(_stored_product)

    def block_args(self, graph, I, J, VI, VJ):
        (i0, i1), (j0, j1) = self.bounds[I], self.bounds[J]
        return (self.reader, I, J, (i1 - i0, j1 - j0), VI, VJ, self.gram.expected_digest(I, J), self.compiled)

    def read_block(self, I, J):
        (i0, i1), (j0, j1) = self.bounds[I], self.bounds[J]
        return self.reader.read(I, J, (i1 - i0, j1 - j0), expect=self.gram.expected_digest(I, J)).copy()

    def training_data(self) -> da.Array:
        return self.gram.store.training_data()


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
        A solver's starting block whose product is fused into the statistics
        pass (see :meth:`CenteredKernelOperator.prime`).
    block : int, optional
        Block edge (default: X's first row chunk).
    statistics : bool, default=True
        Compute the centering statistics (one pass).  ``False`` leaves
        ``centering`` None: for the Nystroem solver, which never multiplies by
        K~ and supplies the statistics of its approximation instead.

    Notes
    -----
    Construction costs one pass (``K 1`` for the centering statistics).  X is
    persisted (in worker memory with a distributed client), O(n d).
    """

    kind = "matrix-free"

    def __init__(self, X: da.Array, kernel: Kernel, dtype: Any = np.float64,
                 probe: np.ndarray | None = None, block: int | None = None, statistics: bool = True,
                 compiled: bool = False) -> None:
        super().__init__()
        self.compiled = compiled  # kernel_block_products' compiled loops: the plan's compiled exp
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
        self.X = X.persist() if active_client() is not None else X
        self.n = X.shape[0]
        self.block = block
        self.dtype = np.dtype(dtype)
        self.kernel = kernel
        self._rows = self.X.to_delayed().ravel()
        if not statistics:
            if probe is not None:
                raise ValueError("probe needs statistics=True (its product is fused into the statistics pass).")
            return
        # K 1 (centering statistics) and, if given, the solver's first product
        # K probe share this pass.
        ones = np.ones((self.n, 1))
        raw = self.raw_matmat(ones if probe is None else np.hstack([ones, probe]))
        if not np.isfinite(raw[:, 0]).all():
            raise NonFiniteKernelError.of("the kernel matrix", kernel.to_dict())
        self.setup_passes = 1
        if probe is not None:
            self.prime(probe, raw[:, 1:])
        diag_parts = [dask.delayed(_diag_sum)(r, kernel, self.dtype.name) for r in self._rows]
        self.centering = Centering.from_row_sums(raw[:, 0], float(sum(compute(*diag_parts))))

    block_func = staticmethod(_matrix_free_product)

    #: no float32 Lanczos passes: a pass here is K's evaluation more than its product (n = 40,000, compiled rbf:
    #: 1.88-1.97 s a float32 pass, 1.94-2.34 s a float64 one), so the bound they would add buys nothing
    single_error = None

    def block_args(self, graph, I, J, VI, VJ):
        return (I, J, graph.ref(self._rows[I]), graph.ref(self._rows[J]), self.kernel, self.dtype.name, VI, VJ,
                self.compiled)

    def graph_inputs(self) -> list:
        return list(self._rows[:1])  # the row blocks share one graph (to_delayed)

    def read_block(self, I, J):
        XI = self._rows[I].compute()
        XJ = XI if I == J else self._rows[J].compute()
        return self.kernel.block(XI, None if I == J else XJ, self.dtype)

    def training_data(self) -> da.Array:
        return self.X


class InMemoryKernelOperator(CenteredKernelOperator):
    """The centred operator over a kernel matrix held in memory (one block: K itself)."""

    kind = "in-memory"

    def __init__(self, K: np.ndarray, kernel: Kernel | None = None) -> None:
        super().__init__()
        self.K = K
        self.kernel = kernel  # what K was evaluated with, where known (its entries' sign: single_error)
        self.n = K.shape[0]
        self.block = self.n
        self.dtype = K.dtype
        self.centering = Centering.of_matrix(K)

    def raw_matmat(self, V: np.ndarray, single: bool = False, zero_above: int = 0) -> np.ndarray:
        # K is in memory: K itself is the one block.  A float32 K (the
        # estimator keeps a float32 X's precision, as scikit-learn does) is
        # multiplied in float32 only when asked (``single``: ARPACK in single
        # precision, scikit-learn's arithmetic for float32 input); otherwise
        # exactly, as fl32(K) in float64 -- block_products' rules for a block.
        V = self.operand(V, single)
        if V.dtype == self.K.dtype:  # one GEMM on the configured BLAS threads
            return block_products(self.K, V, V, False)[0]
        # fl32(K) times a float64 V is widened strip by strip (block_products), a copy per entry that one
        # BLAS call cannot spread over the cores: row blocks go to this process's threads instead.
        with local_threads() as pmap:
            return matrix_product(self.K, V, map=pmap)

    def read_block(self, I: int, J: int) -> np.ndarray:
        return self.K
