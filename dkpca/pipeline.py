"""``dkpca.fit``: input -> validation -> Gram store -> operator -> solver -> model.

This module only wires the stages together; each stage lives in its own
module.  Everything that can be checked cheaply is checked before any data
is read, and everything that needs a look at the values (finiteness) before
anything is written.
"""

from __future__ import annotations

import logging
import numbers
import os
import tempfile
import time
import warnings
from typing import Any

import dask.array as da
import numpy as np
import zarr

from . import store as _store
from ._compute import compute, show_progress
from .checkpoint import SolverCheckpoint
from .gram import build_gram
from .io import Fingerprint, as_dask, check_n_components, default_block_size, open_input, scan
from .kernels import Kernel, make_kernel
from .model import KPCAModel
from .operator import MatrixFreeKernelOperator, StoredKernelOperator
from .solvers import SOLVERS, ConvergenceWarning, choose, finalize, get_solver, randomized

__all__ = ["fit", "default_store_path"]

GRAM_MODES = ("auto", "store", "recompute")

logger = logging.getLogger("dkpca")


def default_store_path(source: Any) -> str:
    """``data.zarr`` -> ``data.dkpca.zarr``; in-memory input -> a new temp dir."""
    if isinstance(source, (str, os.PathLike)) and not _store.is_url(os.fspath(source)):
        base = os.fspath(source).rstrip("/")
        if base.endswith(".zarr"):
            base = base[: -len(".zarr")]
        return base + ".dkpca.zarr"
    if isinstance(source, str):
        raise ValueError(f"input {source!r} is a URL; pass store=... (a path or URL to write the model to).")
    return os.path.join(tempfile.mkdtemp(prefix="dkpca-"), "store.dkpca.zarr")


def _check_params(solver, dtype, tol, max_passes, chunk_size, gram) -> np.dtype:
    if solver not in SOLVERS:
        raise ValueError(f"solver={solver!r} is unknown; choose one of {', '.join(SOLVERS)}.")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in (np.dtype("float32"), np.dtype("float64")):
        raise ValueError(f"dtype={dtype!r} is invalid; use 'float32' (default) or 'float64'.")
    if not isinstance(tol, numbers.Real) or not (0 <= tol < 1):
        raise ValueError(f"tol={tol!r} is invalid; it must be a number in [0, 1), e.g. 1e-6.")
    if max_passes is not None and (not isinstance(max_passes, numbers.Integral) or max_passes < 1):
        raise ValueError(f"max_passes={max_passes!r} is invalid; it must be a positive integer.")
    if chunk_size is not None and (not isinstance(chunk_size, numbers.Integral) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r} is invalid; it must be a positive integer (e.g. 4096).")
    if gram not in GRAM_MODES:
        raise ValueError(f"gram={gram!r} is invalid; choose 'auto', 'store' or 'recompute'.")
    if solver == "nystrom" and gram == "store":
        raise ValueError("gram='store' does not apply to solver='nystrom', which never reads K; "
                         "use gram='auto' or 'recompute'.")
    return dt


def _store_data(path: str, X: da.Array, fp: Fingerprint, overwrite: bool) -> da.Array:
    """Copy X into ``<store>/data/X`` once; return it as a dask array."""
    root = _store.create_or_open(path)
    if "data" in root:
        attrs = dict(root["data"].attrs)
        if attrs.get("fingerprint") == fp.to_dict() and attrs.get("complete") and not overwrite:
            return da.from_zarr(zarr.open_array(path, path="data/X", mode="r"))
        if attrs.get("fingerprint") != fp.to_dict() and not overwrite:
            old = attrs.get("fingerprint", {})
            raise ValueError(
                f"store {path!r} was fitted on different data (store: shape {old.get('shape')}, "
                f"checksum {old.get('checksum')}; now: shape {list(fp.shape)}, checksum {fp.checksum}). "
                "Pass overwrite=True (CLI: --overwrite) to replace it, or choose another store."
            )
        for member in ("data", "gram", "model"):
            _store.remove_member(root, member)
    g = root.create_group("data")
    g.attrs.update({"fingerprint": fp.to_dict(), "complete": False})
    arr = g.create_array("X", shape=X.shape, chunks=(X.chunks[0][0], X.shape[1]), dtype=X.dtype,
                         compressors=None)
    compute(da.store(X, arr, lock=False, compute=False), label="copying X into the store")
    g.attrs.update({"complete": True})
    return da.from_zarr(zarr.open_array(path, path="data/X", mode="r"))


