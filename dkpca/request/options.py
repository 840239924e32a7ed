"""The parameters ``dkpca.fit`` and ``dkpca.plan`` share with the CLI: :class:`FitOptions`, written once.

Each parameter is one field of :class:`FitOptions`: its name, default, check
(``__post_init__``, with the messages of :mod:`.checks`) and, for the options
the command line has, its flags and help (field metadata), from which
:data:`dkpca.cli.parser.FIT_OPTIONS` is generated.  Light on purpose: the
command line reads this module to build ``dkpca fit --help`` and
``dkpca plan --help``, which must answer without loading Dask or Zarr (numpy,
the kernel and solver registries only).  ``tests/test_cli_options.py`` and
``tests/test_fit_options.py`` check that ``dkpca.fit``'s and ``dkpca.plan``'s
signatures and the CLI agree with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from ..grammode import GramMode
from ..kernels import KERNEL_NAMES, Kernel
from ..solvers import DEFAULT_MAX_PASSES, SOLVERS, spec_of
from .checks import check_bool, check_choice, check_dtype, check_int, check_random_state, check_real

__all__ = ["FitOptions", "DEFAULTS", "DEFAULT_MAX_PASSES", "DTYPES", "GRAM_MODES", "ARITHMETIC_TOL"]

#: the relative residual ``tol=0`` means: "as accurate as the arithmetic allows", scikit-learn's meaning for
#: ARPACK.  A residual r bounds eigenvalue errors by ~r^2/gap, so 1e-10 gives eigenvalues to working precision;
#: ``tol=0`` itself would never be met and run the whole pass budget (60 passes where 5 do).
ARITHMETIC_TOL = 1e-10

#: ``gram=``: where K lives, the :class:`~dkpca.grammode.GramMode` values (``auto``: resolved by :mod:`dkpca.planning`)
GRAM_MODES = ("auto", *(mode.value for mode in GramMode))

#: ``dtype=``: K's precision (``auto``: resolved from a sample by :mod:`dkpca.planning.precision`)
DTYPES = ("auto", "float32", "float64")


def option(default: Any, help: str = "", *, flags: tuple[str, ...] = (), type: Callable[[str], Any] | None = None,
           choices: tuple[Any, ...] | None = None, metavar: str | None = None) -> Any:
    """A :class:`FitOptions` field; with ``flags``, also an option of ``dkpca fit`` and ``dkpca plan``.

    ``type`` is the command line's parser of the text (``None``: a string);
    ``n_components``' own (an int or a fraction) is :func:`dkpca.cli.parser.n_components_arg`.
    """
    return field(default=default, metadata=MappingProxyType(
        {"help": help, "flags": flags, "type": type, "choices": choices, "metavar": metavar}))


@dataclass(frozen=True)
class FitOptions:
    """The parameters of one fit or plan, checked: every value is valid once the object exists.

    Passed whole (``dkpca.fit`` -> :func:`dkpca.request.make_request` -> the
    pipeline and the planner); overridden with :func:`dataclasses.replace`,
    which checks the new values again.  What needs the data (``n_components``
    against n, the kernel against d, the store against the input's path) is
    checked by :func:`~dkpca.request.make_request`.  See :func:`dkpca.fit`
    for each parameter's meaning.
    """

    n_components: int | float = option(
        2, "number of components, or a fraction of explained variance in (0, 1), e.g. 0.95",
        flags=("--n-components", "-k"), metavar="K")
    kernel: str | Kernel | dict = option("rbf", "kernel function (poly = polynomial)", flags=("--kernel",),
                                         choices=KERNEL_NAMES)
    gamma: float | None = option(None, "kernel width (default: 1/n_features)", flags=("--gamma",), type=float)
    degree: int = option(3, "degree of the poly kernel", flags=("--degree",), type=int)
    coef0: float = option(1.0, "offset of the poly and sigmoid kernels", flags=("--coef0",), type=float)
    kernel_params: dict | None = option(None)
    solver: str = option(
        "auto", "eigensolver; auto: dense for small n, else block Lanczos (randomized when its basis would not fit "
                "in memory); nystrom (approximate) only on request", flags=("--solver",), choices=SOLVERS)
    store: str | os.PathLike | None = option(None, "store path (default: INPUT.dkpca.zarr beside the input)",
                                             flags=("--store",))
    chunk_size: int | None = option(
        None, "Gram block edge (default: about 4096, balanced; 'dkpca plan --cluster' recommends one for the "
              "cluster, whose scheduler then takes under 5 %% of a pass)", flags=("--chunk-size",), type=int)
    dtype: Any = option(
        "auto", "precision of K; auto: float32 unless a sample of the data says it would lose the eigenvalues",
        flags=("--dtype",), choices=DTYPES)
    tol: float = option(1e-6, "stop when every residual is below tol x the largest eigenvalue (0: as accurate as "
                              "the arithmetic allows, 1e-10); below 1e-6, dtype=auto holds K in float64 where float32 "
                              "would put more error than tol into the eigenvalues", flags=("--tol",), type=float)
    max_passes: int | None = option(None, f"most passes over K (default: {DEFAULT_MAX_PASSES})",
                                    flags=("--max-passes",), type=int)
    random_state: Any = option(None)
    overwrite: bool = option(False)
    gram: str = option(
        "auto", "store K in Zarr, recompute its blocks every pass, hold it in memory, or auto: store unless K does "
                "not fit on disk or recomputing is measured faster", flags=("--gram",), choices=GRAM_MODES)
    progress: bool | Callable[[str, int, int], None] = option(False)

    def __post_init__(self) -> None:
        # The order of the checks is the order of their messages when several values are bad.
        solver = check_choice("solver", self.solver, SOLVERS)
        gram = check_choice("gram", self.gram, GRAM_MODES)
        spec = spec_of(solver)  # what the solver can do (None: auto, the planner's choice)
        if spec is not None and spec.in_memory_only and gram in (GramMode.STORE, GramMode.RECOMPUTE):
            raise ValueError(f"solver={solver!r} needs K in memory (each ARPACK step is a product with one vector: "
                             f"out of core a whole pass over K), not gram={gram!r}; use gram='memory' or 'auto', "
                             "or solver='lanczos'.")
        if spec is not None and not spec.forms_kernel and gram in (GramMode.STORE, GramMode.MEMORY):
            raise ValueError(f"gram={gram!r} does not apply to solver={solver!r}, which never forms K; "
                             "use gram='auto' or 'recompute'.")
        checked = {
            "dtype": check_dtype("dtype", self.dtype, allow_auto=True),
            "tol": check_real("tol", self.tol, 0.0, 1.0, what="a number in [0, 1), e.g. 1e-6"),
            "max_passes": check_int("max_passes", self.max_passes, 1, allow_none=True),
            "chunk_size": check_int("chunk_size", self.chunk_size, 1, allow_none=True),
            "random_state": check_random_state(self.random_state),
            "overwrite": check_bool("overwrite", self.overwrite),
            # True/False, or a callback(label, done, total) (dkpca.execution)
            "progress": self.progress if callable(self.progress) else check_bool("progress", self.progress),
        }
        if self.store is not None and not isinstance(self.store, (str, os.PathLike)):
            raise ValueError(f"store={self.store!r} is invalid; pass a path or URL (or None for the default).")
        for name, value in checked.items():  # frozen: the checked (normalised) values replace those given
            object.__setattr__(self, name, value)
        if spec is not None and not spec.pass_budget and self.max_passes is not None:
            raise ValueError(f"max_passes={self.max_passes!r} does not bound solver={solver!r}, whose limit counts "
                             "restarts of many one-vector products, not passes; leave max_passes unset, or use "
                             "solver='lanczos' (a pass budget it keeps).")

    @property
    def residual_tol(self) -> float:
        """``tol``, 0 resolved to :data:`ARITHMETIC_TOL`: what the solver's residuals are held to."""
        return self.tol if self.tol > 0 else ARITHMETIC_TOL

    @property
    def passes(self) -> int:
        """``max_passes``, ``None`` resolved to :data:`DEFAULT_MAX_PASSES`."""
        return DEFAULT_MAX_PASSES if self.max_passes is None else self.max_passes


#: the defaults of ``dkpca.fit``'s and ``dkpca.plan``'s parameters, from :class:`FitOptions`' fields
#: (``max_passes=None``: :data:`DEFAULT_MAX_PASSES`)
DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {f.name: f.default for f in fields(FitOptions) if f.default is not MISSING})
