"""Kernels: one :class:`Kernel` base, the library of named kernels, the registry.

``dkpca.kernels.RBF(0.1) + 0.5 * dkpca.kernels.Linear()`` builds a composite
kernel; :func:`make_kernel` builds one from scikit-learn style arguments and
:func:`from_dict` from a stored spec.
"""

from .adapters import CallableKernel, SparseInputKernel
from .base import Kernel, NonFiniteKernelError, Product, Scaled, Sum
from .library import RBF, Cosine, Laplacian, Linear, Polynomial, Sigmoid
from .registry import KERNEL_NAMES, from_dict, make_kernel

__all__ = ["Kernel", "RBF", "Laplacian", "Polynomial", "Linear", "Sigmoid", "Cosine", "Sum", "Product", "Scaled",
           "make_kernel", "from_dict", "KERNEL_NAMES", "NonFiniteKernelError", "CallableKernel", "SparseInputKernel"]