def fit(
    source: Any,
    n_components: int = 2,
    kernel: str | Kernel | dict = "rbf",
    gamma: float | None = None,
    degree: int = 3,
    coef0: float = 1.0,
    kernel_params: dict | None = None,
    solver: str = "auto",
    store: str | os.PathLike | None = None,
    chunk_size: int | None = None,
    dtype: str = "float32",
    tol: float = 1e-6,
    max_passes: int | None = None,
    random_state: int | np.random.Generator | None = None,
    overwrite: bool = False,
    gram: str = "auto",
    progress: bool = False,
) -> KPCAModel:
    """Fit kernel PCA out of core and persist the model.

    Parameters
    ----------
    source : str, zarr.Array, numpy.ndarray, dask.array.Array or xarray.DataArray
        Training data of shape (n_samples, n_features): a Zarr path or fsspec
        URL, or an array.
    n_components : int, default=2
        Number of components k (1 <= k <= n_samples).
    kernel : str, Kernel or dict, default="rbf"
        ``rbf``, ``laplacian``, ``poly``, ``linear``, ``sigmoid``, ``cosine``, or a
        dkpca Kernel (sums, products, scalings of those).
    gamma, degree, coef0, kernel_params
        Kernel parameters with scikit-learn's names and defaults
        (``gamma=None`` -> 1/n_features).
    solver : {"auto", "dense", "randomized", "lanczos", "nystrom"}, default="auto"
        Eigensolver; ``auto`` is dense for small n, else block Lanczos (or
        randomized subspace iteration when the Krylov basis would not fit in
        memory); ``nystrom`` is approximate and only on request.  The choice
        and its reason are in ``model.report``.
    store : str, optional
        Store root.  Default: ``<input>.dkpca.zarr`` beside a path input, a
        new temporary directory for in-memory input.
    chunk_size : int, optional
        Square Gram block edge (default: about 4096, balanced).
    dtype : {"float32", "float64"}, default="float32"
        Storage precision of K (products always accumulate in float64).
    tol : float, default=1e-6
        Iterative solvers stop when every residual ``||K~u - theta u||`` is
        below ``tol * theta_1``.
    max_passes : int, optional
        Limit on passes over K for iterative solvers (default 60).
    random_state : int or numpy Generator, optional
        Seed of the solver's starting block.
    overwrite : bool, default=False
        Replace a store that holds another data set or kernel.
    gram : {"auto", "store", "recompute"}, default="auto"
        ``store`` writes K to Zarr once and reads it each pass; ``recompute``
        evaluates kernel blocks from X every pass and stores no K; ``auto``
        recomputes when K does not fit on the store's disk or when the
        measured cost of a pass says it is faster (see
        :func:`dkpca.solvers.choose`).
    progress : bool, default=False
        Show progress bars (terminal or Jupyter).

    Returns
    -------
    KPCAModel
        Saved in ``<store>/model``; reload with :func:`dkpca.load`.

    Raises
    ------
    ValueError
        Bad parameter or data (the message names it), or a store holding a
        different fit without ``overwrite=True``.
    FileNotFoundError
        The input path does not exist.
    """
    t_start = time.perf_counter()
    dt = _check_params(solver, dtype, tol, max_passes, chunk_size, gram)
    kern = make_kernel(kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params)
    raw = open_input(source)
    X = as_dask(raw, block_rows=None)
    n, d = X.shape
    k = check_n_components(n_components, n)
    block = int(chunk_size) if chunk_size else default_block_size(n)
    block = min(block, n)
    X = X.rechunk((block, d))
    kern = kern.resolve(d)
    path = os.fspath(store) if store is not None else default_store_path(source)
    choice = choose(n, k, solver, gram, X=X, kernel=kern, dtype=dt, block=block, store=path, tol=tol,
                    max_passes=max_passes or 60)
    solver_name, gram, reason = choice.solver, choice.gram, choice.reason
    timings: dict[str, float] = {}
    rng = np.random.default_rng(random_state)

    if logger.isEnabledFor(logging.INFO):
        # The same plan `dkpca plan` prints (measured: about a second).
        from .plan import _resources, make_plan

        logger.info("%s", make_plan(X, kern, k, block, dt, solver_name, reason, gram, path, tol=tol,
                                    max_passes=max_passes or 60, resources=_resources(None)))

    with show_progress(progress):
        t = time.perf_counter()
        fp = scan(X)
        timings["validate"] = time.perf_counter() - t
        _store.check_target(path)
        with _store.exclusive(path):
            t = time.perf_counter()
            Xs = _store_data(path, X, fp, overwrite)
            timings["copy_data"] = time.perf_counter() - t
            t = time.perf_counter()
            # Iterative solvers save their state every pass (resume after a kill).
            ckpt = SolverCheckpoint(path, {
                "fingerprint": fp.to_dict(), "kernel": kern.to_dict(), "k": k, "solver": solver_name, "gram": gram,
                "dtype": dt.name, "block": block,
                "random_state": random_state if isinstance(random_state, numbers.Integral) else None,
            }, chunk_rows=block)
            if overwrite:
                ckpt.clear()
            op, gram_report, solver_opts = _make_operator(path, Xs, kern, fp, dt, solver_name, gram, k, rng,
                                                          overwrite)
            if "start" in solver_opts:
                solver_opts["checkpoint"] = ckpt
            timings["gram"] = time.perf_counter() - t
            t = time.perf_counter()
            solve = get_solver(solver_name)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = solve(op, k, tol=tol, max_passes=max_passes or 60, rng=rng, **solver_opts)
            res = finalize(res, positive_definite=kern.positive_definite)
            centering = res.info.pop("centering", None)
            if centering is not None:  # nystrom: statistics of the approximation it solved
                op.row_means, op.grand_mean = centering["row_means"], centering["grand_mean"]
                op.diag_sum = centering["diag_sum"]
            pass_seconds = res.info.pop("pass_seconds", None) or (op.pass_seconds[-res.passes:] if res.passes else [])
            timings["solve"] = time.perf_counter() - t
            if not res.converged:
                warnings.warn(
                    f"{solver_name} solver stopped after {res.passes} passes with relative residual "
                    f"{res.history[-1] if res.history else float('nan'):.2e} > tol={tol}; "
                    "raise max_passes or tol, or use solver='dense' for small n.",
                    ConvergenceWarning, stacklevel=2,
                )
            timings["total"] = time.perf_counter() - t_start
            report = _report(res, op, solver_name, reason, choice.details, tol, gram_report, timings, pass_seconds,
                             n, d, k)
            model = KPCAModel(
                eigenvalues_=res.eigenvalues, eigenvectors_=res.eigenvectors, row_means_=op.row_means,
                grand_mean_=op.grand_mean, trace_=op.trace, kernel=kern, store=path, block=block,
                n_features=d, report=_store.json_safe(report),
            )
            model.save()
            ckpt.clear()
    return model


