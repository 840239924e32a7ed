"""Saving and loading a fitted sparse kernel PCA: Zarr arrays and JSON attributes, never pickle.

Layout, inside a dkpca store (:class:`dkpca.storage.FitStore`)::

    <store>/sparse_model/    arrays: representing_indices, representing_points, weights,
                                     log_likelihood (+ X_fit, row_means when centred)
                             attrs:  params, kernel, n_features_in, n_iter, converged,
                                     fit_report, (grand_mean), (feature_names_in),
                                     dkpca_version, arrays + digest (the record every
                                     read checks: dkpca.storage.modelrecord), complete

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
from ..storage import EDITED, DamagedModelError, FitStore, edited
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
    """``(params, fitted)`` as :func:`save_model` was given them, every field checked.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Not a dkpca store, or it holds no complete sparse model; or a field is
        missing, of the wrong type or shape, or not finite
        (:class:`~dkpca.storage.DamagedModelError`, naming the field).
    """
    store = FitStore.at(path)
    if store.is_new():  # the store's own line would say "fit a model first (dkpca fit ...)", which makes none
        raise FileNotFoundError(f"store {store.path!r} does not exist (or is empty); fit a SparseKernelPCA and call "
                                f".save({store.path!r}) first.")
    arrays, a = store.read_sparse_model()

    def bad(field: str, why: str) -> DamagedModelError:
        return DamagedModelError(store.path, f"sparse model field {field!r}", why, kind="sparse_model")

    def kernel(field: str, spec: Any) -> Kernel:
        try:
            return from_dict(spec)
        except ValueError as exc:
            raise bad(field, f"is not a valid kernel spec ({exc})") from None

    params = a.get("params")
    if not isinstance(params, dict):
        raise bad("params", f"is {params!r}, not a JSON object of parameters")
    params = dict(params)
    if isinstance(params.get("kernel"), dict) and KERNEL_KEY in params["kernel"]:
        params["kernel"] = kernel("params", params["kernel"][KERNEL_KEY])
    k, sigma2, center = params.get("n_components"), params.get("noise_variance", 0.1), params.get("center", False)
    if k is not None and not _integer(k, 1):
        raise bad("params", f"has n_components {k!r}, not a positive integer or null")
    if not _number(sigma2) or sigma2 <= 0:
        raise bad("params", f"has noise_variance {sigma2!r}, not a positive number")
    if not isinstance(center, bool):
        raise bad("params", f"has center {center!r}, not true or false")
    fitted: dict[str, Any] = {"kernel_": kernel("kernel", a.get("kernel"))}
    if edited(a, "kernel"):  # another valid kernel: nothing else tells it from the fit's
        raise bad("kernel", f"{a['kernel']} {EDITED}")
    for attr, name in ATTRS.items():
        v = a.get(name)
        ok = {"n_features_in": _integer(v, 1), "n_iter": _integer(v, 0), "converged": isinstance(v, bool),
              "fit_report": v is None or isinstance(v, dict), "grand_mean": (v is None and not center) or _number(v)}
        if not ok[name]:
            raise bad(name, f"is {v!r}, not {_EXPECT[name]}")
        if v is not None:
            fitted[attr] = v
    d = fitted["n_features_in_"]
    names = a.get("feature_names_in")
    if names is not None:
        if not isinstance(names, list) or len(names) != d or not all(isinstance(f, str) for f in names):
            raise bad("feature_names_in", f"is {names!r}, not a list of {d} names")
        fitted["feature_names_in_"] = np.asarray(names, dtype=object)
    m = arrays["weights"].shape[0] if "weights" in arrays else 0
    shapes = {"representing_indices": (m,), "representing_points": (m, d), "weights": (m,),
              "log_likelihood": (None,), "X_fit": (None, d), "row_means": (m,)}
    for attr, name in ARRAYS.items():
        if name not in arrays:
            if name in ("X_fit", "row_means") and not center:
                continue
            raise bad(name, "is missing")
        v = arrays[name]
        kind = "iu" if name == "representing_indices" else "f"
        want = shapes[name]
        if v.dtype.kind not in kind or v.ndim != len(want) or any(
                w not in (None, e) for w, e in zip(want, v.shape, strict=True)):
            raise bad(name, f"is a {v.dtype} array of shape {v.shape}, not {'integers' if kind == 'iu' else 'floats'}"
                            f" of shape {tuple('*' if w is None else w for w in want)}")
        if kind == "f" and not np.isfinite(v).all():
            raise bad(name, "holds values that are not finite")
        fitted[attr] = v
    return params, fitted


_EXPECT = {"n_features_in": "a positive integer", "n_iter": "a non-negative integer", "converged": "true or false",
           "fit_report": "a JSON object", "grand_mean": "a finite number"}


def _integer(v: Any, least: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))
