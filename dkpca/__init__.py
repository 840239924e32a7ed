"""dkpca: distributed, out-of-core kernel PCA on Dask and Zarr.

Public API::

    model = dkpca.fit("data.zarr", n_components=10, kernel="rbf")
    model = dkpca.load("data.dkpca.zarr")
    Z = model.transform(X_new)
"""

__version__ = "0.1.0"

from . import cluster, kernels  # noqa: E402
from .estimator import KernelPCA  # noqa: E402
from .model import KPCAModel, load  # noqa: E402
from .pipeline import fit  # noqa: E402
from .plan import plan  # noqa: E402  (the function shadows the module name; use sys.modules for the module)
from .sparse import SparseKernelPCA, fit_sparse  # noqa: E402, F401

__all__ = ["fit", "load", "plan", "cluster", "KPCAModel", "KernelPCA", "kernels", "__version__"]
