"""The kernel base class and the kernel algebra (sums, products, positive scalings).

Every kernel is a small immutable object that

* evaluates a block ``K(X, Y)`` (``block``) with one GEMM and in-place
  elementwise work, in float32 or float64,
* evaluates its diagonal ``k(x, x)`` without forming a block (``diag``),
* fixes data-dependent defaults once the number of features is known (``resolve``),
* round-trips through a JSON-serialisable dict (``to_dict`` / ``from_dict``),
  which is what the Gram store and the persisted model record,
* states its cost per entry for planning (``cost_per_entry``).

Sums, products and positive scalings of kernels are kernels (Keriven,
"Operations on kernels"), written ``k1 + k2``, ``k1 * k2`` and ``2.0 * k``.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

__all__ = ["Kernel", "Sum", "Product", "Scaled", "NonFiniteKernelError", "check_positive", "check_real",
           "field_names", "as_float", "largest_value"]


class NonFiniteKernelError(ValueError):
    """A kernel block overflowed or produced NaN: the kernel's parameters do not suit the data."""

    #: what every refusal of a named kernel says to do
    FIX = "choose other kernel parameters (e.g. a smaller degree or gamma) or scale the data"

    @classmethod
    def of(cls, subject: str, kernel: Any, where: str = "", fix: str = FIX) -> NonFiniteKernelError:
        """The refusal, in one wording: ``subject`` (a block, the kernel matrix, the kernel) has non-finite
        values ``where`` (e.g. " on a 256-point sample of the data"); ``kernel``: its spec or words."""
        return cls(f"{subject} has non-finite values (overflow or NaN){where}: the kernel {kernel} is not usable on "
                   f"this data; {fix}.")


def largest_value(whose: str, *arrays: Any) -> str:
    """`` (<whose> largest |value|: m)`` of the rows a :class:`NonFiniteKernelError` names, or "" where none is a
    dense array: huge values point at the data (a damaged file reads as huge numbers), ordinary ones at the
    kernel's parameters."""
    big = [float(np.abs(a).max()) for a in arrays if isinstance(a, np.ndarray) and a.size]
    return f" ({whose} largest |value|: {max(big):.3g})" if big else ""


def check_positive(name: str, value: Any, kernel: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value) or value <= 0:
        raise ValueError(
            f"{kernel} kernel: {name}={value!r} is invalid; it must be a finite number > 0"
            + (" (or None for 1/n_features)" if allow_none else "")
            + "."
        )


def check_real(name: str, value: Any, kernel: str) -> None:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{kernel} kernel: {name}={value!r} is invalid; it must be a finite number.")


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def as_float(X: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=dtype)


#: rows of a block whose coordinate-wise median is the point a stationary kernel's operands are shifted by
CENTRE_ROWS = 128


