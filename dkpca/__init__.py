"""dkpca: distributed, out-of-core kernel PCA on Dask and Zarr.

Public API::

    model = dkpca.fit("data.zarr", n_components=10, kernel="rbf")
    model = dkpca.load("data.dkpca.zarr")
    Z = model.transform(X_new)

The layers, bottom to top, are described in ``docs/architecture.md``.
"""

from . import cluster, kernels
from .estimator import KernelPCA
from .model import KPCAModel, load
from .pipeline import fit
from .planning import plan
from .sparse import SparseKernelPCA, fit_sparse
from .version import __version__

__all__ = ["fit", "load", "plan", "cluster", "KPCAModel", "KernelPCA", "SparseKernelPCA", "fit_sparse", "kernels",
           "__version__"]
