"""``KernelPCA.partial_fit``: a fit grown by batches of rows, equal to a fit on all of them, warm-started.

scikit-learn's ``IncrementalPCA`` convention: the first call fits, a later call adds its rows, ``transform``
works at any time.  Each call solves the kernel matrix of every row seen so far to the tolerance of ``fit``, in
the precision ``fit`` would choose for them, so the model after a call *is* the fit on the concatenation (not an
approximation of it).  What a call reuses:

* **K.**  The kernel matrix of the rows seen so far stays in memory; a batch
  of m rows after n costs only its new rows and columns, ``K(X_new, X_old)``
  (n m entries, mirrored) and ``K(X_new, X_new)`` (m^2), never the old n^2.
* **The eigenvectors.**  The iterative solvers start from the previous
  eigenvectors extended to the new rows by the Nystroem formula
  ``u(x) = k~(x)^T U Lambda^-1`` (``k~`` centred by the old rows' statistics:
  :meth:`~dkpca.linalg.Centering.center_scores`, the formula of
  ``transform``), i.e. ``transform(x) / sqrt(lambda)``, plus the solver's usual
  random oversampling columns; ARPACK starts from their sum.  The dense solver
  needs no start.

Out of core (``store=`` set, or a dask array / Zarr / file batch) a call is ``dkpca.fit`` on the store's data
copy followed by the batch, which the store update path turns into an update of the store.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

from .batches import Held, RepeatedBatchWarning, held_rows, refuse_a_store_grown_since, refuse_batch_over_a_killed_one
from .execution import local_threads
from .growth import nystroem_rows
from .io import as_dask, check_feature_names, feature_names, scan
from .kernels import Kernel
from .linalg import Centering, balanced_block, block_bounds, rows_per_block
from .linalg.products import MEMORY_BLOCK
from .model import load
from .projection import gone_store
from .solvers import Solver, subspace_width
from .storage import FitStore

__all__ = ["PartialFit", "KeptKernel", "GROWTH", "cross_kernel", "extend_eigenvectors", "grown_matrix", "warm_start"]

logger = logging.getLogger("dkpca")

#: the kept kernel matrix of the rows seen so far (a fitted attribute: ``fit`` drops it, pickles leave it out)
KEPT = "_kernel_seen_"
#: the ``store`` parameter an out-of-core fit was made with (a later partial_fit grows that fit's store)
STORE_GIVEN = "_store_given"


def cross_kernel(kernel: Kernel, X_new: Any, X_old: Any, dtype: Any) -> np.ndarray:
    """``K(X_new, X_old)`` (m x n) in ``dtype``, strips of old rows evaluated on this process's threads."""
    n, m = X_old.shape[0], X_new.shape[0]
    out = np.empty((m, n), dtype=dtype)
    edge = min(balanced_block(n, MEMORY_BLOCK), rows_per_block(m, out.itemsize))

    def one(bounds: tuple[int, int]) -> None:
        j0, j1 = bounds
        out[:, j0:j1] = kernel.block(X_new, X_old[j0:j1], dtype)

    with local_threads() as pmap:
        list(pmap(one, block_bounds(n, edge)))
    return out


#: how much larger than the grown K a new buffer for the kept K is made (:func:`grown_matrix`): the batches
#: that fit in it write only their rows and columns in place, not a copy of all of K, and its part not yet
#: used is never touched, so never resident (``np.empty``); a batch that outgrows it copies K, once, into a
#: buffer this much larger.  Before, every call copied K into new memory, whose first touch costs this VM
#: about 1 GB/s: 3.2 GB at 20,000 rows in float64.
GROWTH = 1.5


@dataclass(frozen=True)
class KeptKernel:
    """The kernel matrix of the rows seen so far: the leading ``n x n`` of ``buffer``.

    ``owned``: :func:`grown_matrix` made the buffer, so a batch may be written into it; a K rebuilt from
    the rows or a precomputed one of the user's is never written into.
    """

    buffer: np.ndarray
    n: int
    owned: bool = False

    @classmethod
    def of(cls, K: np.ndarray) -> KeptKernel:
        return cls(K, K.shape[0])

    @property
    def matrix(self) -> np.ndarray:
        """The kept K, a view (strided where the buffer is larger: BLAS takes its leading dimension)."""
        return self.buffer[: self.n, : self.n]


