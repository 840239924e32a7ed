"""dkpca: distributed, out-of-core kernel PCA on Dask and Zarr.

Public API::

    model = dkpca.fit("data.zarr", n_components=10, kernel="rbf")
    model = dkpca.load("data.dkpca.zarr")
    Z = model.transform(X_new)

The layers, bottom to top, are described in ``docs/architecture.md``.

The public names are loaded on first access (module ``__getattr__``, PEP 562):
``import dkpca`` and ``dkpca --help`` then cost milliseconds, and scikit-learn,
Dask and Zarr are imported only by the code that uses them.
"""

from __future__ import annotations

import importlib
import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:  # what static analysers and IDEs see; at run time ``__getattr__`` loads the same names
    from . import cluster, kernels
    from .batches import RepeatedBatchWarning
    from .estimator import KernelPCA
    from .io.csvfile import HeaderGuessWarning, RowIndexWarning
    from .io.formats import AbsentChunksWarning
    from .model import KPCAModel, load
    from .pipeline import fit
    from .planning import plan
    from .planning.precision import KernelScaleWarning
    from .sparse import SparseKernelPCA, fit_sparse

__all__ = ["fit", "load", "plan", "cluster", "KPCAModel", "KernelPCA", "SparseKernelPCA", "fit_sparse", "kernels",
           "KernelScaleWarning", "RowIndexWarning", "HeaderGuessWarning", "AbsentChunksWarning", "RepeatedBatchWarning",
           "__version__"]

# A library's logger (the ``dkpca`` logger and its children, e.g. the fit's plan line and stages at INFO): its
# records go nowhere until the application configures logging -- ``logging.basicConfig(level=logging.INFO)`` --
# and the ``dkpca`` command shows them on stderr.
logging.getLogger(__name__).addHandler(logging.NullHandler())

#: public name -> the module defining it (``None``: the name is a subpackage)
_HOME = MappingProxyType({
    "fit": ".pipeline", "load": ".model", "plan": ".planning", "KPCAModel": ".model", "KernelPCA": ".estimator",
    "SparseKernelPCA": ".sparse", "fit_sparse": ".sparse", "cluster": None, "kernels": None,
    # warnings of silent pitfalls: K numerically the identity or constant (gamma far from the data's scale), and
    # a CSV's unnamed row index column or a first line of few numbers (read as a header or as data: a guess), a
    # Zarr array's chunks not stored (read as its fill value), a batch partial_fit did not add again
    "KernelScaleWarning": ".planning.precision", "RowIndexWarning": ".io.csvfile", "HeaderGuessWarning": ".io.csvfile",
    "AbsentChunksWarning": ".io.formats",
    "RepeatedBatchWarning": ".batches",
})


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'dkpca' has no attribute {name!r}")
    home = _HOME[name]
    if home is None:
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(home, __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
