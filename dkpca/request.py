"""One validated parameter front end: ``fit``, ``plan``, both estimators and the CLI.

Every user-facing parameter is checked here, once, with a message that names
the parameter and says what to pass -- before any data is read or anything is
written.  :func:`make_request` turns the arguments of :func:`dkpca.fit` /
:func:`dkpca.plan` into a :class:`FitRequest` (validated parameters, the
resolved kernel, the row-chunked input and the store) that the pipeline and
the planner consume; the estimators use the individual checks.
"""

from __future__ import annotations

import numbers
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from .io import as_dask, input_path, open_input, split_member
from .kernels import KERNEL_NAMES, Kernel, make_kernel
from .linalg import default_block_size
from .solvers import SOLVERS
from .solvers.fraction import working_k
from .storage import FitStore, is_url, relation

__all__ = ["FitRequest", "make_request", "default_store_path", "GRAM_MODES", "check_n_components",
           "check_n_components_spec", "check_int", "check_real", "check_bool", "check_dtype", "check_bandwidth",
           "check_random_state", "as_generator", "check_choice",
           "check_kernel_pca_params", "check_out_of_core_params", "TemporaryStore"]

GRAM_MODES = ("auto", "store", "recompute", "memory")


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def check_int(name: str, value: Any, minimum: int = 1, allow_none: bool = False) -> int | None:
    """An integer >= ``minimum`` (booleans are not integers here)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or _is_bool(value) or value < minimum:
        none = "None or " if allow_none else ""
        raise ValueError(f"{name}={value!r} is invalid; it must be {none}an integer >= {minimum}.")
    return int(value)


def check_real(name: str, value: Any, low: float | None = None, high: float | None = None,
               allow_none: bool = False, what: str | None = None) -> float | None:
    """A finite real in [low, high) (bounds optional)."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not _is_bool(value) and np.isfinite(value)
    ok = ok and (low is None or value >= low) and (high is None or value < high)
    if not ok:
        if what is None:
            rng = (f" in [{low}, {high})" if low is not None and high is not None
                   else f" >= {low}" if low is not None else f" < {high}" if high is not None else "")
            what = f"a finite number{rng}"
        raise ValueError(f"{name}={value!r} is invalid; it must be {'None or ' if allow_none else ''}{what}.")
    return float(value)


def check_bandwidth(name: str, value: Any) -> float | None:
    """Bytes per second > 0: a number, or a size per second as Dask writes sizes (``"100GB/s"``, ``"2 GiB/s"``)."""
    if value is None:
        return None
    number = None
    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            number = float(parse_bytes(text[:-2] if text.lower().endswith("/s") else text))
        except (ValueError, TypeError):
            number = None
    elif isinstance(value, numbers.Real) and not _is_bool(value):
        number = float(value)
    if number is None or not np.isfinite(number) or number <= 0:
        raise ValueError(f"{name}={value!r} is invalid; it must be None or a bandwidth in bytes per second > 0: a "
                         "number, or a size per second such as '100GB/s' or '2GiB/s'.")
    return number


def check_bool(name: str, value: Any) -> bool:
    if not _is_bool(value):
        raise ValueError(f"{name}={value!r} is invalid; it must be True or False.")
    return bool(value)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r} is invalid; choose one of {', '.join(choices)}.")
    return value


def check_dtype(name: str, value: Any, allow_none: bool = False, allow_auto: bool = False) -> np.dtype | str | None:
    """float32 or float64 (a numpy dtype); ``"auto"`` itself where allowed (planning resolves it)."""
    if value is None and allow_none:
        return None
    if allow_auto and isinstance(value, str) and value == "auto":
        return value
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt not in (np.dtype("float32"), np.dtype("float64")):
        choices = ("None, " if allow_none else "") + ("'auto', " if allow_auto else "")
        raise ValueError(f"{name}={value!r} is invalid; use {choices}'float32' or 'float64'.")
    return dt


