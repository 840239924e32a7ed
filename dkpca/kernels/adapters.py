"""Adapters that make scikit-learn's other kernel inputs dkpca Kernels.

* :class:`CallableKernel` -- a user's ``k(x, y) -> float``, evaluated exactly as
  scikit-learn evaluates a callable metric (``pairwise_kernels``);
* :class:`SparseInputKernel` -- a named dkpca kernel applied to scipy sparse
  rows: scikit-learn's pairwise kernels multiply sparse matrices without
  densifying them, which dkpca's dense block code cannot.

Both are in-memory only: they have no JSON spec (``to_dict`` raises), so they
can never reach a store.  A precomputed kernel needs no adapter: its blocks
are the given matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.metrics.pairwise import pairwise_kernels

from .base import Kernel

__all__ = ["CallableKernel", "SparseInputKernel", "SPARSE_PAIRWISE"]

#: named kernels scikit-learn evaluates on sparse matrices without densifying
#: (its laplacian needs int32 sparse indices; dkpca densifies for that one)
SPARSE_PAIRWISE = ("rbf", "poly", "linear", "sigmoid", "cosine")


def _into(K: Any, dtype: Any, out: np.ndarray | None) -> np.ndarray:
    K = np.asarray(K)
    if out is None:
        return np.ascontiguousarray(K, dtype=dtype)
    np.copyto(out, K, casting="same_kind")
    return out


def _dense(A: Any) -> Any:
    return A.toarray() if sp.issparse(A) else A


@dataclass(frozen=True, eq=False)
class CallableKernel(Kernel):
    """A callable ``func(x, y, **params) -> float`` as a kernel (scikit-learn's meaning of a callable)."""

    func: Callable[..., float] | None = None
    params: dict = field(default_factory=dict)
    n_jobs: int | None = None
    name: ClassVar[str] = "callable"

    @property
    def positive_definite(self) -> bool:
        return False  # nothing is known about a user's function

    def block(self, X: Any, Y: Any = None, dtype: Any = np.float64, out: np.ndarray | None = None) -> np.ndarray:
        if X.shape[0] and (Y is None or Y.shape[0]):
            self.check_value(self.func(X[0], (X if Y is None else Y)[0], **self.params))
        K = pairwise_kernels(X, Y, metric=self.func, filter_params=True, n_jobs=self.n_jobs, **self.params)
        return _into(K, dtype, out)

    def check_value(self, value: Any) -> None:
        """Refuse what is not one real number per pair (a vector, a string, None), naming the callable.

        Checked on the first pair before the n^2 calls: scikit-learn would
        otherwise fail inside ``pairwise_kernels`` with "setting an array
        element with a sequence".  Non-finite numbers are left to the
        in-memory K's check, which names the kernel too.
        """
        v = np.asarray(value) if not isinstance(value, (str, bytes)) else None
        if v is None or v.ndim != 0 or v.dtype.kind not in "biuf":
            shape = "" if v is None or v.ndim == 0 else f" of shape {v.shape}"
            raise TypeError(f"callable kernel {getattr(self.func, '__name__', self.func)!r} must return a number for "
                            f"a pair of points (x, y); it returned {type(value).__name__}{shape}. Return one float per "
                            "pair, e.g. float(np.dot(x, y)).")

    def _diag(self, X: np.ndarray) -> np.ndarray:
        values = [self.func(x, x, **self.params) for x in X]
        if values:
            self.check_value(values[0])
        return np.array(values, dtype=np.float64)

    def diag(self, X: Any, dtype: Any = np.float64) -> np.ndarray:
        return self._diag(np.asarray(_dense(X), dtype=np.float64)).astype(dtype, copy=False)

    def to_dict(self) -> dict[str, Any]:
        raise ValueError("a callable kernel has no stored form; it is in-memory only (use a named kernel or a "
                         "dkpca Kernel to fit out of core).")


@dataclass(frozen=True, eq=False)
class SparseInputKernel(Kernel):
    """A named dkpca kernel (``base``) evaluated on scipy sparse rows without densifying where possible."""

    base: Kernel | None = None
    n_jobs: int | None = None
    name: ClassVar[str] = "sparse-input"

    @property
    def positive_definite(self) -> bool:
        return self.base.positive_definite

    @property
    def nonnegative(self) -> bool:
        return self.base.nonnegative

    def block(self, X: Any, Y: Any = None, dtype: Any = np.float64, out: np.ndarray | None = None) -> np.ndarray:
        if not (sp.issparse(X) or (Y is not None and sp.issparse(Y))):
            return self.base.block(X, Y, dtype, out)
        spec = self.base.to_dict()
        name = spec.pop("name")
        if name in SPARSE_PAIRWISE:
            K = pairwise_kernels(X, Y, metric=name, filter_params=True, n_jobs=self.n_jobs, **spec)
            return _into(K, dtype, out)
        return self.base.block(_dense(X), None if Y is None else _dense(Y), dtype, out)

    def diag(self, X: Any, dtype: Any = np.float64) -> np.ndarray:
        return self.base.diag(_dense(X), dtype)

    def to_dict(self) -> dict[str, Any]:
        raise ValueError("a sparse-input kernel has no stored form; it is in-memory only.")
