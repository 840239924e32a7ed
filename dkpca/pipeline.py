"""``dkpca.fit``: input -> validation -> Gram store -> operator -> solver -> model.

This module only wires the stages together; each stage lives in its own
module.  Everything that can be checked cheaply is checked before any data
is read, and everything that needs a look at the values (finiteness) before
anything is written.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import dask.array as da
import numpy as np

from .execution import compute, local_threads, serial_blas
from .gram import build_gram
from .io import Fingerprint, input_path, scan
from .kernels import Kernel, NonFiniteKernelError
from .linalg import Centering, kernel_matrix
from .model import KPCAModel
from .operator import CenteredKernelOperator, InMemoryKernelOperator, MatrixFreeKernelOperator, StoredKernelOperator
from .planning import PrecisionWarning, choose, make_plan
from .request import FitRequest, as_generator, make_request
from .solvers import ConvergenceWarning, EigResult, PassReport, block_width, get_solver, nystrom, postprocess
from .solvers.fraction import solve_fraction, working_k
from .solvers.randomized import block_size, start_block
from .solvers.spectrum import keep_fraction
from .storage import CorruptChunkError, GramStore, Lease, SolverCheckpoint, absolute, fit_footprint, json_safe

__all__ = ["fit", "solve_kernel_matrix", "in_memory_operator", "memory_kernel_matrix"]

logger = logging.getLogger("dkpca")


def _log_pass(report: PassReport) -> None:
    """The per-pass report, through logging (the CLI shows it on stderr; ``logging`` configures it in Python).

    A residual not computed (NaN: block Lanczos leaves out the Ritz pairs of a
    pass that could not converge) is said in words.
    """
    if math.isnan(report.max_relative_residual):
        logger.info("pass %d: residual not computed (predicted above tol) (%.2fs)", report.pass_number, report.seconds)
        return
    logger.info("pass %d: max relative residual %.2e (%.2fs)", report.pass_number, report.max_relative_residual,
                report.seconds)


def fit(
    source: Any,
    n_components: int | float = 2,
    kernel: str | Kernel | dict = "rbf",
    gamma: float | None = None,
    degree: int = 3,
    coef0: float = 1.0,
    kernel_params: dict | None = None,
    solver: str = "auto",
    store: str | os.PathLike | None = None,
    chunk_size: int | None = None,
    dtype: str = "auto",
    tol: float = 1e-6,
    max_passes: int | None = None,
    random_state: int | np.random.Generator | None = None,
    overwrite: bool = False,
    gram: str = "auto",
    progress: bool | Callable[[str, int, int], None] = False,
) -> KPCAModel:
    """Fit kernel PCA out of core and persist the model.

    Parameters
    ----------
    source : str, zarr.Array, numpy.ndarray, dask.array.Array or xarray.DataArray
        Training data of shape (n_samples, n_features): a path or fsspec URL
        of a Zarr array or group, a ``.npy`` file (memory-mapped), an HDF5
        dataset ``"file.h5:/dataset"``, a netCDF (or other xarray-readable)
        variable ``"file.nc:variable"``, a Parquet or CSV file of numeric
        columns; or an array.  Files are read block by block, never whole.
    n_components : int or float, default=2
        Number of components k (1 <= k <= n_samples), or a fraction f in
        (0, 1): the smallest k whose explained-variance ratio, against the
        exact ``trace(K~)``, reaches f (scikit-learn's ``PCA(n_components=0.95)``).
        Iterative solvers then solve for a working k and grow it round by
        round (:mod:`dkpca.solvers.fraction`; ``max_passes`` bounds all
        rounds together, and ``ConvergenceWarning`` says when f was not
        reached); the dense solver computes the whole spectrum.  Not with
        ``solver="nystrom"``, which approximates the spectrum.
    kernel : str, Kernel or dict, default="rbf"
        ``rbf``, ``laplacian``, ``poly``, ``linear``, ``sigmoid``, ``cosine``, or a
        dkpca Kernel (sums, products, scalings of those).
    gamma, degree, coef0, kernel_params
        Kernel parameters with scikit-learn's names and defaults
        (``gamma=None`` -> 1/n_features).
    solver : {"auto", "dense", "randomized", "lanczos", "nystrom", "arpack"}, default="auto"
        Eigensolver; ``auto`` is dense for small n, else block Lanczos (or
        randomized subspace iteration when the Krylov basis would not fit in
        memory); with K held in memory (``gram="memory"``) dense for tiny n
        or a large share of the spectrum, else ``arpack``
        (``scipy.sparse.linalg.eigsh``, in memory only); ``nystrom`` is
        approximate and only on request.  The choice and its reason are in
        ``model.report``.
    store : str, optional
        Store root, always kept.  Default: ``<input>.dkpca.zarr`` beside a path
        input; for in-memory input a new temporary directory that lives as long
        as the model: removed by ``model.close()`` (or leaving ``with model:``),
        when the model is garbage-collected, or at interpreter exit.  It holds
        the training data (for ``transform``); the model is written into it
        only by an explicit ``model.save()``.
    chunk_size : int, optional
        Square Gram block edge (default: about 4096, balanced).
    dtype : {"auto", "float32", "float64"}, default="auto"
        Precision K is held in, stored or in memory (products accumulate in
        float64, but for early single-precision passes and ARPACK on a float32
        K, which runs in single precision as scikit-learn's does).  ``auto``:
        float32 unless a sample of the data says it would put over 1e-6
        relative error into the top eigenvalues (centring cancelling most of
        K), then float64 (:mod:`dkpca.planning.precision`; ``model.report
        ["precision"]`` says why); a lossy ``float32`` warns (``PrecisionWarning``).
    tol : float, default=1e-6
        Iterative solvers stop when every residual ``||K~u - theta u||`` is
        below ``tol * theta_1``.
    max_passes : int, optional
        Limit on passes over K for iterative solvers (default 60).
    random_state : int or numpy Generator, optional
        Seed of the solver's starting block.
    overwrite : bool, default=False
        Replace a store that holds another data set or kernel.
    gram : {"auto", "store", "recompute", "memory"}, default="auto"
        ``store`` writes K to Zarr once and reads it each pass; ``recompute``
        evaluates kernel blocks from X every pass and stores no K;
        ``memory`` evaluates K once into memory (in ``dtype``; not resumable);
        ``auto`` holds K in memory when the input is in memory, its store
        temporary and K fits (128 MiB: n <= 5,792 in float32, 4,096 in float64), else recomputes when K does
        not fit on the store's disk or when the measured cost of a pass says
        it is faster (see :func:`dkpca.planning.choose`), else stores.
    progress : bool or callable, default=False
        True: progress on stderr (a bar on a terminal or in Jupyter, a line
        per tenth of the work in a log); a callable receives
        ``(label, done, total)`` as tasks finish.  Each solver pass is
        reported through the ``dkpca`` logger at INFO level whatever this is.

    Returns
    -------
    KPCAModel
        Saved in ``<store>/model``; reload with :func:`dkpca.load`.  The
        spectrum follows scikit-learn's rules (:mod:`dkpca.solvers.spectrum`):
        ranked by value, significant negative eigenvalues are an error, and
        numerically zero components are dropped, so ``n_components_`` of the
        model can be below the number asked for.

    Raises
    ------
    ValueError
        Bad parameter or data (the message names it), or a store holding a
        different fit without ``overwrite=True``.
    FileNotFoundError
        The input path does not exist.
    """
    t_start = time.perf_counter()
    req = make_request(source, n_components, kernel, gamma, degree, coef0, kernel_params, solver, store, chunk_size,
                       dtype, tol, max_passes, random_state, overwrite, gram, progress)
    try:
        return _fit_request(req, source, t_start)
    except BaseException:
        if req.temporary is not None:  # a failed fit leaves no temporary store behind
            req.temporary.remove()
        raise


def _fit_request(req: FitRequest, source: Any, t_start: float) -> KPCAModel:
    """:func:`fit` from its validated request; the model owns ``req.temporary`` (if any)."""
    choice = choose(req.n, req.n_components, req.solver, req.gram, X=req.X, kernel=req.kernel, dtype=req.dtype,
                    block=req.block, store=req.store.path, tol=req.tol, max_passes=req.max_passes,
                    temporary=req.temporary is not None, fraction=req.fraction is not None,
                    stored_dtype=None if req.overwrite else GramStore(req.store).recorded_dtype())
    # dtype="auto" resolved (planning.precision): the rest of the fit holds K in the chosen precision
    req = replace(req, dtype=choice.dtype)
    if choice.precision is not None and choice.precision.lossy:
        warnings.warn(choice.precision.warning(), PrecisionWarning, stacklevel=3)
    # The plan logged is made from the sizes alone: logging never changes the work done.  It is made
    # only when logged (a notebook that printed dkpca.plan already does not get it twice).
    if logger.isEnabledFor(logging.INFO):
        logger.info("%s", make_plan(req.X, req.kernel, req.n_components, req.block, req.dtype, choice.solver,
                                    choice.reason, choice.gram, req.store.path, tol=req.tol,
                                    max_passes=req.max_passes, measure=False, fraction=req.fraction,
                                    precision=choice.precision))
    timings: dict[str, float] = {}
    rng = as_generator(req.random_state)
    t = time.perf_counter()
    fp = scan(req.X)
    timings["validate"] = time.perf_counter() - t
    req.store.check_target()
    with req.store.lock() as lease:
        t = time.perf_counter()
        path = input_path(source)
        source = absolute(path) if path is not None else None
        Xs = req.store.store_data(req.X, fp.to_dict(), req.overwrite, progress=req.progress, source=source,
                                  lease=lease)
        timings["copy_data"] = time.perf_counter() - t
        t = time.perf_counter()
        # Iterative solvers save their state every pass (resume after a kill).
        ckpt = SolverCheckpoint(req.store, {
            "fingerprint": fp.to_dict(), "kernel": req.kernel.to_dict(),
            "k": req.n_components if req.fraction is None else {"fraction": req.fraction},
            "solver": choice.solver, "gram": choice.gram, "dtype": req.dtype.name, "block": req.block,
            "random_state": req.random_state if isinstance(req.random_state, int) else None,
        }, chunk_rows=req.block)
        if req.overwrite:
            ckpt.clear()
        # the kernel whose blocks the fit evaluates: req.kernel, or its compiled-exp variant (same spec)
        evaluator = req.kernel.compiled() if choice.compiled_exp else req.kernel
        op, gram_report, res = _build_and_solve(req, evaluator, Xs, fp, choice.solver, choice.gram, rng, ckpt,
                                                timings, lease)
        t = time.perf_counter()
        centering = res.info.pop("centering", None)
        if centering is not None:  # nystrom: statistics of the approximation it solved
            op.centering = Centering(centering["row_means"], centering["grand_mean"], centering["diag_sum"])
        pass_seconds = res.info.pop("pass_seconds", None) or (op.pass_seconds[-res.passes:] if res.passes else [])
        # scikit-learn's spectrum rules, with the thresholds of the precision K is held in
        res = _keep_fraction(postprocess(res, remove_zero=True, precision=op.dtype, scale=op.centering.cancelled),
                             op, req.fraction, req.max_passes)
        timings["solve"] += time.perf_counter() - t  # the policy's time counts as solving
        if not res.converged:
            warnings.warn(
                f"{choice.solver} solver stopped after {res.passes} passes with relative residual "
                f"{res.history[-1] if res.history else float('nan'):.2e} > tol={req.tol}; "
                "raise max_passes or tol, or use solver='dense' for small n.",
                ConvergenceWarning, stacklevel=2,
            )
        timings["total"] = time.perf_counter() - t_start
        # the precision's sentence first: the model's summary (and the CLI) say why K is in its dtype
        reason = choice.reason if choice.precision is None else \
            f"dtype={choice.precision.dtype}: {choice.precision.reason}; {choice.reason}"
        report = _report(res, op, choice.solver, reason, choice.details, req.tol, gram_report, timings,
                         pass_seconds, req.n, req.d,
                         req.n_components if req.fraction is None else req.fraction)
        report["precision"] = choice.precision.to_dict() if choice.precision is not None else None
        model = KPCAModel(
            eigenvalues_=res.eigenvalues, eigenvectors_=res.eigenvectors, row_means_=op.row_means,
            grand_mean_=op.grand_mean, trace_=op.trace, kernel=req.kernel, store=req.store.path, block=req.block,
            n_features=req.d, report=json_safe(report), temporary=req.temporary,
        )
        if req.temporary is None:
            # A temporary store is the model's own and dies with it: nobody can load a model from it, so
            # it is written there only by an explicit model.save() (0.05-0.07 s of a 0.3 s fit at n=2,000).
            model.save()
        ckpt.clear()
    return model


#: rounds of recomputing damaged Gram blocks a fit makes before it gives up (each round mends all it finds)
GRAM_REPAIRS = 2


def _build_and_solve(req: FitRequest, evaluator: Kernel, Xs: da.Array, fp: Fingerprint, solver_name: str, gram: str,
                     rng: np.random.Generator, ckpt: SolverCheckpoint, timings: dict[str, float],
                     lease: Lease) -> tuple[CenteredKernelOperator, dict[str, Any], EigResult]:
    """Operator, Gram report and solver result (``timings``: "gram", "solve"); damaged Gram chunks are rebuilt.

    Every read of K is verified (:class:`~dkpca.storage.CorruptChunkError`
    names a missing, truncated or corrupt chunk).  A Gram chunk's block gets
    its done marker cleared and is rebuilt; the solver then resumes from its
    checkpoint (every pass before read only verified data).  Damage anywhere
    else (the data copy) is raised: it cannot be recomputed from the store.
    """
    for attempt in range(GRAM_REPAIRS + 1):
        t = time.perf_counter()
        try:
            op, gram_report, solver_opts = _make_operator(req, evaluator, Xs, fp, solver_name, gram, rng, lease)
            if "start" in solver_opts:
                solver_opts["checkpoint"] = ckpt
            timings["gram"] = time.perf_counter() - t
            t = time.perf_counter()
            start = solver_opts.get("start")
            with warnings.catch_warnings(), _algebra_blas(None if start is None else start.shape[1]):
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = _solve(solver_name, op, req.n_components, req.fraction, tol=req.tol,
                             max_passes=req.max_passes, rng=rng, callback=_log_pass, **solver_opts)
            timings["solve"] = time.perf_counter() - t
            return op, gram_report, res
        except CorruptChunkError as exc:
            repaired = 0 if attempt == GRAM_REPAIRS or gram != "store" else GramStore(req.store).repair(exc)
            if not repaired:
                raise
            logger.warning("%s; recomputing the %d damaged Gram block(s)", exc, repaired)
    raise AssertionError("unreachable")  # pragma: no cover


#: widest start block whose solver algebra (between passes) runs on one BLAS thread.  Measured at
#: n = 20,000 from a Zarr path (Lanczos, 2 cores; the solver's time outside its passes, one BLAS thread
#: vs two): block 20: 0.37 s vs 0.78 s; block 60: 13.0 / 12.9 s vs 13.3 / 14.5 s; block 110:
#: 24.9 / 27.2 s vs 20.7 / 21.0 s; block 210: 47.2 / 47.0 s vs 34.8 / 34.5 s.  Narrow blocks are
#: tall-skinny products that two threads run slower (and whose idle BLAS threads spin on the cores a
#: pass needs); wide ones are GEMMs and eigenproblems that two threads run faster.  The same holds for
#: the algebra of a Nystroem start block (200 landmarks, block 20; median of 8, one BLAS thread vs two):
#: 0.30 s vs 0.41 s at n = 20,000, 0.51 s vs 0.61 s at n = 40,000.
SERIAL_ALGEBRA_MAX_WIDTH = 64


def _algebra_blas(width: int | None) -> contextlib.AbstractContextManager:
    """BLAS threads for an iterative solver's algebra: one for a block up to SERIAL_ALGEBRA_MAX_WIDTH wide.

    ``width``: the start block's columns; None (the dense and ARPACK solvers, K in memory): BLAS
    as configured (ARPACK sets its own, :data:`dkpca.solvers.arpack.SERIAL_MAX_N`).  For a
    fraction of explained variance the first round's block decides for every round (later
    rounds are wider: a fit that starts narrow keeps one thread).
    """
    narrow = width is not None and width <= SERIAL_ALGEBRA_MAX_WIDTH
    return serial_blas() if narrow else contextlib.nullcontext()


def _make_operator(req: FitRequest, evaluator: Kernel, Xs: da.Array, fp: Fingerprint, solver_name: str, gram: str,
                   rng: np.random.Generator, lease: Lease,
                   ) -> tuple[CenteredKernelOperator, dict[str, Any], dict[str, Any]]:
    """The centred operator a solver will use: (operator, Gram report, solver options).

    Builds (or reuses) the Gram store for ``gram="store"``; for the iterative
    solvers draws their start block and fuses its first product into the
    build (each block multiplies it while in cache: one read of K saved).
    """
    n, block, dt = Xs.shape[0], Xs.chunks[0][0], req.dtype
    gram_report: dict[str, Any] = {"mode": gram, "dtype": dt.name, "block": block,
                                   "compiled_exp": evaluator is not req.kernel}
    solver_opts: dict[str, Any] = {}
    probe = None
    if gram == "memory":
        # K evaluated once into memory, in the fit's dtype as a store would hold it: no store, no fused start
        # block, no checkpoints (see planning.choose: chosen where there is nothing to reuse or resume).
        t = time.perf_counter()
        op = in_memory_operator(memory_kernel_matrix(req.kernel, np.asarray(compute(Xs)[0]), dt), req.kernel)
        gram_report["build_seconds"] = time.perf_counter() - t
        return op, gram_report, solver_opts
    if solver_name in ("randomized", "lanczos"):
        probe = _start_block(solver_name, Xs, req.kernel, req.n_components, rng)
        solver_opts["start"] = probe
    if solver_name == "nystrom":
        # Only n x m kernel slices are evaluated (in the solver); the
        # centering statistics are those of the approximation.
        gram_report["mode"] = "none"
        return MatrixFreeKernelOperator(Xs, evaluator, dtype=dt, statistics=False), gram_report, solver_opts
    if gram != "store":
        return MatrixFreeKernelOperator(Xs, evaluator, dtype=dt, probe=probe), gram_report, solver_opts
    # Lanczos keeps every product in its Krylov relation: float64 only.
    single = probe is not None and dt == np.float32 and solver_name == "randomized"
    need = fit_footprint(n, req.d, block, dt, block_size(n, req.n_components), Xs.dtype.itemsize)
    info = build_gram(req.store, Xs, evaluator, fp, dtype=dt, overwrite=req.overwrite,
                      probe=probe.astype(np.float32) if single else probe, progress=req.progress, needed_bytes=need,
                      lease=lease)
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
            timings: dict, pass_seconds: list, n: int, d: int, requested: int | float) -> dict[str, Any]:
    """``model.report``: what was solved, how, how well and how fast."""
    k = len(res.eigenvalues)
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
        "n_samples": n, "n_features": d, "n_components_requested": requested,
        "zero_components_dropped": int(res.info.get("zero_eigenvalues_removed", 0)),
    }


def _start_block(solver_name: str, X: Any, kernel: Kernel, k: int, rng: np.random.Generator) -> np.ndarray:
    """An iterative solver's start block: the top Nystroem eigenvectors where they pay, else a random block.

    Where is :func:`~dkpca.solvers.nystrom.start_landmarks`' rule (large n,
    wide blocks); a random block also where the approximation's rank is too low.
    The Nystroem block's algebra gets the BLAS threads of the solver's (:func:`_algebra_blas`).
    """
    n = X.shape[0]
    ell = block_width(solver_name, n, k)
    landmarks = nystrom.start_landmarks(n, ell)
    block = None
    if landmarks is not None:
        with _algebra_blas(ell):
            block = nystrom.start_block(X, kernel, ell, rng, landmarks)
    return start_block(n, ell, rng) if block is None else block


def _solve(solver_name: str, op: CenteredKernelOperator, k: int, fraction: float | None, **opts: Any) -> EigResult:
    """The solver's top-``k`` eigenpairs, or, for a ``fraction`` of explained variance, rounds of growing k."""
    solve = get_solver(solver_name)
    if fraction is None:
        return solve(op, k, **opts)
    return solve_fraction(solve, op, fraction, k=working_k(op.n, solver_name),
                          width=lambda k_next: block_width(solver_name, op.n, k_next), **opts)