def check_random_state(value: Any) -> Any:
    """scikit-learn's accepted seeds: None, an int in [0, 2**32), a RandomState or a numpy Generator.

    Returns the value unchanged (nothing is drawn from a generator here).
    """
    if value is None or isinstance(value, (np.random.Generator, np.random.RandomState)):
        return value
    if isinstance(value, numbers.Integral) and not _is_bool(value):
        if not 0 <= value < 2**32:
            raise ValueError(f"random_state={value!r} is invalid; an integer seed must be in [0, 2**32).")
        return int(value)
    raise ValueError(f"random_state={value!r} is invalid; pass None, an int, a numpy RandomState or a numpy "
                     "Generator.")


def as_generator(random_state: Any) -> np.random.Generator:
    """A numpy Generator from a checked ``random_state`` (a RandomState gives one seed drawn from it)."""
    if isinstance(random_state, np.random.RandomState):
        random_state = int(random_state.randint(np.iinfo(np.int32).max))
    return np.random.default_rng(random_state)


def check_kernel_pca_params(p: dict[str, Any], eigen_solvers: tuple[str, ...]) -> None:
    """Check :class:`dkpca.KernelPCA`'s parameters (``get_params()``) before touching the data."""
    if p["n_components"] is not None:
        if isinstance(check_n_components_spec(p["n_components"]), float) and p["eigen_solver"] == "arpack":
            raise ValueError(f"n_components={p['n_components']} (a fraction of explained variance) is not supported "
                             "by eigen_solver='arpack', which needs the number of components up front; use 'auto' "
                             "or 'dense' (the whole spectrum), or 'randomized' or 'lanczos'.")
    k = p["kernel"]
    if isinstance(k, str):
        check_choice("kernel", k, (*KERNEL_NAMES, "precomputed"))
    elif not (isinstance(k, (Kernel, dict)) or callable(k)):
        raise ValueError(f"kernel={k!r} is invalid; it must be a kernel name, a dkpca Kernel, a spec dict or a "
                         "callable.")
    check_real("gamma", p["gamma"], low=0.0, allow_none=True)
    check_real("degree", p["degree"], low=0.0)
    check_real("coef0", p["coef0"])
    if p["kernel_params"] is not None and not isinstance(p["kernel_params"], dict):
        raise ValueError(f"kernel_params={p['kernel_params']!r} is invalid; it must be None or a dict.")
    check_real("alpha", p["alpha"], low=0.0)
    for name in ("fit_inverse_transform", "remove_zero_eig", "copy_X"):
        check_bool(name, p[name])
    check_choice("eigen_solver", p["eigen_solver"], eigen_solvers)
    check_real("tol", p["tol"], low=0.0, what="a number >= 0 (0: solver default)")
    check_int("max_iter", p["max_iter"], 1, allow_none=True)
    if p["iterated_power"] != "auto":
        check_int("iterated_power", p["iterated_power"], 0)
    check_random_state(p["random_state"])
    n_jobs = p["n_jobs"]
    if n_jobs is not None and (not isinstance(n_jobs, numbers.Integral) or _is_bool(n_jobs)):
        raise ValueError(f"n_jobs={n_jobs!r} is invalid; it must be None or an integer.")
    if p["store"] is not None and not isinstance(p["store"], (str, os.PathLike)):
        raise ValueError(f"store={p['store']!r} is invalid; it must be None or a path / URL.")
    check_int("chunk_size", p["chunk_size"], 1, allow_none=True)
    check_dtype("dtype", p["dtype"], allow_none=True, allow_auto=True)
    check_int("n_landmarks", p["n_landmarks"], 1, allow_none=True)


def check_out_of_core_params(p: dict[str, Any]) -> None:
    """What :class:`dkpca.KernelPCA` refuses for data it fits out of core (a dask array or a Zarr store)."""
    if p["n_components"] is None:
        raise ValueError(
            "n_components=None asks for all n components, which is only supported for in-memory data; set "
            "n_components (e.g. 10) to fit a dask array or Zarr store out of core."
        )
    k = p["kernel"]
    if (isinstance(k, str) and k == "precomputed") or (callable(k) and not isinstance(k, Kernel)):
        raise ValueError(
            f"kernel={k!r} is in-memory only (it needs the whole kernel matrix at once); pass a numpy array, or "
            "use a named kernel or a dkpca Kernel to fit out of core."
        )
    if p["eigen_solver"] == "arpack":
        raise ValueError(
            "eigen_solver='arpack' is in-memory only: out of core each ARPACK step would be a full pass over K. "
            "Use eigen_solver='randomized' or 'lanczos' (or 'auto')."
        )


