"""Kernel specifications and fast block evaluation.

Every kernel is a small immutable object that

* evaluates a block ``K(X, Y)`` (``block``) with one GEMM and in-place
  elementwise work, in float32 or float64,
* evaluates its diagonal ``k(x, x)`` without forming a block (``diag``),
* round-trips through a JSON-serialisable dict (``to_dict`` / ``from_dict``),
  which is what the Gram store and the persisted model record.

Parameter names and defaults follow :func:`sklearn.metrics.pairwise.pairwise_kernels`
(``gamma=None`` means ``1 / n_features``); ``resolve`` fixes such data-dependent
defaults once the number of features is known, so that a stored spec is
complete and a refit cannot silently change ``gamma``.

Sums, products and positive scalings of kernels are kernels (Keriven,
"Operations on kernels"), written ``k1 + k2``, ``k1 * k2`` and ``2.0 * k``.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "Kernel",
    "RBF",
    "Laplacian",
    "Polynomial",
    "Linear",
    "Sigmoid",
    "Cosine",
    "Sum",
    "Product",
    "Scaled",
    "make_kernel",
    "from_dict",
    "KERNEL_NAMES",
]


def _check_positive(name: str, value: Any, kernel: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value) or value <= 0:
        raise ValueError(
            f"{kernel} kernel: {name}={value!r} is invalid; it must be a finite number > 0"
            + (" (or None for 1/n_features)" if allow_none else "")
            + "."
        )


def _check_real(name: str, value: Any, kernel: str) -> None:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{kernel} kernel: {name}={value!r} is invalid; it must be a finite number.")


def _field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _as_float(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=dtype)


class Kernel:
    """Base class of all kernels.

    Subclasses implement ``_block(X, Y)`` on float arrays of the requested dtype
    and ``_diag(X)``; the public methods take care of dtype and contiguity.
    """

    name: ClassVar[str] = "kernel"
    #: whether k(x, y) depends only on x - y (distances can then be taken
    #: after shifting both blocks by a common point, which avoids cancellation)
    stationary: ClassVar[bool] = False

    # -- evaluation -------------------------------------------------------
    def block(
        self, X: np.ndarray, Y: np.ndarray | None = None, dtype: Any = np.float64, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Kernel block ``K[i, j] = k(X[i], Y[j])``.

        Parameters
        ----------
        X : ndarray of shape (n_x, d)
        Y : ndarray of shape (n_y, d), default=None
            ``None`` means ``Y = X`` (the block is then exactly symmetric).
        dtype : {float32, float64}
            Precision of the computation and of the result.
        out : ndarray of shape (n_x, n_y), optional
            C-contiguous buffer of ``dtype`` to write into (avoids allocating a
            large temporary per block).

        Returns
        -------
        K : ndarray of shape (n_x, n_y), C-contiguous, of ``dtype``.
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype={dtype} is not supported; use float32 or float64.")
        Xf = _as_float(X, dtype)
        Yf = Xf if Y is None or Y is X else _as_float(Y, dtype)
        if self.stationary:
            # Shifting both blocks by a common point leaves x - y unchanged but
            # keeps |x|^2 + |y|^2 - 2 x.y from cancelling catastrophically.
            shift = Xf.mean(axis=0, dtype=np.float64).astype(dtype)
            Xf = Xf - shift
            Yf = Xf if Y is None or Y is X else Yf - shift
        # With Y = X every subclass returns an exactly symmetric block: the
        # store keeps only the upper half of K, so k(x_i, x_j) and k(x_j, x_i)
        # must not differ by rounding.
        return self._block(Xf, Yf, Y is None or Y is X, out)

    def diag(self, X: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
        """Diagonal ``k(x_i, x_i)`` of shape (n_x,), without forming a block."""
        return self._diag(_as_float(X, np.dtype(dtype)))

    def __call__(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
        """Float64 block; makes a kernel usable as a scikit-learn callable."""
        return self.block(X, Y, np.float64)

    def _block(self, X: np.ndarray, Y: np.ndarray, same: bool, out: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def _diag(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    # -- parameters -------------------------------------------------------
    def resolve(self, n_features: int) -> Kernel:
        """Return a copy with data-dependent defaults (``gamma=None``) fixed."""
        return self

    def validate(self) -> None:
        """Raise ``ValueError`` naming the parameter if a value is out of range."""

    @property
    def positive_definite(self) -> bool:
        """Whether the kernel is guaranteed positive semi-definite."""
        return True

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable spec; ``from_dict(k.to_dict()) == k``."""
        d: dict[str, Any] = {"name": self.name}
        for f in _field_names(type(self)):
            v = getattr(self, f)
            # numpy scalars are not JSON serialisable
            d[f] = int(v) if isinstance(v, numbers.Integral) else float(v) if isinstance(v, numbers.Real) else v
        return d

    # -- algebra (Keriven, "Operations on kernels") ------------------------
    def __add__(self, other: Kernel) -> Kernel:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum((self, other))

    def __mul__(self, other: Any) -> Kernel:
        if isinstance(other, Kernel):
            return Product((self, other))
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return Scaled(float(other), self)
        return NotImplemented

    __rmul__ = __mul__


