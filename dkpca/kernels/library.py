"""The library of named kernels, with scikit-learn's parameter names and defaults.

Parameter names and defaults follow :func:`sklearn.metrics.pairwise.pairwise_kernels`
(``gamma=None`` means ``1 / n_features``); ``resolve`` fixes such data-dependent
defaults once the number of features is known, so that a stored spec is
complete and a refit cannot silently change ``gamma``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
from scipy.spatial.distance import cdist, pdist, squareform

from .base import Kernel, check_positive, check_real
from .blocks import clamped_exp, gemm_strips, integer_power, safe_inv_norms, sq_dist_exponent, sq_dist_operands
from .fastexp import available as compiled_exp_available
from .fastexp import exp_nonpositive

__all__ = ["GammaKernel", "ExpKernel", "RBF", "CompiledRBF", "Laplacian", "CompiledLaplacian", "Polynomial", "Linear",
           "Sigmoid", "Cosine"]


class GammaKernel(Kernel):
    """A kernel with a coefficient ``gamma`` whose default (None) is ``1 / n_features``, as in scikit-learn."""

    gamma: float | None

    def validate(self) -> None:
        check_positive("gamma", self.gamma, self.name, allow_none=True)

    def resolve(self, n_features: int) -> Kernel:
        return self if self.gamma is not None else replace(self, gamma=1.0 / n_features)


class ExpKernel(GammaKernel):
    """``exp(-gamma * distance(x, y))``: a unit diagonal, and an ``exp`` that :meth:`compiled` can swap.

    ``exp(G, out=G)`` exponentiates the block's exponent in place: numpy's,
    or in the variant :meth:`compiled` returns, the compiled one of
    :mod:`dkpca.kernels.fastexp` (which also clamps the exponent at 0).
    """

    stationary: ClassVar[bool] = True
    exp: ClassVar = staticmethod(np.exp)

    @property
    def nonnegative(self) -> bool:
        return True  # exp(.) > 0

    def _diag(self, X):
        return np.ones(X.shape[0], dtype=X.dtype)

    def compiled(self) -> Kernel:
        variant = COMPILED_VARIANTS.get(type(self))  # None for a variant itself: it is compiled already
        return variant(self.gamma) if variant is not None and compiled_exp_available() else self


@dataclass(frozen=True)
class RBF(ExpKernel):
    """Gaussian kernel ``exp(-gamma * |x - y|^2)``."""

    gamma: float | None = None
    name: ClassVar[str] = "rbf"
    # rounding can leave the exponent a few ulps above 0: exp(min(G, 0)) keeps k <= 1
    exp: ClassVar = staticmethod(clamped_exp)

    def _block(self, X, Y, same, out):
        return sq_dist_exponent(X, Y, same, self.gamma, out, then=self.exp)


@dataclass(frozen=True)
class Laplacian(ExpKernel):
    """Laplacian kernel ``exp(-gamma * |x - y|_1)``."""

    gamma: float | None = None
    name: ClassVar[str] = "laplacian"

    def _block(self, X, Y, same, out):
        # The L1 distance has no GEMM form; scipy's cdist/pdist are the fast
        # path (pdist: half the pairs, and exactly symmetric).
        D = squareform(pdist(X, metric="cityblock")) if same else cdist(X, Y, metric="cityblock")
        if out is None:
            G = D.astype(X.dtype, copy=False)
        else:
            G = out
            np.copyto(G, D, casting="same_kind")
        G *= -self.gamma
        return self.exp(G, out=G)


class CompiledRBF(RBF):
    """:class:`RBF` whose exp runs compiled (:mod:`dkpca.kernels.fastexp`); the same spec (``to_dict``)."""

    exp = staticmethod(exp_nonpositive)

    def exp_operands(self, X, Y, dtype):
        return sq_dist_operands(*self._operands(X, Y, dtype), False, self.gamma)


class CompiledLaplacian(Laplacian):
    """:class:`Laplacian` whose exp runs compiled (:mod:`dkpca.kernels.fastexp`); the same spec (``to_dict``)."""

    exp = staticmethod(exp_nonpositive)


#: each exp kernel's compiled variant (:meth:`ExpKernel.compiled`)
COMPILED_VARIANTS: dict[type, type] = {RBF: CompiledRBF, Laplacian: CompiledLaplacian}


@dataclass(frozen=True)
class Polynomial(GammaKernel):
    """Polynomial kernel ``(gamma * <x, y> + coef0) ** degree``."""

    gamma: float | None = None
    degree: int = 3
    coef0: float = 1.0
    name: ClassVar[str] = "poly"

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.degree, numbers.Integral) or isinstance(self.degree, bool) or self.degree < 1:
            raise ValueError(f"poly kernel: degree={self.degree!r} is invalid; it must be an integer >= 1.")
        check_real("coef0", self.coef0, self.name)

    @property
    def positive_definite(self) -> bool:
        return self.coef0 >= 0

    def _block(self, X, Y, same, out):
        g, c, deg = X.dtype.type(self.gamma), X.dtype.type(self.coef0), self.degree
        buf = []  # the power's scratch, sized by the first strip (the largest): one allocation per block

        def post(G, rows, cols):
            G *= g
            G += c
            if deg == 1:
                return
            if not buf or buf[0].size < G.size:
                buf[:] = [np.empty(G.size, dtype=G.dtype)]
            integer_power(G, deg, buf[0][:G.size].reshape(G.shape))

        return gemm_strips(X, Y, same, out, post)

    def _diag(self, X):
        return (self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0) ** self.degree


@dataclass(frozen=True)
class Linear(Kernel):
    """Linear kernel ``<x, y>``."""

    name: ClassVar[str] = "linear"

    def _block(self, X, Y, same, out):
        return gemm_strips(X, Y, same, out)

    def _diag(self, X):
        return np.einsum("ij,ij->i", X, X)


@dataclass(frozen=True)
class Sigmoid(GammaKernel):
    """Sigmoid kernel ``tanh(gamma * <x, y> + coef0)`` (not positive definite)."""

    gamma: float | None = None
    coef0: float = 1.0
    name: ClassVar[str] = "sigmoid"

    def validate(self) -> None:
        super().validate()
        check_real("coef0", self.coef0, self.name)

    @property
    def positive_definite(self) -> bool:
        return False

    def _block(self, X, Y, same, out):
        g, c = X.dtype.type(self.gamma), X.dtype.type(self.coef0)

        def post(G, rows, cols):
            G *= g
            G += c
            np.tanh(G, out=G)

        return gemm_strips(X, Y, same, out, post)

    def _diag(self, X):
        return np.tanh(self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0)




@dataclass(frozen=True)
class Cosine(Kernel):
    """Cosine similarity ``<x, y> / (|x| |y|)`` (zero rows give zero)."""

    name: ClassVar[str] = "cosine"

    def _block(self, X, Y, same, out):
        ix = safe_inv_norms(X)
        iy = ix if same else safe_inv_norms(Y)

        def post(G, rows, cols):
            G *= ix[rows, None]
            G *= iy[None, cols]

        return gemm_strips(X, Y, same, out, post)

    def _diag(self, X):
        return (np.einsum("ij,ij->i", X, X) > 0).astype(X.dtype)
