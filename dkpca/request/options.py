"""The parameters ``dkpca.fit`` and ``dkpca.plan`` share with the CLI: their defaults and choices, written once.

Only the standard library and the Gram-mode and solver registries: the command line reads
this module to build ``dkpca fit --help`` and ``dkpca plan --help``, which
must answer without loading Dask or Zarr.  :func:`dkpca.request.make_request`
takes its defaults from :data:`DEFAULTS`; ``tests/test_cli_options.py`` checks
that ``dkpca.fit``'s and ``dkpca.plan``'s signatures and the CLI agree with it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from ..grammode import GramMode
from ..solvers.fraction import DEFAULT_MAX_PASSES

__all__ = ["DEFAULTS", "DEFAULT_MAX_PASSES", "DTYPES", "GRAM_MODES"]

#: ``gram=``: where K lives, the :class:`~dkpca.grammode.GramMode` values (``auto``: resolved by :mod:`dkpca.planning`)
GRAM_MODES = ("auto", *(mode.value for mode in GramMode))

#: ``dtype=``: K's precision (``auto``: resolved from a sample by :mod:`dkpca.planning.precision`)
DTYPES = ("auto", "float32", "float64")

#: the defaults of ``dkpca.fit``'s and ``dkpca.plan``'s parameters (``max_passes=None``: :data:`DEFAULT_MAX_PASSES`)
DEFAULTS: MappingProxyType[str, Any] = MappingProxyType({
    "n_components": 2,
    "kernel": "rbf",
    "gamma": None,
    "degree": 3,
    "coef0": 1.0,
    "kernel_params": None,
    "solver": "auto",
    "store": None,
    "chunk_size": None,
    "dtype": "auto",
    "gram": "auto",
    "tol": 1e-6,
    "max_passes": None,
    "random_state": None,
    "overwrite": False,
    "progress": False,
})