def check_n_components_spec(n_components: Any) -> int | float:
    """``n_components`` before the data is seen: an integer >= 1, or a fraction of explained variance in (0, 1).

    A float asks for a fraction -- the smallest number of components whose
    explained-variance ratio reaches it, as scikit-learn's ``PCA(0.95)`` --
    so ``1.0`` and ``5.0`` are refused rather than read as counts.
    """
    counts = "an integer >= 1 (a number of components) or a float strictly between 0 and 1 (a fraction of " \
             "explained variance, e.g. 0.95)"
    if _is_bool(n_components) or not isinstance(n_components, numbers.Real):
        raise ValueError(f"n_components={n_components!r} is invalid; it must be {counts}.")
    if isinstance(n_components, numbers.Integral):
        if n_components < 1:
            raise ValueError(f"n_components={n_components!r} is invalid; it must be {counts}.")
        return int(n_components)
    f = float(n_components)
    if 0.0 < f < 1.0:
        return f
    if np.isfinite(f) and f >= 1.0:
        hint = f"pass the integer {int(f)}" if f.is_integer() else "pass an integer"
        raise ValueError(f"n_components={n_components!r} is invalid: a float is a fraction of explained variance "
                         f"and must lie strictly between 0 and 1; for a number of components {hint}.")
    raise ValueError(f"n_components={n_components!r} is invalid; it must be {counts}.")


def check_n_components(n_components: Any, n_samples: int) -> int | float:
    """Validate ``n_components``: an int k (1 <= k <= n_samples), returned as int, or a fraction in (0, 1)."""
    value = check_n_components_spec(n_components)
    if isinstance(value, int) and value > n_samples:
        raise ValueError(
            f"n_components={n_components} is out of range; it must be between 1 and n_samples={n_samples} (or a "
            "fraction of explained variance in (0, 1))."
        )
    return value


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


def make_request(source: Any, n_components: Any = 2, kernel: str | Kernel | dict = "rbf",
                 gamma: float | None = None, degree: int = 3, coef0: float = 1.0,
                 kernel_params: dict | None = None, solver: str = "auto",
                 store: str | os.PathLike | None = None, chunk_size: int | None = None, dtype: Any = "auto",
                 tol: float = 1e-6, max_passes: int | None = None, random_state: Any = None,
                 overwrite: bool = False, gram: str = "auto", progress: Any = False,
                 create_store: bool = True) -> FitRequest:
    """Validate every parameter of :func:`dkpca.fit` / :func:`dkpca.plan`; read nothing but X's shape.

    ``create_store=False`` (planning) leaves ``store`` None for in-memory
    input without ``store=`` instead of making a temporary directory.
    """
    solver = check_choice("solver", solver, SOLVERS)
    gram = check_choice("gram", gram, GRAM_MODES)
    if solver == "arpack" and gram in ("store", "recompute"):
        raise ValueError(f"solver='arpack' needs K in memory (each ARPACK step is a product with one vector: out of "
                         f"core a whole pass over K), not gram={gram!r}; use gram='memory' or 'auto', or "
                         "solver='lanczos'.")
    if solver == "nystrom" and gram in ("store", "memory"):
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
        if solver == "arpack":
            raise ValueError(f"n_components={fraction} (a fraction of explained variance) is not reached by "
                             "solver='arpack', which needs the number of components up front; use 'auto', 'dense' "
                             "or 'lanczos'.")
        if solver == "nystrom":
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
                      block=block, tol=tol_f, max_passes=passes or 60, random_state=seed, store=fit_store,
                      overwrite=overwrite, progress=progress, temporary=temporary, fraction=fraction)
