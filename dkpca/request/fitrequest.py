"""A fit's request: :func:`make_request` makes a :class:`FitRequest` of a source and its :class:`FitOptions`.

The validated parameters, the resolved kernel, the row-chunked input (not read
yet) and the store, for the pipeline and the planner; the default store path
and the temporary store of in-memory input.
"""

from __future__ import annotations

import errno
import os
import warnings
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.array import PerformanceWarning

from ..config import check_settings
from ..io import as_dask, input_path, open_input, split_member
from ..kernels import Kernel, make_kernel
from ..linalg import default_block_size
from ..solvers import spec_of
from ..solvers.fraction import working_k
from ..storage import FitStore, is_url, relation, without_local_scheme
from .checks import check_n_components
from .options import FitOptions
from .tempstore import TemporaryStore

__all__ = ["FitOptions", "FitRequest", "make_request", "default_store_path", "TemporaryStore", "MANY_TILES",
           "StoreBesideInputError", "beside_input"]

#: Gram tiles above which a chunk_size below the default warns (dask's PerformanceWarning): each tile is a task
#: and a file, ~3.3 ms apiece over a fit -- n = 2,000 at chunk_size=20 (5,050 tiles) took 18.6 s against 1.9 s at
#: the default (2-core AMD EPYC, 2026-11-28); chunk_size=1 at n = 10,000 would be 50 million
MANY_TILES = 5000
#: seconds a tile costs a fit beyond its arithmetic, as measured for MANY_TILES
TILE_SECONDS = 3.3e-3


#: what a system error says of a directory that may not be written: read-only, or no permission
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class StoreBesideInputError(OSError):
    """The store a fit makes beside its input when no ``store=`` is given cannot be written there (the input on
    a read-only or another user's filesystem, as shared data sets are on a cluster): the message names ``store=``."""


def beside_input(exc: BaseException, options: FitOptions, req: FitRequest) -> StoreBesideInputError | None:
    """``exc`` as that refusal where it is one (not writable: the default store, or the directory it goes in,
    as the plan's scratch names it); None for anything else (the input's own file unreadable among them)."""
    store = req.store.path if req.store is not None else None
    if (options.store is not None or store is None or req.temporary is not None or is_url(store)
            or not isinstance(exc, OSError) or exc.errno not in _NOT_WRITABLE or exc.filename is None):
        return None
    where = os.fspath(exc.filename)
    if where != os.path.dirname(store) and relation(where, store) not in ("same", "inside"):
        return None
    error = StoreBesideInputError(f"{exc.strerror}: with no store given, dkpca writes it beside the input "
                                  f"({store!r}); pass store='a/writable/path.dkpca.zarr' (CLI: --store PATH)")
    error.errno = exc.errno
    return error


