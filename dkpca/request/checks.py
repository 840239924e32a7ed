"""The checks of single parameter values, each with a message naming the parameter and what to pass.

Shared by :func:`dkpca.request.make_request` (``fit``, ``plan``, the CLI),
both estimators and the planner; none reads data.  The estimators' parameter
sets are checked here too (:func:`check_kernel_pca_params`,
:func:`check_out_of_core_params`).
"""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np

from ..kernels import KERNEL_NAMES, Kernel
from ..solvers import spec_of

__all__ = ["is_bool", "check_int", "check_real", "check_bool", "check_choice", "check_dtype",
           "check_random_state", "as_generator", "check_n_components_spec", "check_n_components",
           "check_kernel_pca_params", "check_out_of_core_params"]


def is_bool(v: Any) -> bool:
    """Python's and numpy's booleans (never integers or reals here, although Python counts them as such)."""
    return isinstance(v, (bool, np.bool_))


def check_int(name: str, value: Any, minimum: int = 1, allow_none: bool = False) -> int | None:
    """An integer >= ``minimum`` (booleans are not integers here)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or is_bool(value) or value < minimum:
        none = "None or " if allow_none else ""
        raise ValueError(f"{name}={value!r} is invalid; it must be {none}an integer >= {minimum}.")
    return int(value)


def check_real(name: str, value: Any, low: float | None = None, high: float | None = None,
               allow_none: bool = False, what: str | None = None) -> float | None:
    """A finite real in [low, high) (bounds optional)."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not is_bool(value) and np.isfinite(value)
    ok = ok and (low is None or value >= low) and (high is None or value < high)
    if not ok:
        if what is None:
            rng = (f" in [{low}, {high})" if low is not None and high is not None
                   else f" >= {low}" if low is not None else f" < {high}" if high is not None else "")
            what = f"a finite number{rng}"
        raise ValueError(f"{name}={value!r} is invalid; it must be {'None or ' if allow_none else ''}{what}.")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not is_bool(value):
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
    if isinstance(value, numbers.Integral) and not is_bool(value):
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


def check_n_components_spec(n_components: Any) -> int | float:
    """``n_components`` before the data is seen: an integer >= 1, or a fraction of explained variance in (0, 1).

    A float asks for a fraction -- the smallest number of components whose
    explained-variance ratio reaches it, as scikit-learn's ``PCA(0.95)`` --
    so ``1.0`` and ``5.0`` are refused rather than read as counts.
    """
    counts = "an integer >= 1 (a number of components) or a float strictly between 0 and 1 (a fraction of " \
             "explained variance, e.g. 0.95)"
    if is_bool(n_components) or not isinstance(n_components, numbers.Real):
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


def check_kernel_pca_params(p: dict[str, Any], eigen_solvers: tuple[str, ...]) -> None:
    """Check :class:`dkpca.KernelPCA`'s parameters (``get_params()``) before touching the data."""
    if p["n_components"] is not None:
        spec = spec_of(p["eigen_solver"]) if p["eigen_solver"] in eigen_solvers else None
        if isinstance(check_n_components_spec(p["n_components"]), float) and spec is not None and not spec.fraction:
            raise ValueError(f"n_components={p['n_components']} (a fraction of explained variance) is not supported "
                             f"by eigen_solver={p['eigen_solver']!r}, which needs the number of components up front; "
                             "use 'auto' or 'dense' (the whole spectrum), or 'randomized' or 'lanczos'.")
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
    for name in ("fit_inverse_transform", "remove_zero_eig", "copy_X", "overwrite"):
        check_bool(name, p[name])
    check_choice("eigen_solver", p["eigen_solver"], eigen_solvers)
    check_real("tol", p["tol"], low=0.0, what="a number >= 0 (0: solver default)")
    check_int("max_iter", p["max_iter"], 1, allow_none=True)
    if p["iterated_power"] != "auto":
        check_int("iterated_power", p["iterated_power"], 0)
    check_random_state(p["random_state"])
    n_jobs = p["n_jobs"]
    if n_jobs is not None and (not isinstance(n_jobs, numbers.Integral) or is_bool(n_jobs)):
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
    spec = spec_of(p["eigen_solver"])
    if spec is not None and spec.in_memory_only:
        raise ValueError(
            f"eigen_solver={p['eigen_solver']!r} is in-memory only: out of core each ARPACK step would be a full "
            "pass over K. "
            "Use eigen_solver='randomized' or 'lanczos' (or 'auto')."
        )