def grown_matrix(kept: KeptKernel, cross: np.ndarray, square: np.ndarray) -> KeptKernel:
    """``[[K, cross^T], [cross, square]]`` in K's dtype: in the kept buffer where it has room, else K copied
    once into a new one :data:`GROWTH` times the grown size; the new rows mirrored.

    Strips of rows on this process's threads: a copy's cost is the new memory's first touch (page faults),
    which the threads share (measured at 18,500 -> 20,000 rows, float64: 2.6-5.0 s on one thread).
    """
    n, m = kept.n, square.shape[0]
    N = n + m
    room = kept.owned and kept.buffer.shape[0] >= N
    out = kept.buffer if room else np.empty((int(GROWTH * N),) * 2, dtype=kept.buffer.dtype)
    K = kept.matrix

    def strip(bounds: tuple[int, int]) -> None:
        a, b = bounds
        if a < n:
            if not room:
                out[a:min(b, n), :n] = K[a:min(b, n)]
            out[a:min(b, n), n:N] = cross[:, a:min(b, n)].T
        if b > n:
            out[max(a, n):b, :n] = cross[max(a, n) - n:b - n]
            out[max(a, n):b, n:N] = square[max(a, n) - n:b - n]

    with local_threads() as pmap:
        list(pmap(strip, block_bounds(N, rows_per_block(N, out.itemsize))))
    return KeptKernel(out, N, owned=True)


def extend_eigenvectors(cross: np.ndarray, eigenvalues: np.ndarray, eigenvectors: np.ndarray,
                        centering: Centering) -> np.ndarray:
    """The old eigenvectors extended to new rows: ``[U; k~(X_new, X_old) U Lambda^-1]`` (Nystroem).

    ``cross`` is ``K(X_new, X_old)``, uncentred; it is centred with the old
    rows' statistics exactly as ``transform`` centres new points, whose scores
    are ``k~^T U Lambda^-1/2``.  Columns with a non-positive eigenvalue extend by 0.
    """
    weights = centering.projection_weights(eigenvalues, eigenvectors)
    scores = centering.center_scores(cross @ weights.W, cross.mean(axis=1, dtype=np.float64), weights)
    return np.vstack([eigenvectors, nystroem_rows(scores, eigenvalues)])


def warm_start(extended: np.ndarray, solver: Solver, k: int) -> np.ndarray | None:
    """The start of ``solver`` for ``k`` components from the extended eigenvectors.

    Block Lanczos and subspace iteration: the extended columns (at most the
    subspace width), orthonormalised; the in-memory solve fills the other
    columns with its usual start block's directions outside them
    (:func:`dkpca.eigensolve.solve_kernel_matrix`, ``extend_basis``: random
    columns there cost passes, measured below).  ARPACK: one vector, the sum of
    the orthonormalised extended columns.  The dense solver: None.

    Measured, 10 batches of 2,000 rows to 20,000 (clustered rbf, d = 50, k = 10,
    float64, block Lanczos, tol 1e-10): random fill columns 7-8 passes a call, 44.8 s
    in all; the usual (Nystroem) start alone 6-9 passes, 37.9 s; this fill 6-8, 35.4 s.
    """
    n = extended.shape[0]
    if solver is Solver.ARPACK:
        Q, _ = np.linalg.qr(extended)
        return Q.sum(axis=1)
    if not solver.spec.takes_start:
        return None
    return np.linalg.qr(extended[:, :subspace_width(solver, n, k)])[0]


def stack_rows(old: Any, new: Any) -> Any:
    """The rows seen so far followed by a batch, in the kind (dense or CSR) and dtype of the old rows."""
    if sp.issparse(old):
        return sp.vstack([old, sp.csr_matrix(new, dtype=old.dtype)], format="csr")
    return np.concatenate([old, new.toarray() if sp.issparse(new) else new]).astype(old.dtype, copy=False)


def nearly_symmetric(square: np.ndarray) -> bool:
    """Symmetric but for rounding (scikit-learn's ``rbf_kernel(X)`` differs from its transpose in the last bits)."""
    scale = float(np.max(np.abs(square), initial=0.0))
    return bool(np.all(np.abs(square - square.T) <= 1e3 * np.finfo(square.dtype).eps * scale))