# -- gram-matrix helpers shared by the dot-product kernels --------------------


#: bytes of one row strip of a block; the elementwise steps after the GEMM
#: run on a strip while it is still in the per-core L2 cache (measured: a
#: 4096^2 float32 rbf block 1.6x faster than whole-block passes when two
#: threads share memory bandwidth).
_STRIP_BYTES = 1 << 20


def _mirror_upper(G: np.ndarray, tile: int = 128) -> None:
    """Copy the upper triangle of square ``G`` onto the lower, tile by tile."""
    n = G.shape[0]
    lower = np.tril_indices(tile, -1)
    for s in range(0, n, tile):
        e = min(s + tile, n)
        G[e:, s:e] = G[s:e, e:].T
        T = G[s:e, s:e]
        il = lower if e - s == tile else np.tril_indices(e - s, -1)
        T[il] = T.T[il]


def _gemm_strips(X: np.ndarray, Y: np.ndarray, same: bool, out: np.ndarray | None, post=None) -> np.ndarray:
    """``X @ Y.T`` by row strips, applying ``post(G_part, rows, cols)`` to each in place.

    With ``same`` (Y is X) only the upper triangle (plus diagonal) is
    computed -- half the work -- and then mirrored, which also makes the block
    exactly symmetric.
    """
    nx, ny = X.shape[0], Y.shape[0]
    G = np.empty((nx, ny), dtype=X.dtype) if out is None else out
    rows = max(16, _STRIP_BYTES // max(1, ny * X.dtype.itemsize))
    for s in range(0, nx, rows):
        e = min(s + rows, nx)
        c0 = s if same else 0
        part = G[s:e, c0:]
        np.matmul(X[s:e], Y[c0:].T, out=part)
        if post is not None:
            post(part, slice(s, e), slice(c0, ny))
    if same:
        _mirror_upper(G)
    return G


def _dot(X: np.ndarray, Y: np.ndarray, same: bool, out: np.ndarray | None = None, post=None) -> np.ndarray:
    return _gemm_strips(X, Y, same, out, post)


def _sq_dist_exponent(X: np.ndarray, Y: np.ndarray, same: bool, gamma: float, out=None, then=None) -> np.ndarray:
    """``then(-gamma * |x - y|^2)`` computed strip by strip around the GEMM.

    The whole exponent ``2g x.y - g|x|^2 - g|y|^2`` comes out of one GEMM of
    the augmented operands ``[2g x, -g|x|^2, -1]`` and ``[y, 1, g|y|^2]``
    (d + 2 columns): three elementwise passes over the block fewer, measured
    ~25 % off a 4096^2 float32 rbf block at d = 50.
    """
    dt = X.dtype
    xx = np.einsum("ij,ij->i", X, X, dtype=np.float64) * gamma
    yy = xx if same else np.einsum("ij,ij->i", Y, Y, dtype=np.float64) * gamma
    A = np.empty((X.shape[0], X.shape[1] + 2), dtype=dt)
    A[:, :-2] = X
    A[:, :-2] *= dt.type(2.0 * gamma)
    A[:, -2] = -xx
    A[:, -1] = -1.0
    B = np.empty((Y.shape[0], Y.shape[1] + 2), dtype=dt)
    B[:, :-2] = Y
    B[:, -2] = 1.0
    B[:, -1] = yy

    def post(G, rows, cols):
        np.minimum(G, 0.0, out=G)
        if same:
            # exact zeros on the diagonal: k(x, x) = 1 without rounding
            # (the strip's diagonal starts at its first column)
            d = np.arange(G.shape[0])
            G[d, d] = 0.0
        if then is not None:
            then(G, out=G)

    return _gemm_strips(A, B, same, out, post)


@dataclass(frozen=True)
class RBF(Kernel):
    """Gaussian kernel ``exp(-gamma * |x - y|^2)``."""

    gamma: float | None = None
    name: ClassVar[str] = "rbf"
    stationary: ClassVar[bool] = True

    def validate(self) -> None:
        _check_positive("gamma", self.gamma, self.name, allow_none=True)

    def resolve(self, n_features: int) -> Kernel:
        return self if self.gamma is not None else replace(self, gamma=1.0 / n_features)

    def _block(self, X, Y, same, out):
        return _sq_dist_exponent(X, Y, same, self.gamma, out, then=np.exp)

    def _diag(self, X):
        return np.ones(X.shape[0], dtype=X.dtype)


@dataclass(frozen=True)
class Laplacian(Kernel):
    """Laplacian kernel ``exp(-gamma * |x - y|_1)``."""

    gamma: float | None = None
    name: ClassVar[str] = "laplacian"
    stationary: ClassVar[bool] = True

    def validate(self) -> None:
        _check_positive("gamma", self.gamma, self.name, allow_none=True)

    def resolve(self, n_features: int) -> Kernel:
        return self if self.gamma is not None else replace(self, gamma=1.0 / n_features)

    def _block(self, X, Y, same, out):
        from scipy.spatial.distance import cdist, pdist, squareform

        # The L1 distance has no GEMM form; scipy's cdist/pdist are the fast
        # path (pdist: half the pairs, and exactly symmetric).
        D = squareform(pdist(X, metric="cityblock")) if same else cdist(X, Y, metric="cityblock")
        if out is None:
            G = D.astype(X.dtype, copy=False)
        else:
            G = out
            np.copyto(G, D, casting="same_kind")
        G *= -self.gamma
        return np.exp(G, out=G)

    def _diag(self, X):
        return np.ones(X.shape[0], dtype=X.dtype)


@dataclass(frozen=True)
class Polynomial(Kernel):
    """Polynomial kernel ``(gamma * <x, y> + coef0) ** degree``."""

    gamma: float | None = None
    degree: int = 3
    coef0: float = 1.0
    name: ClassVar[str] = "poly"

    def validate(self) -> None:
        _check_positive("gamma", self.gamma, self.name, allow_none=True)
        if not isinstance(self.degree, numbers.Integral) or isinstance(self.degree, bool) or self.degree < 1:
            raise ValueError(f"poly kernel: degree={self.degree!r} is invalid; it must be an integer >= 1.")
        _check_real("coef0", self.coef0, self.name)

    @property
    def positive_definite(self) -> bool:
        return self.coef0 >= 0

    def resolve(self, n_features: int) -> Kernel:
        return self if self.gamma is not None else replace(self, gamma=1.0 / n_features)

    def _block(self, X, Y, same, out):
        g, c, deg = X.dtype.type(self.gamma), X.dtype.type(self.coef0), self.degree

        def post(G, rows, cols):
            G *= g
            G += c
            if deg != 1:
                np.power(G, deg, out=G)

        return _dot(X, Y, same, out, post)

    def _diag(self, X):
        return (self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0) ** self.degree


@dataclass(frozen=True)
class Linear(Kernel):
    """Linear kernel ``<x, y>``."""

    name: ClassVar[str] = "linear"

    def _block(self, X, Y, same, out):
        return _dot(X, Y, same, out)

    def _diag(self, X):
        return np.einsum("ij,ij->i", X, X)


@dataclass(frozen=True)
class Sigmoid(Kernel):
    """Sigmoid kernel ``tanh(gamma * <x, y> + coef0)`` (not positive definite)."""

    gamma: float | None = None
    coef0: float = 1.0
    name: ClassVar[str] = "sigmoid"

    def validate(self) -> None:
        _check_positive("gamma", self.gamma, self.name, allow_none=True)
        _check_real("coef0", self.coef0, self.name)

    @property
    def positive_definite(self) -> bool:
        return False

    def resolve(self, n_features: int) -> Kernel:
        return self if self.gamma is not None else replace(self, gamma=1.0 / n_features)

    def _block(self, X, Y, same, out):
        g, c = X.dtype.type(self.gamma), X.dtype.type(self.coef0)

        def post(G, rows, cols):
            G *= g
            G += c
            np.tanh(G, out=G)

        return _dot(X, Y, same, out, post)

    def _diag(self, X):
        return np.tanh(self.gamma * np.einsum("ij,ij->i", X, X) + self.coef0)


def _safe_inv_norms(X: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))
    # scikit-learn's normalize() leaves zero rows at zero.
    norms[norms == 0] = 1.0
    return 1.0 / norms


