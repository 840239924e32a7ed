"""A fit's request: :func:`make_request` validates every parameter of ``fit`` / ``plan`` into a :class:`FitRequest`.

The validated parameters, the resolved kernel, the row-chunked input (not read
yet) and the store, for the pipeline and the planner; the default store path
and the temporary store of in-memory input.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from ..grammode import GramMode
from ..io import as_dask, input_path, open_input, split_member
from ..kernels import Kernel, make_kernel
from ..linalg import default_block_size
from ..solvers import SOLVERS, Solver
from ..solvers.fraction import working_k
from ..storage import FitStore, is_url, relation
from .checks import (
    check_bool,
    check_choice,
    check_dtype,
    check_int,
    check_n_components,
    check_random_state,
    check_real,
)
from .options import DEFAULT_MAX_PASSES, DEFAULTS, GRAM_MODES

__all__ = ["FitRequest", "make_request", "default_store_path", "TemporaryStore"]


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
    if is_url(path):
        raise ValueError(f"input {os.fspath(source)!r} is a URL; pass store=... (a path or URL to write the model to).")
    base = path.rstrip("/")
    if base.endswith(".zarr"):
        base = base[: -len(".zarr")]
    if member:
        base += "." + member.strip("/").replace("/", ".")
    return base + ".dkpca.zarr"


class TemporaryStore:
    """A store in a new temporary directory, for in-memory input fitted without ``store=``.

    The directory lives exactly as long as this object: it is removed by
    :meth:`remove`, when the object is garbage-collected, or at interpreter
    exit (``weakref.finalize`` does the last two), whichever comes first.
    The model fitted into it holds it, and so do the lazy results of that
    model's ``transform``, so the store outlives neither nor is removed under them.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="dkpca-")
        self.store = FitStore.at(os.path.join(self.directory, "store.dkpca.zarr"))
        self._remove = weakref.finalize(self, shutil.rmtree, self.directory, ignore_errors=True)

    def remove(self) -> None:
        """Remove the directory now (at most once)."""
        self._remove()

    @property
    def removed(self) -> bool:
        return not self._remove.alive

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # In a dask graph sent to distributed workers it travels as its path:
        # a worker's copy must never own (and so remove) the directory; the
        # client's object keeps it alive.  Models refuse to be pickled with one.
        return str, (self.directory,)

    def __dask_tokenize__(self) -> str:
        return self.directory


@dataclass
class FitRequest:
    """The validated parameters of one fit or plan.

    Attributes
    ----------
    X : dask array of shape (n, d)
        The input, row-chunked to the block edge (not read yet).
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
    block : int
        Gram block edge.
    tol : float
    max_passes : int
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
    block: int
    tol: float
    max_passes: int
    random_state: Any
    store: FitStore | None
    overwrite: bool = False
    progress: Any = False
    temporary: TemporaryStore | None = None
    fraction: float | None = None

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def make_request(source: Any, n_components: Any = DEFAULTS["n_components"],
                 kernel: str | Kernel | dict = DEFAULTS["kernel"], gamma: float | None = DEFAULTS["gamma"],
                 degree: int = DEFAULTS["degree"], coef0: float = DEFAULTS["coef0"],
                 kernel_params: dict | None = DEFAULTS["kernel_params"], solver: str = DEFAULTS["solver"],
                 store: str | os.PathLike | None = DEFAULTS["store"], chunk_size: int | None = DEFAULTS["chunk_size"],
                 dtype: Any = DEFAULTS["dtype"], tol: float = DEFAULTS["tol"],
                 max_passes: int | None = DEFAULTS["max_passes"], random_state: Any = DEFAULTS["random_state"],
                 overwrite: bool = DEFAULTS["overwrite"], gram: str = DEFAULTS["gram"],
                 progress: Any = DEFAULTS["progress"], create_store: bool = True) -> FitRequest:
    """Validate every parameter of :func:`dkpca.fit` / :func:`dkpca.plan`; read nothing but X's shape.

    ``create_store=False`` (planning) leaves ``store`` None for in-memory
    input without ``store=`` instead of making a temporary directory.
    """
    solver = check_choice("solver", solver, SOLVERS)
    gram = check_choice("gram", gram, GRAM_MODES)
    if solver == Solver.ARPACK and gram in (GramMode.STORE, GramMode.RECOMPUTE):
        raise ValueError(f"solver='arpack' needs K in memory (each ARPACK step is a product with one vector: out of "
                         f"core a whole pass over K), not gram={gram!r}; use gram='memory' or 'auto', or "
                         "solver='lanczos'.")
    if solver == Solver.NYSTROM and gram in (GramMode.STORE, GramMode.MEMORY):
        raise ValueError(f"gram={gram!r} does not apply to solver='nystrom', which never forms K; "
                         "use gram='auto' or 'recompute'.")
    dt = check_dtype("dtype", dtype, allow_auto=True)
    tol_f = check_real("tol", tol, 0.0, 1.0, what="a number in [0, 1), e.g. 1e-6")
    passes = check_int("max_passes", max_passes, 1, allow_none=True)
    chunk = check_int("chunk_size", chunk_size, 1, allow_none=True)
    seed = check_random_state(random_state)
    overwrite = check_bool("overwrite", overwrite)
    if not callable(progress):  # True/False, or a callback(label, done, total) (dkpca.execution)
        progress = check_bool("progress", progress)
    if store is not None and not isinstance(store, (str, os.PathLike)):
        raise ValueError(f"store={store!r} is invalid; pass a path or URL (or None for the default).")
    kern = make_kernel(kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params)
    X = as_dask(open_input(source), block_rows=None)
    n, d = X.shape
    k = check_n_components(n_components, n)
    fraction = k if isinstance(k, float) else None
    if fraction is not None:
        if solver == Solver.ARPACK:
            raise ValueError(f"n_components={fraction} (a fraction of explained variance) is not reached by "
                             "solver='arpack', which needs the number of components up front; use 'auto', 'dense' "
                             "or 'lanczos'.")
        if solver == Solver.NYSTROM:
            raise ValueError(f"n_components={fraction} (a fraction of explained variance) needs the exact spectrum "
                             "of K~; solver='nystrom' approximates it. Pass an integer n_components, or another "
                             "solver.")
        # the first round's k; the pipeline grows it (all n for the dense solver)
        k = working_k(n, solver)
    block = min(chunk or default_block_size(n), n)
    X = X.rechunk((block, d))
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
    return FitRequest(X=X, kernel=kern.resolve(d), n_components=k, solver=solver, gram=gram, dtype=dt,
                      block=block, tol=tol_f, max_passes=passes or DEFAULT_MAX_PASSES, random_state=seed,
                      store=fit_store, overwrite=overwrite, progress=progress, temporary=temporary, fraction=fraction)