def _make_operator(path: str, Xs: da.Array, kern: Kernel, fp: Fingerprint, dt: np.dtype, solver_name: str,
                   gram: str, k: int, rng: np.random.Generator, overwrite: bool):
    """The centred operator a solver will use: (operator, Gram report, solver options).

    Builds (or reuses) the Gram store for ``gram="store"``; for the iterative
    solvers draws their start block and fuses its first product into the
    build (each block multiplies it while in cache: one read of K saved).
    """
    n, block = Xs.shape[0], Xs.chunks[0][0]
    gram_report: dict[str, Any] = {"mode": gram, "dtype": dt.name, "block": block}
    solver_opts: dict[str, Any] = {}
    probe = None
    if solver_name in ("randomized", "lanczos"):
        probe = randomized.start_block(n, randomized.block_size(n, k), rng)
        solver_opts["start"] = probe
    if solver_name == "nystrom":
        # Only n x m kernel slices are evaluated (in the solver); the
        # centering statistics are those of the approximation.
        gram_report["mode"] = "none"
        return MatrixFreeKernelOperator(Xs, kern, dtype=dt, statistics=False), gram_report, solver_opts
    if gram != "store":
        return MatrixFreeKernelOperator(Xs, kern, dtype=dt, probe=probe), gram_report, solver_opts
    # Lanczos keeps every product in its Krylov relation: float64 only.
    single = probe is not None and dt == np.float32 and solver_name == "randomized"
    info = build_gram(path, Xs, kern, fp, dtype=dt, overwrite=overwrite,
                      probe=probe.astype(np.float32) if single else probe)
    op = StoredKernelOperator(info)
    if info.probe_product is not None:
        op.prime(probe, info.probe_product)
    nblocks = info.reused_blocks + info.computed_blocks
    gram_report.update({
        "blocks": nblocks, "reused_blocks": info.reused_blocks, "computed_blocks": info.computed_blocks,
        "build_seconds": info.build_seconds,
        "entries_per_second": float(n) * n / info.build_seconds if info.computed_blocks == nblocks else None,
    })
    return op, gram_report, solver_opts


def _report(res, op, solver_name: str, reason: str, auto: dict, tol: float, gram_report: dict,
            timings: dict, pass_seconds: list, n: int, d: int, k: int) -> dict[str, Any]:
    """``model.report``: what was solved, how, how well and how fast."""
    scale = max(abs(res.eigenvalues[0]), np.finfo(float).tiny) if k else 1.0
    return {
        "solver": solver_name, "solver_reason": reason, "passes": res.passes,
        "passes_over_K": (op.passes if solver_name == "nystrom"
                          else res.passes - op.fused_passes + op.setup_passes),
        "fused_passes": op.fused_passes, "auto": auto,
        "converged": bool(res.converged), "tol": tol,
        "residuals": res.residuals.tolist(),
        "max_relative_residual": float(np.max(res.residuals) / scale) if k else 0.0,
        "history": res.history, "pass_seconds": pass_seconds,
        "solver_info": res.info, "gram": gram_report, "timings": timings,
        "n_samples": n, "n_features": d,
    }