def _keep_fraction(res: EigResult, op: CenteredKernelOperator, fraction: float | None,
                   max_passes: int | None) -> EigResult:
    """``res`` cut to the fewest components reaching ``fraction`` (None: as it is), warning once if none does."""
    if fraction is None:
        return res
    res = keep_fraction(res, op.trace, fraction)
    f = res.info["fraction"]
    if f["reached"] or f.get("complete"):
        return res  # a complete spectrum falls short only by rounding
    warnings.warn(
        f"n_components={f['target']}: the {res.eigenvalues.size} components computed in {res.passes} passes "
        f"explain {f['explained']:.4%} of the variance, short of {f['target']:.4%}; all of them are kept. Raise "
        f"max_passes (it was {max_passes}, for all rounds together) or tol, or use solver='dense' for small n.",
        ConvergenceWarning, stacklevel=4,
    )
    return res


def in_memory_operator(K: np.ndarray, kernel: Kernel | str) -> InMemoryKernelOperator:
    """The centred operator over a K held in memory, refused (as a Gram build refuses a block) if K is not finite.

    The one check of every in-memory K (``gram="memory"``, the estimator's):
    K's row sums, which centring takes anyway, are finite exactly when K is
    (else an overflow reaches the solver, e.g. as ARPACK error -9999).
    """
    op = InMemoryKernelOperator(K)
    if not (np.isfinite(op.row_means).all() and np.isfinite(op.centering.diag_sum)):
        words = isinstance(kernel, str)  # a callable or precomputed kernel: its values are the user's
        fix = ("make it give finite values on this data" if words else
               "choose other kernel parameters (e.g. a smaller degree or gamma) or scale the data")
        raise NonFiniteKernelError(
            f"the kernel matrix has non-finite values (overflow or NaN): the kernel "
            f"{kernel if words else _kernel_words(kernel)} is not usable on this data; {fix}.")
    return op