def centre(Y: np.ndarray) -> np.ndarray:
    """The point a stationary kernel shifts a block's operands by: the coordinate-wise median of (at most
    :data:`CENTRE_ROWS` evenly spaced rows of) ``Y``, the block's second operand (``X`` itself in a symmetric block).

    Robust: the mean moved with one extreme row -- a new row of 1e6 among others of size 1 put them ~1e6 / n
    from the shift, and |x|^2 + |y|^2 - 2 x.y then cancelled to 0.37 off in float32 projections (0.64 in
    float64 at 1e12), and rbf blocks of new rows near 1e155 came back NaN -- where the median stays among the
    bulk.  Taken from the training side of a projection (``block(new, training)``), so a new row's projection
    does not depend on the rows it came with.  A sample: the median of a 4096 x 784 block took 100 ms against
    its GEMM's 500 ms; of 128 rows, ~3 ms.
    """
    step = max(1, -(-Y.shape[0] // CENTRE_ROWS))
    with warnings.catch_warnings():  # a column all NaN: its centre is 0 below (the NaN rows are named later)
        warnings.simplefilter("ignore", RuntimeWarning)
        point = np.nanmedian(Y[::step], axis=0)
    # a NaN or infinity in a row spoils that row's entries alone, never the shift of every other row's
    return np.nan_to_num(point, nan=0.0, posinf=0.0, neginf=0.0).astype(Y.dtype)


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
        Xf, Yf = self._operands(X, Y, dtype)
        # With Y = X every subclass returns an exactly symmetric block: the
        # store keeps only the upper half of K, so k(x_i, x_j) and k(x_j, x_i)
        # must not differ by rounding.
        return self._block(Xf, Yf, Y is None or Y is X, out)

    def _operands(self, X: np.ndarray, Y: np.ndarray | None, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """X and Y as the block's evaluation takes them: contiguous, of ``dtype``, shifted if stationary."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype={dtype} is not supported; use float32 or float64.")
        Xf = as_float(X, dtype)
        Yf = Xf if Y is None or Y is X else as_float(Y, dtype)
        if self.stationary:
            # Shifting both blocks by a common point leaves x - y unchanged but
            # keeps |x|^2 + |y|^2 - 2 x.y from cancelling catastrophically.
            shift = centre(Yf)
            Xf = Xf - shift
            Yf = Xf if Y is None or Y is X else Yf - shift
        return Xf, Yf

    def exp_operands(self, X: np.ndarray, Y: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """``(A, B)`` with ``block(X, Y) = exp(min(A B^T, 0))`` under the compiled exp, or None.

        A capability, not a duty: a kernel that is one GEMM and the compiled
        exp (the compiled rbf) returns its operands, so that a pass can
        multiply its block strip by strip without forming it
        (:func:`dkpca.kernels.fastexp.exp_gemm_products`); every other kernel
        returns None and its blocks are formed.  ``Y`` may be ``X`` (a Gram
        build's diagonal block, whose upper triangle the caller mirrors).
        """
        return None

    def diag(self, X: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
        """Diagonal ``k(x_i, x_i)`` of shape (n_x,), without forming a block."""
        return self._diag(as_float(X, np.dtype(dtype)))

    def __call__(self, X: np.ndarray, Y: np.ndarray | None = None) -> np.ndarray:
        """Float64 block; makes a kernel usable as a scikit-learn callable."""
        return self.block(X, Y, np.float64)

    def _block(self, X: np.ndarray, Y: np.ndarray, same: bool, out: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError

    def _diag(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def cost_per_entry(self, n_features: int) -> float:
        """Approximate flops per kernel entry (planning): the GEMM's 2 d plus elementwise work."""
        return 2.0 * n_features + 10.0

    def compiled(self) -> Kernel:
        """The same kernel (same spec, same values within rounding) with its elementwise exp compiled.

        Kernels built on ``exp`` (rbf, laplacian) return a variant that uses
        :func:`dkpca.kernels.fastexp.exp_nonpositive` where numba is
        installed; the others return themselves.  Compiling costs about 3 s
        once per process, so planning asks for it only for large fits
        (:func:`dkpca.planning.use_compiled_exp`).
        """
        return self

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

    @property
    def nonnegative(self) -> bool:
        """Whether every entry ``k(x, y)`` is guaranteed ``>= 0``: K's largest row sum then bounds ``|| |K| ||``
        (what a float32 product's error scales with, :attr:`dkpca.operator.CenteredKernelOperator.single_error`)."""
        return False

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable spec; ``from_dict(k.to_dict()) == k``."""
        d: dict[str, Any] = {"name": self.name}
        for f in field_names(type(self)):
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

    @property
    def nonnegative(self) -> bool:
        return all(k.nonnegative for k in self.kernels)

    def resolve(self, n_features: int) -> Kernel:
        return replace(self, kernels=tuple(k.resolve(n_features) for k in self.kernels))

    def compiled(self) -> Kernel:
        return replace(self, kernels=tuple(k.compiled() for k in self.kernels))

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
    nonnegative = Sum.nonnegative
    resolve = Sum.resolve
    compiled = Sum.compiled
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
        check_positive("scale", self.scale, self.name)
        if not isinstance(self.kernel, Kernel):
            raise ValueError("scaled kernel: 'kernel' must be a dkpca kernel.")
        self.kernel.validate()

    @property
    def positive_definite(self) -> bool:
        return self.kernel.positive_definite

    @property
    def nonnegative(self) -> bool:
        return self.kernel.nonnegative  # scale > 0

    def resolve(self, n_features: int) -> Kernel:
        return replace(self, kernel=self.kernel.resolve(n_features))

    def compiled(self) -> Kernel:
        return replace(self, kernel=self.kernel.compiled())

    def block(self, X, Y=None, dtype=np.float64, out=None):
        out = self.kernel.block(X, Y, dtype, out)
        out *= self.scale
        return out

    def _diag(self, X):
        return self.scale * self.kernel._diag(X)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "scale": self.scale, "kernel": self.kernel.to_dict()}