@dataclass(frozen=True)
class Cosine(Kernel):
    """Cosine similarity ``<x, y> / (|x| |y|)`` (zero rows give zero)."""

    name: ClassVar[str] = "cosine"

    def _block(self, X, Y, same, out):
        ix = _safe_inv_norms(X)
        iy = ix if same else _safe_inv_norms(Y)

        def post(G, rows, cols):
            G *= ix[rows, None]
            G *= iy[None, cols]

        return _dot(X, Y, same, out, post)

    def _diag(self, X):
        return (np.einsum("ij,ij->i", X, X) > 0).astype(X.dtype)


# -- combinations ------------------------------------------------------------


@dataclass(frozen=True)
class Sum(Kernel):
    """``k(x, y) = sum_i k_i(x, y)``."""

    kernels: tuple[Kernel, ...] = field(default_factory=tuple)
    name: ClassVar[str] = "sum"

    def validate(self) -> None:
        if len(self.kernels) < 2:
            raise ValueError("sum kernel: needs at least two kernels.")
        for k in self.kernels:
            k.validate()

    @property
    def positive_definite(self) -> bool:
        return all(k.positive_definite for k in self.kernels)

    def resolve(self, n_features: int) -> Kernel:
        return replace(self, kernels=tuple(k.resolve(n_features) for k in self.kernels))

    def block(self, X, Y=None, dtype=np.float64, out=None):
        out = self.kernels[0].block(X, Y, dtype, out)
        for k in self.kernels[1:]:
            out += k.block(X, Y, dtype)
        return out

    def _diag(self, X):
        return sum(k._diag(X) for k in self.kernels)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kernels": [k.to_dict() for k in self.kernels]}


