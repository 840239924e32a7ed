"""dkpca: distributed, out-of-core kernel PCA on Dask and Zarr.

Public API::

    model = dkpca.fit("data.zarr", n_components=10, kernel="rbf")
    model = dkpca.load("data.dkpca.zarr")
    Z = model.transform(X_new)
"""

__version__ = "0.1.0"

from . import kernels  # noqa: E402
from .model import KPCAModel, load  # noqa: E402
from .pipeline import fit  # noqa: E402

__all__ = ["fit", "load", "KPCAModel", "kernels", "__version__"]
