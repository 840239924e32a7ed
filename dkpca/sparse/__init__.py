"""Sparse kernel PCA (Tipping 2000) by blocked EM over the training rows.

The feature vectors are modelled as ``phi ~ N(0, C)``, ``C = sigma^2 I +
Phi^T W Phi`` with ``sigma^2`` fixed and the weights ``w_i`` fitted by
maximum likelihood; most go to zero, and the principal axes of C are spanned
by the few "representing" feature vectors left.

Modules, one job each:

* :mod:`.em` -- the weight updates on one candidate set (pure numpy):
  posterior, likelihood, eqs. 13/14, pruning, the stopping rule;
* :mod:`.driver` -- which candidates are fitted together: ``G = K_{:,A}^T
  K_{:,A}`` over all n rows on Dask, candidate sets, pooling, add-back;
* :mod:`.blocks` -- kernel blocks in float64, the centring formula, tree sums;
* :mod:`.estimator` -- the scikit-learn :class:`SparseKernelPCA`, :func:`fit_sparse`;
* :mod:`.persist` -- save / load as Zarr arrays and JSON attributes (no pickle);
* :mod:`.tuning` -- :func:`choose_noise_variance`.
"""

from .estimator import SparseKernelPCA, fit_sparse, load_sparse
from .tuning import choose_noise_variance

__all__ = ["SparseKernelPCA", "fit_sparse", "choose_noise_variance", "load_sparse"]