@dataclass(frozen=True)
class Product(Kernel):
    """``k(x, y) = prod_i k_i(x, y)`` (Schur product of PSD kernels is PSD)."""

    kernels: tuple[Kernel, ...] = field(default_factory=tuple)
    name: ClassVar[str] = "product"

    validate = Sum.validate
    positive_definite = Sum.positive_definite
    resolve = Sum.resolve
    to_dict = Sum.to_dict

    def block(self, X, Y=None, dtype=np.float64, out=None):
        out = self.kernels[0].block(X, Y, dtype, out)
        for k in self.kernels[1:]:
            out *= k.block(X, Y, dtype)
        return out

    def _diag(self, X):
        out = self.kernels[0]._diag(X)
        for k in self.kernels[1:]:
            out = out * k._diag(X)
        return out


@dataclass(frozen=True)
class Scaled(Kernel):
    """``k(x, y) = scale * k_0(x, y)`` with ``scale > 0``."""

    scale: float = 1.0
    kernel: Kernel | None = None
    name: ClassVar[str] = "scaled"

    def validate(self) -> None:
        _check_positive("scale", self.scale, self.name)
        if not isinstance(self.kernel, Kernel):
            raise ValueError("scaled kernel: 'kernel' must be a dkpca kernel.")
        self.kernel.validate()

    @property
    def positive_definite(self) -> bool:
        return self.kernel.positive_definite

    def resolve(self, n_features: int) -> Kernel:
        return replace(self, kernel=self.kernel.resolve(n_features))

    def block(self, X, Y=None, dtype=np.float64, out=None):
        out = self.kernel.block(X, Y, dtype, out)
        out *= self.scale
        return out

    def _diag(self, X):
        return self.scale * self.kernel._diag(X)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scale": self.scale, "kernel": self.kernel.to_dict()}