def _kernel_words(kernel: Kernel) -> str:
    try:
        return str(kernel.to_dict())
    except ValueError:  # adapters (callables, sparse input) have no spec
        return repr(kernel)


def memory_kernel_matrix(kernel: Kernel, X: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``K(X, X)`` held in memory, built block by block on this process's threads (``linalg.kernel_matrix``).

    The in-memory K of :func:`fit` (``gram="memory"``) and of the estimator.
    """
    with local_threads() as pmap:
        return kernel_matrix(kernel, X, dtype, map=pmap)


def solve_kernel_matrix(K: np.ndarray, k: int | float, solver: str, *, tol: float, max_passes: int | None,
                        random_state: Any, remove_zero: bool, maxiter: int | None = None,
                        X: np.ndarray | None = None, kernel: Kernel | None = None, kernel_name: str = "",
                        ) -> tuple[EigResult, Centering]:
    """The in-memory path: a kernel matrix held in memory -> operator -> solver -> spectrum policy.

    The same solvers and the same :func:`~dkpca.solvers.postprocess` as
    :func:`fit`; the estimator's in-memory ``fit`` is this call.  ``arpack``
    takes scikit-learn's ``tol`` and ``maxiter`` and its starting vector
    from ``random_state``; the iterative dkpca solvers take ``tol`` and
    ``max_passes`` and warn (scikit-learn's ``ConvergenceWarning``) when they
    stop short.  A float ``k`` in (0, 1) is a fraction of explained variance,
    reached as in :func:`fit` (zero components are then always dropped; not
    with ``arpack``).  Given the training data ``X`` and its ``kernel``,
    ``lanczos`` and ``randomized`` start from a Nystroem block where
    :func:`~dkpca.solvers.nystrom.start_landmarks` says it pays (wide blocks,
    large n), as in :func:`fit`.  A K that is not finite is refused
    (:func:`in_memory_operator`; ``kernel_name`` names it where ``kernel``
    is None).  Returns the post-processed result and K's centring.
    """
    op = in_memory_operator(K, kernel if kernel is not None else (kernel_name or "given"))
    fraction = k if isinstance(k, float) else None
    if solver == "arpack":  # with an int k (fractions are refused by check_kernel_pca_params)
        res = get_solver("arpack")(op, k, tol=tol, max_passes=None, rng=random_state, maxiter=maxiter)
    else:
        opts: dict[str, Any] = (dict(tol=0.0, max_passes=1, rng=None) if solver == "dense" else
                                dict(tol=tol, max_passes=max_passes, rng=as_generator(random_state)))
        # dense X only: the landmarks' kernel slices need rows of X (sparse X starts at random)
        if solver in ("randomized", "lanczos") and fraction is None and isinstance(X, np.ndarray) \
                and kernel is not None:
            opts["start"] = _start_block(solver, X, kernel, k, opts["rng"])
        res = _solve(solver, op, k, fraction, **opts)
        if solver != "dense" and not res.converged:
            warnings.warn(f"solver={solver!r} stopped after {res.passes} passes above tol={tol:g}; raise max_iter, "
                          "or use eigen_solver='dense' or 'arpack'.", ConvergenceWarning, stacklevel=3)
    res = _keep_fraction(postprocess(res, remove_zero=remove_zero or fraction is not None, precision=K.dtype,
                                     scale=op.centering.cancelled), op, fraction, max_passes)
    return res, op.centering
