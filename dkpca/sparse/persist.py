"""Saving and loading a fitted sparse kernel PCA: Zarr arrays and JSON attributes, never pickle.

Layout, inside a dkpca store (:class:`dkpca.storage.FitStore`)::

    <store>/sparse_model/    arrays: representing_indices, representing_points, weights,
                                     log_likelihood (+ X_fit, row_means when centred)
                             attrs:  params, kernel, n_features_in, n_iter, converged,
                                     fit_report, (grand_mean), (feature_names_in),
                                     dkpca_version, complete

The estimator hands over its parameters and fitted attributes as plain dicts
(:meth:`dkpca.sparse.SparseKernelPCA.save` / ``load``); this module alone knows
which become arrays and which JSON, and how kernels and parameters are spelt
in JSON.
"""

from __future__ import annotations

import numbers
import os
from types import MappingProxyType
from typing import Any

import numpy as np

from ..kernels import Kernel, from_dict
from ..storage import FitStore
from ..version import __version__

__all__ = ["ARRAYS", "ATTRS", "save_model", "load_model"]

#: fitted attribute -> array name in the store
ARRAYS = MappingProxyType({
    "representing_indices_": "representing_indices",
    "representing_points_": "representing_points",
    "weights_": "weights",
    "log_likelihood_": "log_likelihood",
    "X_fit_": "X_fit",
    "row_means_": "row_means",
})
#: fitted attribute -> JSON attribute name (kernel_ and feature_names_in_ are converted on the way)
ATTRS = MappingProxyType({
    "n_features_in_": "n_features_in",
    "n_iter_": "n_iter",
    "converged_": "converged",
    "fit_report_": "fit_report",
    "grand_mean_": "grand_mean",
})
#: how a Kernel object among the parameters is marked in JSON (a kernel *name* stays a string)
KERNEL_KEY = "__dkpca_kernel__"


def save_model(path: str | os.PathLike, params: dict[str, Any], fitted: dict[str, Any]) -> str:
    """Write ``params`` (``get_params()``) and ``fitted`` attributes to ``<path>/sparse_model``.

    An existing ``sparse_model`` group in that dkpca store is replaced; a path
    that exists and is not a dkpca store is refused (``ValueError``).
    """
    path = os.fspath(path)
    params = dict(params)
    kp = params.get("kernel")
    if isinstance(kp, Kernel):
        params["kernel"] = {KERNEL_KEY: kp.to_dict()}
    rs = params.get("random_state")
    if rs is not None and not isinstance(rs, numbers.Integral):
        params["random_state"] = None  # a RandomState instance has no JSON form; fitting is done
    arrays = {name: (np.ascontiguousarray(fitted[attr]), None) for attr, name in ARRAYS.items() if attr in fitted}
    attrs: dict[str, Any] = {name: fitted[attr] for attr, name in ATTRS.items() if attr in fitted}
    attrs.update(params=params, kernel=fitted["kernel_"].to_dict(), dkpca_version=__version__)
    if "feature_names_in_" in fitted:
        attrs["feature_names_in"] = [str(f) for f in fitted["feature_names_in_"]]
    FitStore.at(path).write_sparse_model(arrays, attrs)
    return path


def load_model(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(params, fitted)`` as :func:`save_model` was given them.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Not a dkpca store, or it holds no complete sparse model.
    """
    arrays, a = FitStore.at(path).read_sparse_model()
    params = dict(a["params"])
    if isinstance(params.get("kernel"), dict) and KERNEL_KEY in params["kernel"]:
        params["kernel"] = from_dict(params["kernel"][KERNEL_KEY])
    fitted: dict[str, Any] = {attr: arrays[name] for attr, name in ARRAYS.items() if name in arrays}
    fitted["kernel_"] = from_dict(a["kernel"])
    fitted["n_features_in_"] = int(a["n_features_in"])
    fitted["n_iter_"] = int(a["n_iter"])
    fitted["converged_"] = bool(a["converged"])
    fitted["fit_report_"] = a.get("fit_report", {})
    if "grand_mean" in a:
        fitted["grand_mean_"] = float(a["grand_mean"])
    if "feature_names_in" in a:
        fitted["feature_names_in_"] = np.asarray(a["feature_names_in"], dtype=object)
    return params, fitted