_BASIC: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "laplacian": Laplacian,
    "poly": Polynomial,
    "polynomial": Polynomial,
    "linear": Linear,
    "sigmoid": Sigmoid,
    "cosine": Cosine,
}
KERNEL_NAMES = ("rbf", "laplacian", "poly", "polynomial", "linear", "sigmoid", "cosine")


def from_dict(spec: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from :meth:`Kernel.to_dict` output (e.g. from JSON)."""
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"not a kernel spec: {spec!r}; expected a dict with a 'name' key.")
    spec = dict(spec)
    name = spec.pop("name")
    if name in ("sum", "product"):
        cls = Sum if name == "sum" else Product
        return cls(tuple(from_dict(k) for k in spec["kernels"]))
    if name == "scaled":
        return Scaled(float(spec["scale"]), from_dict(spec["kernel"]))
    if name not in _BASIC:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(KERNEL_NAMES)}.")
    return _BASIC[name](**spec)


def make_kernel(
    kernel: str | Kernel | dict = "rbf",
    gamma: float | None = None,
    degree: int = 3,
    coef0: float = 1.0,
    kernel_params: dict | None = None,
) -> Kernel:
    """Build and validate a kernel from scikit-learn style arguments.

    Parameters
    ----------
    kernel : str, Kernel or dict
        ``"rbf"``, ``"laplacian"``, ``"poly"``, ``"linear"``, ``"sigmoid"``,
        ``"cosine"``, a :class:`Kernel` (e.g. ``RBF(0.5) + Linear()``) or a spec
        dict from :meth:`Kernel.to_dict`.
    gamma, degree, coef0 : as in :class:`sklearn.decomposition.KernelPCA`
        Ignored by kernels that do not take them.
    kernel_params : dict, optional
        Extra keyword arguments for the kernel (never mutated).

    Raises
    ------
    ValueError
        Unknown kernel name or a parameter out of its allowed range.
    """
    if isinstance(kernel, Kernel):
        k = kernel
    elif isinstance(kernel, dict):
        k = from_dict(kernel)
    elif isinstance(kernel, str):
        if kernel not in _BASIC:
            raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNEL_NAMES)}.")
        cls = _BASIC[kernel]
        given = {"gamma": gamma, "degree": degree, "coef0": coef0}
        names = _field_names(cls)
        params = {f: given[f] for f in names if f in given}
        params.update(kernel_params or {})
        unknown = set(params) - set(names)
        if unknown:
            raise ValueError(
                f"{kernel} kernel: unknown parameter(s) {sorted(unknown)}; "
                f"it takes {sorted(names) or 'no parameters'}."
            )
        k = cls(**params)
    else:
        raise ValueError(f"kernel={kernel!r} is invalid; pass a kernel name, a dkpca Kernel or a spec dict.")
    k.validate()
    return k