def default_store_path(source: Any) -> str | None:
    """The store beside a path input; None for in-memory input (a fit makes a :class:`TemporaryStore`).

    ``data.zarr`` -> ``data.dkpca.zarr``; other files keep their name:
    ``x.npy`` -> ``x.npy.dkpca.zarr``, ``f.h5:/g/X`` -> ``f.h5.g.X.dkpca.zarr``.

    Raises
    ------
    ValueError
        A URL input: dkpca writes nothing beside it unasked.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None
    path, member = split_member(os.fspath(source))
    path = without_local_scheme(path)  # file:///x.npy: the local file /x.npy, beside which the store goes
    if is_url(path):
        raise ValueError(f"input {os.fspath(source)!r} is a URL; pass store=... (a path or URL to write the model to).")
    base = path.rstrip("/")
    if base.endswith(".zarr"):
        base = base[: -len(".zarr")]
    if member:
        base += "." + member.strip("/").replace("/", ".")
    return base + ".dkpca.zarr"


@dataclass
class FitRequest:
    """The validated parameters of one fit or plan.

    Attributes
    ----------
    X : dask array of shape (n, d)
        The input, row-chunked to the tile edge (not read yet).
    kernel : Kernel
        Resolved (``gamma=None`` fixed to 1/d).
    n_components : int
        The k asked for; for a fraction, the first round's k (see ``fraction``).
    fraction : float or None
        ``n_components`` given as a fraction of explained variance in (0, 1):
        the solve grows k until it is reached (:mod:`dkpca.solvers.fraction`).
    solver, gram : str
        As asked (``auto`` is resolved by :mod:`dkpca.planning`).
    dtype : numpy.dtype or "auto"
        Gram precision as asked; ``"auto"`` is resolved by
        :func:`dkpca.planning.choose` (``Choice.precision``), and the pipeline
        goes on with the request's resolved copy.
    tile : int
        The Gram tile edge (``chunk_size``: square tiles of K, the row chunks of X).
    tol : float
        The relative residual the solver stops at (``tol=0`` resolved to :data:`~.options.ARITHMETIC_TOL`).
    max_passes : int
        The pass budget (:data:`DEFAULT_MAX_PASSES` where not given).
    max_passes_given : bool
        ``max_passes`` was given: ``auto`` then picks no solver that cannot keep it (ARPACK).
    random_state : int, RandomState, Generator or None
        As given (checked); :func:`as_generator` makes the generator.
    store : FitStore or None
        None when planning for in-memory input without ``store=`` (``fit``
        would make a temporary directory; a plan creates nothing).
    overwrite : bool
    progress : bool or callable
        False, True, or a ``callback(label, done, total)``.
    temporary : TemporaryStore or None
        The owner of ``store`` when it is a temporary directory dkpca made.
    """

    X: da.Array
    kernel: Kernel
    n_components: int
    solver: str
    gram: str
    dtype: np.dtype | str
    tile: int
    tol: float
    max_passes: int
    random_state: Any
    store: FitStore | None
    overwrite: bool = False
    progress: Any = False
    temporary: TemporaryStore | None = None
    fraction: float | None = None
    max_passes_given: bool = False

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def make_request(source: Any, options: FitOptions | None = None, *, create_store: bool = True) -> FitRequest:
    """The request of :func:`dkpca.fit` / :func:`dkpca.plan` for ``source``: ``options`` (checked when made,
    default ``FitOptions()``) with what needs the data checked too; reads nothing but X's shape.

    ``create_store=False`` (planning) leaves ``store`` None for in-memory
    input without ``store=`` instead of making a temporary directory.
    """
    o = FitOptions() if options is None else options
    check_settings()  # dkpca's Dask settings, each refused by name before any work
    solver, gram, store = o.solver, o.gram, o.store
    kern = make_kernel(o.kernel, gamma=o.gamma, degree=o.degree, coef0=o.coef0, kernel_params=o.kernel_params)
    X = as_dask(open_input(source), block_rows=None)
    n, d = X.shape
    k = check_n_components(o.n_components, n)
    fraction = k if isinstance(k, float) else None
    if fraction is not None:
        spec = spec_of(solver)  # None: auto, which the planner resolves to a solver that reaches fractions
        if spec is not None and not spec.fraction and spec.exact:
            raise ValueError(f"n_components={fraction} (a fraction of explained variance) is not reached by "
                             f"solver={solver!r}, which needs the number of components up front; use 'auto', 'dense' "
                             "or 'lanczos'.")
        if spec is not None and not spec.fraction:
            raise ValueError(f"n_components={fraction} (a fraction of explained variance) needs the exact spectrum "
                             f"of K~; solver={solver!r} approximates it. Pass an integer n_components, or another "
                             "solver.")
        # the first round's k; the pipeline grows it (all n for the dense solver)
        k = working_k(n, solver)
    tile = min(o.chunk_size or default_block_size(n), n)
    if (tiles := (nb := -(-n // tile)) * (nb + 1) // 2) > MANY_TILES and tile < default_block_size(n):
        warnings.warn(f"chunk_size={tile} cuts K into {tiles:,} tiles, each a task and a file "
                      f"(~{TILE_SECONDS * 1e3:.0f} ms apiece: ~{tiles * TILE_SECONDS:,.0f} s before any arithmetic); "
                      "leave chunk_size unset "
                      f"(here {default_block_size(n)}) or raise it.", PerformanceWarning, stacklevel=3)
    X = X.rechunk((tile, d))
    temporary = None
    path = input_path(source)
    if store is not None:
        fit_store = FitStore.at(store)
        if path is not None and relation(fit_store.path, path) in ("same", "inside"):
            raise ValueError(f"store {os.fspath(store)!r} is or lies inside the input {os.fspath(source)!r}; "
                             "dkpca writes nothing into its input. Choose another store.")
    elif path is not None:
        fit_store = FitStore.at(default_store_path(source))
    elif create_store:
        temporary = TemporaryStore()
        fit_store = temporary.store
    else:
        fit_store = None
    return FitRequest(X=X, kernel=kern.resolve(d), n_components=k, solver=solver, gram=gram, dtype=o.dtype,
                      tile=tile, tol=o.residual_tol, max_passes=o.passes, random_state=o.random_state,
                      store=fit_store, overwrite=o.overwrite, progress=o.progress, temporary=temporary,
                      fraction=fraction, max_passes_given=o.max_passes is not None)
