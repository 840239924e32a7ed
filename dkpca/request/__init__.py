"""One validated parameter front end: ``fit``, ``plan``, both estimators and the CLI.

Every user-facing parameter is checked here, once, with a message that names
the parameter and says what to pass -- before any data is read or anything is
written:

* :mod:`.options` -- :class:`FitOptions`: the parameters ``fit``, ``plan`` and
  the CLI share, each one's default, check and CLI help written once (light:
  the CLI's ``--help`` reads it);
* :mod:`.checks` -- the checks of single values, and the estimators' parameter
  sets (light too: :class:`FitOptions` checks with them);
* :mod:`.bandwidth` -- ``fs_bandwidth``'s check (Dask's size parser);
* :mod:`.sklearnerrors` -- a refused parameter as scikit-learn's ``InvalidParameterError``;
* :mod:`.tempstore` -- the temporary store of in-memory input without
  ``store=`` (and the sweep of those whose process was killed);
* :mod:`.fitrequest` -- :func:`make_request`: a source and its
  :class:`FitOptions` as a :class:`FitRequest` (validated parameters, the
  resolved kernel, the row-chunked input and the store) that the pipeline and
  the planner consume.

The members of :mod:`.checks`, :mod:`.bandwidth`, :mod:`.tempstore` and :mod:`.fitrequest` load
here on first access (module ``__getattr__``, PEP 562), so that ``dkpca --help``
reads :mod:`.options` (and :mod:`.checks`) without importing Dask or Zarr.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .options import ARITHMETIC_TOL, DEFAULT_MAX_PASSES, DEFAULTS, DTYPES, GRAM_MODES, FitOptions

if TYPE_CHECKING:  # what static analysers see; at run time ``__getattr__`` loads the same names
    from .bandwidth import check_bandwidth
    from .checks import (
        as_generator,
        check_bool,
        check_choice,
        check_dtype,
        check_int,
        check_kernel_pca_params,
        check_n_components,
        check_n_components_spec,
        check_out_of_core_params,
        check_random_state,
        check_real,
        is_bool,
    )
    from .fitrequest import FitRequest, StoreBesideInputError, beside_input, default_store_path, make_request
    from .sklearnerrors import refused_as_sklearn
    from .tempstore import TemporaryStore

#: submodule -> the names it provides here
_LAZY = {
    ".bandwidth": ("check_bandwidth",),
    ".checks": ("as_generator", "check_bool", "check_choice", "check_dtype", "check_int",
                "check_kernel_pca_params", "check_n_components", "check_n_components_spec",
                "check_out_of_core_params", "check_random_state", "check_real", "is_bool"),
    ".fitrequest": ("FitRequest", "default_store_path", "make_request", "StoreBesideInputError", "beside_input"),
    ".tempstore": ("TemporaryStore",),
    ".sklearnerrors": ("refused_as_sklearn",),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["FitOptions", "DEFAULTS", "DEFAULT_MAX_PASSES", "ARITHMETIC_TOL", "DTYPES", "GRAM_MODES", "as_generator",
           "check_bandwidth", "check_bool", "check_choice", "check_dtype", "check_int", "check_kernel_pca_params",
           "check_n_components", "check_n_components_spec", "check_out_of_core_params", "check_random_state",
           "check_real", "is_bool", "FitRequest", "TemporaryStore", "default_store_path", "make_request",
           "StoreBesideInputError", "beside_input", "refused_as_sklearn"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)


def __dir__() -> list[str]:
    return sorted(__all__)