def symmetric_block(square: np.ndarray) -> np.ndarray:
    """A precomputed batch's own block ``K(X_batch, X_batch)`` made exactly symmetric; refused unless it nearly is."""
    if not nearly_symmetric(square):
        raise ValueError(
            "kernel='precomputed': partial_fit grows a symmetric kernel matrix, but the batch's block "
            "K(X_batch, X_batch) (its last columns) is not symmetric; symmetrise it ((K + K.T) / 2), or fit the "
            "whole matrix at once with fit, which centres a non-symmetric K as KernelCenterer does.")
    return (square + square.T) / 2


class PartialFit:
    """The mix-in of :class:`dkpca.KernelPCA` that grows a fit by batches (``partial_fit``'s work).

    It uses the estimator's own pieces (``fit``, its kernel evaluators, its
    iteration limits) so that a grown fit and a fit on the concatenation run
    the same code from K on.
    """

    def __getstate__(self) -> dict[str, Any]:
        # the kept K (n^2) stays out of pickles: the next partial_fit rebuilds it from X_fit_ once
        state = dict(super().__getstate__())  # object.__getstate__ gives the instance's own __dict__
        state.pop(KEPT, None)
        return state

    def _grow(self, X: Any, out_of_core: bool) -> Any:
        """``partial_fit(X)``: the first call fits, a later one adds X's rows (in memory or through the store)."""
        fitted = hasattr(self, "eigenvalues_")
        if out_of_core or self.store is not None or hasattr(self, "model_"):
            self._grow_store(X, fitted)
        elif not fitted:
            if self._is_precomputed():
                given = check_array(X, accept_sparse=False, dtype=[np.float64, np.float32])
                if given.shape[0] != given.shape[1]:
                    raise ValueError(f"kernel='precomputed': partial_fit's first call takes the square kernel matrix "
                                     f"K(X_batch, X_batch), got shape {given.shape}; later calls take the batch's "
                                     "rows of the grown matrix.")
                symmetric_block(given)
            self.fit(X)  # the first call fits; K is rebuilt from X_fit_ by the next call
        else:
            self._check_kernel_unchanged()
            self._grow_in_memory(X)
        self.n_samples_seen_ = int(self.X_fit_.shape[0])
        return self

    def _grow_store(self, X: Any, fitted: bool) -> None:
        if self.store is None:
            raise ValueError(
                "partial_fit out of core (a dask array, Zarr or file batch, or a fit made out of core) grows a "
                "store: pass store='path.dkpca.zarr' to KernelPCA, or pass numpy batches to grow the fit in memory.")
        store = self._fitted_store()
        seen, names = self._rows_seen(fitted, store)
        # a data frame's columns must be the fitted ones in their order (the batch is appended by position); a
        # batch without names after named ones is warned of, as validate_data warns on the in-memory path
        given = check_feature_names(X, names)
        if names is not None and given is None:
            warnings.warn(f"X does not have valid feature names, but {type(self).__name__} was fitted with feature "
                          "names", UserWarning, stacklevel=4)
        batch = as_dask(X, min_samples=1 if seen is not None else 2, purpose="partial_fit")
        if seen is not None and batch.shape[1] != seen.shape[1]:
            raise ValueError(f"X has {batch.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{seen.shape[1]} features as input.")
        scan(batch)  # a non-finite value named by its row in the batch, not in the rows seen and the batch
        grown = None if seen is None else da.concatenate([seen, batch.astype(seen.dtype)])
        if grown is not None:
            refuse_batch_over_a_killed_one(grown, store)
        if fitted:
            refuse_a_store_grown_since(store, seen.shape[0])
        if grown is not None and not fitted and self._rerun(seen, batch.astype(seen.dtype), store):
            grown = seen  # the store's fit is this estimator's: fitted on its own rows, nothing computed
        state = dict(self.__dict__)
        try:
            # the rows seen (lazily) followed by the batch: dkpca.fit sees a store whose data is the first
            # rows of its input, and updates it (keeping the fit's feature names); a first data frame as it is,
            # so that its column names are the fit's
            self._reset()  # as fit does; a later call updates the store's fit, only the first may overwrite it
            first = X if feature_names(X) is not None else batch
            self._fit_out_of_core(first if grown is None else grown, update=fitted, store=store)
        except BaseException:
            # fit drops the fitted attributes first: a batch refused leaves the estimator as it was, as in memory
            self.__dict__.clear()
            self.__dict__.update(state)
            raise

    def _fitted_store(self) -> str:
        """The store a call grows: the one this estimator was fitted into, by the absolute path its model records
        (an estimator unpickled in another directory grew a new store there from a relative ``store=``)."""
        model = getattr(self, "model_", None)
        given = self.__dict__.get(STORE_GIVEN)
        if model is None or model.temporary is not None or given is None:
            return os.fspath(self.store)
        if FitStore.at(model.store).is_new():  # the rows fitted are read from it: not "damaged", gone
            raise FileNotFoundError(gone_store(model.store))
        if os.fspath(self.store) != given:
            raise ValueError(f"store={os.fspath(self.store)!r} was set after this {type(self).__name__} was fitted "
                             f"into {model.store!r}; partial_fit grows the fitted store: set store back, or call fit "
                             "to start afresh in the new one.")
        return model.store

    def _rerun(self, seen: da.Array, batch: da.Array, store: str) -> bool:
        """A new estimator's first batch on a store's fit: True where it is that fit's last rows (a rerun of the
        call that added them: nothing added, warned); refused where it is its first rows."""
        held = held_rows(seen, batch)
        n, m = seen.shape[0], batch.shape[0]
        if held is Held.FIRST:
            raise ValueError(f"the batch's {m} rows are the first {m} of the {n} rows store {store!r} holds a fit of "
                             "(a rerun from the first batch?): a new estimator continues the store's fit, and this "
                             "would fit them twice. Pass only rows not yet added, or overwrite=True to start afresh.")
        if held is Held.LAST:
            warnings.warn(f"the batch's {m} rows are already the last {m} of the {n} rows store {store!r} holds a fit "
                          "of (a rerun of the call that added them?): nothing added; the estimator holds the "
                          "store's fit.", RepeatedBatchWarning, stacklevel=5)
        return held is Held.LAST

    def _rows_seen(self, fitted: bool, path: str) -> tuple[da.Array | None, tuple[str, ...] | None]:
        """The rows fitted so far, lazily (None before the first fit), and their feature names (None: none).  A
        fresh estimator whose store holds a fit continues it (a job run again each night on its new rows),
        reading the model's own rows; with ``overwrite=True`` it starts afresh on the batch."""
        if fitted:
            names = getattr(self, "feature_names_in_", None)
            seen = self.X_fit_ if isinstance(self.X_fit_, da.Array) else da.from_array(np.asarray(self.X_fit_))
            return seen, None if names is None else tuple(names)
        store = FitStore.at(path)
        if self.overwrite or store.is_new():
            return None, None
        try:
            held = store.model_group() is not None
        except (OSError, ValueError):  # not a store dkpca reads: the fit refuses it, naming why
            return None, None
        if not held:
            return None, None
        model = load(path)  # damage raises here, naming it
        logger.info("partial_fit: continuing the fit of %d rows in store %s", model.n_samples, store.path)
        return model.X_fit, model.feature_names

    def _check_kernel_unchanged(self) -> None:
        """Refuse kernel parameters changed since the fit (``set_params``): its kept K is of the old kernel."""
        now = self._make_kernel(self.n_features_in_)  # the kernel the parameters now give, resolved as fit does
        if now != self.kernel_:
            raise ValueError(
                f"the kernel parameters changed since this KernelPCA was fitted (fitted: "
                f"{'a callable or precomputed kernel' if self.kernel_ is None else self.kernel_}, now: "
                f"{'a callable or precomputed kernel' if now is None else now}); partial_fit adds rows to the "
                "fitted kernel matrix: set the parameters back, or call fit to start afresh with the new ones.")

    def _kept_kernel(self) -> KeptKernel:
        """K of the rows seen so far: the kept one (taken out of the estimator), else rebuilt from ``X_fit_``."""
        kept = self.__dict__.pop(KEPT, None)
        if kept is not None:
            return kept
        if self._is_precomputed():
            return KeptKernel.of(np.asarray(self.X_fit_))
        return KeptKernel.of(self._training_kernel(self.X_fit_))

    def _grow_in_memory(self, X: Any) -> None:
        n = self.X_fit_.shape[0]
        if self._is_precomputed():
            self._grow_precomputed(check_array(X, dtype=[np.float64, np.float32]), n)
            return
        X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32])
        X = stack_rows(self.X_fit_[:0], X)  # the batch in the kind and dtype of the rows seen
        X_all = stack_rows(self.X_fit_, X)
        if self._compute_dtype == np.float32 and getattr(self.precision_, "requested", None) == "auto":
            # 'auto' measured float32 on the rows seen (3 of them, say); a fit of all the rows may hold K in float64
            self._choose_precision(X_all, *self._in_memory_choice(X_all.shape[0], warm=True))
            if self._compute_dtype == np.float64:  # K rebuilt as an update rebuilds it; the float32 one let go first
                self.__dict__.pop(KEPT, None)
                self._solve_grown(KeptKernel.of(self._training_kernel(X_all)), X_all, n)
                return
        kept = self._kept_kernel()
        dtype = kept.buffer.dtype
        evaluator = self.kernel_ if self.kernel_ is not None and not sp.issparse(X) else self._evaluator()
        cross = cross_kernel(evaluator, X, self.X_fit_, dtype)
        kept = grown_matrix(kept, cross, self._training_kernel(X).astype(dtype, copy=False))
        del cross
        self._solve_grown(kept, X_all, n)

    def _grow_precomputed(self, X: np.ndarray, n: int) -> None:
        """A precomputed batch: its rows of the grown K, ``(m, n + m)``, or the whole grown K, square."""
        m, cols = X.shape
        if m == cols >= n:  # the whole grown matrix: it replaces the kept one (a non-symmetric one: fit's path)
            if not nearly_symmetric(X):
                self.fit(X)
                return
            kept = KeptKernel.of(symmetric_block(X).astype(self._compute_dtype, copy=False))
            self.__dict__.pop(KEPT, None)
        elif cols == n + m:
            square = symmetric_block(X[:, n:])
            kept = self._kept_kernel()
            dtype = kept.buffer.dtype
            kept = grown_matrix(kept, X[:, :n].astype(dtype, copy=False), square.astype(dtype, copy=False))
        else:
            raise ValueError(
                f"X has {cols} features, but {type(self).__name__} is expecting {n} features as input, plus one per "
                f"new row: with kernel='precomputed' partial_fit takes the batch's rows of the grown kernel matrix, "
                f"K(X_batch, [X_seen, X_batch]) of shape ({m}, {n + m}) after {n} rows, or the whole grown matrix "
                "(square, at least as large as the one fitted).")
        self._solve_grown(kept, kept.matrix, n)
        self.n_features_in_ = kept.n

    def _solve_grown(self, kept: KeptKernel, X_all: Any, n_old: int) -> None:
        """Solve the grown K as ``fit`` solves its K, from the warm start, and keep the fitted attributes.

        The warm start needs ``K(X_new, X_old)``, which is K's block ``[n_old:, :n_old]`` (a view); it is
        computed only for a solver that takes it.
        """
        K = kept.matrix
        N = K.shape[0]
        k, solver = self._in_memory_choice(N, warm=True)
        typed = Solver.parse(solver)
        start = None
        if not isinstance(k, float) and (typed is Solver.ARPACK or typed.spec.takes_start):
            extended = extend_eigenvectors(K[n_old:, :n_old], self.eigenvalues_, self.eigenvectors_, self._centering)
            start = warm_start(extended, typed, k)
        started = "its own start" if start is None else f"the {self.eigenvectors_.shape[1]} extended eigenvectors"
        res = self._solve_in_memory(K, X_all, k, solver, start=start)
        logger.info("partial_fit: %d + %d rows, solver %s from %s, %d passes", n_old, N - n_old, typed.value,
                    started, res.passes)
        if self.fit_inverse_transform:
            self._fit_ridge(X_all)
        setattr(self, KEPT, kept)
