"""Kernels: one :class:`Kernel` base, the library of named kernels, the registry.

``dkpca.kernels.RBF(0.1) + 0.5 * dkpca.kernels.Linear()`` builds a composite
kernel; :func:`make_kernel` builds one from scikit-learn style arguments and
:func:`from_dict` from a stored spec.

The adapters of scikit-learn's callable and sparse kernel inputs import
scikit-learn, so they load on first access (module ``__getattr__``): the
command line reads :data:`KERNEL_NAMES` without importing scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Kernel, NonFiniteKernelError, Product, Scaled, Sum, largest_value
from .library import RBF, Cosine, Laplacian, Linear, Polynomial, Sigmoid
from .registry import KERNEL_NAMES, from_dict, make_kernel

if TYPE_CHECKING:
    from .adapters import CallableKernel, SparseInputKernel

__all__ = ["Kernel", "RBF", "Laplacian", "Polynomial", "Linear", "Sigmoid", "Cosine", "Sum", "Product", "Scaled",
           "make_kernel", "from_dict", "KERNEL_NAMES", "NonFiniteKernelError", "CallableKernel", "SparseInputKernel",
           "largest_value"]


def __getattr__(name: str) -> Any:
    if name in ("CallableKernel", "SparseInputKernel"):
        return getattr(importlib.import_module(".adapters", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
