"""The one solve path: an operator over K -> start block -> solver (rounds for a fraction) -> spectrum policy.

:func:`dkpca.fit` (through :mod:`dkpca.pipeline`) and the estimator's
in-memory fit (:func:`solve_kernel_matrix`) both solve here; their start
blocks follow the same policy (:func:`dkpca.planning.start_policy`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from typing import Any

import numpy as np

from .execution import local_threads, serial_blas
from .kernels import Kernel, NonFiniteKernelError
from .linalg import Centering, extend_basis, kernel_matrix
from .operator import CenteredKernelOperator, InMemoryKernelOperator
from .planning import StartPolicy, start_policy
from .request import as_generator
from .solvers import ConvergenceWarning, EigResult, PassReport, Solver, get_solver, nystrom, postprocess, subspace_width
from .solvers import randomized as random_start
from .solvers.fraction import solve_fraction, working_k
from .solvers.spectrum import keep_fraction

__all__ = ["log_pass", "algebra_blas", "initial_block", "solve", "keep_fraction_warned", "in_memory_operator",
           "memory_kernel_matrix", "solve_kernel_matrix"]

logger = logging.getLogger("dkpca")


def log_pass(report: PassReport) -> None:
    """The per-pass report, through logging (the CLI shows it on stderr; ``logging`` configures it in Python).

    A residual not computed (NaN: block Lanczos leaves out the Ritz pairs of a
    pass that could not converge) is said in words.
    """
    if math.isnan(report.max_relative_residual):
        logger.info("pass %d: residual not computed (predicted above tol) (%.2fs)", report.pass_number, report.seconds)
        return
    logger.info("pass %d: max relative residual %.2e (%.2fs)", report.pass_number, report.max_relative_residual,
                report.seconds)


def algebra_blas(policy: StartPolicy | None) -> contextlib.AbstractContextManager:
    """BLAS threads for a start block's algebra: one where the policy says so, else as configured."""
    return serial_blas() if policy is not None and policy.serial else contextlib.nullcontext()


def initial_block(policy: StartPolicy, X: Any, kernel: Kernel, rng: np.random.Generator) -> np.ndarray:
    """An iterative solver's start block as ``policy`` says: the top Nystroem eigenvectors, else random columns.

    A random block also where the approximation's rank is too low (the Nystroem block is then None).
    """
    block = None
    if policy.landmarks is not None:
        with algebra_blas(policy):
            block = nystrom.start_block(X, kernel, policy.width, rng, policy.landmarks)
    return random_start.start_block(X.shape[0], policy.width, rng) if block is None else block


def solve(solver: Solver, op: CenteredKernelOperator, k: int, fraction: float | None, **opts: Any) -> EigResult:
    """The solver's top-``k`` eigenpairs, or, for a ``fraction`` of explained variance, rounds of growing k."""
    run = get_solver(solver)
    if fraction is None:
        return run(op, k, **opts)
    return solve_fraction(run, op, fraction, k=working_k(op.n, solver),
                          width=lambda k_next: subspace_width(solver, op.n, k_next), **opts)


def keep_fraction_warned(res: EigResult, op: CenteredKernelOperator, fraction: float | None,
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
    op = InMemoryKernelOperator(K, kernel if isinstance(kernel, Kernel) else None)
    if not (np.isfinite(op.row_means).all() and np.isfinite(op.centering.diag_sum)):
        words = isinstance(kernel, str)  # a callable or precomputed kernel: its values are the user's
        raise NonFiniteKernelError.of("the kernel matrix", kernel if words else _kernel_words(kernel),
                                      fix="make it give finite values on this data" if words else
                                      NonFiniteKernelError.FIX)
    return op


def _kernel_words(kernel: Kernel) -> str:
    try:
        return str(kernel.to_dict())
    except ValueError:  # adapters (callables, sparse input) have no spec
        return repr(kernel)


def memory_kernel_matrix(kernel: Kernel, X: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``K(X, X)`` held in memory, built block by block on this process's threads (``linalg.kernel_matrix``).

    The in-memory K of :func:`dkpca.fit` (``gram="memory"``) and of the estimator.
    """
    with local_threads() as pmap:
        return kernel_matrix(kernel, X, dtype, map=pmap)


def solve_kernel_matrix(K: np.ndarray, k: int | float, solver: str | Solver, *, tol: float,
                        max_passes: int | None, random_state: Any, remove_zero: bool, maxiter: int | None = None,
                        X: np.ndarray | None = None, kernel: Kernel | None = None, kernel_name: str = "",
                        start: np.ndarray | None = None, budget: str = "max_iter") -> tuple[EigResult, Centering]:
    """The in-memory path: a kernel matrix held in memory -> operator -> solver -> spectrum policy.

    The same solvers and the same :func:`~dkpca.solvers.postprocess` as
    :func:`dkpca.fit`; the estimator's in-memory ``fit`` is this call.  ``arpack``
    takes scikit-learn's ``tol`` and ``maxiter`` and its starting vector
    from ``random_state``; the iterative dkpca solvers take ``tol`` and
    ``max_passes`` and warn (scikit-learn's ``ConvergenceWarning``) when they
    stop short.  A float ``k`` in (0, 1) is a fraction of explained variance,
    reached as in :func:`dkpca.fit` (zero components are then always dropped; not
    with ``arpack``).  Given the training data ``X`` and its ``kernel``,
    ``lanczos`` and ``randomized`` start as :func:`dkpca.planning.start_policy`
    says (a Nystroem block for wide blocks and large n), as in :func:`dkpca.fit`.
    A K that is not finite is refused (:func:`in_memory_operator`; ``kernel_name``
    names it where ``kernel`` is None).  A warm ``start`` (``partial_fit``'s extended eigenvectors) replaces
    the policy's: ARPACK's ``v0`` of shape (n,), or an iterative solver's orthonormal start block of
    shape (n, width); the dense solver and fractions ignore it.  ``budget``: the estimator's parameter that set
    ``max_passes``, named by the warning.  Returns the post-processed result and K's centring.
    """
    solver = Solver.parse(solver)  # the estimator's eigen_solver, a string: typed at this boundary
    op = in_memory_operator(K, kernel if kernel is not None else (kernel_name or "given"))
    fraction = k if isinstance(k, float) else None
    if solver is Solver.ARPACK:  # with an int k (fractions are refused by check_kernel_pca_params)
        v0 = start if start is not None and start.ndim == 1 else None
        res = get_solver(solver)(op, k, tol=tol, max_passes=None, rng=random_state, maxiter=maxiter, v0=v0)
    else:
        opts: dict[str, Any] = (dict(tol=0.0, max_passes=1, rng=None) if not solver.spec.iterative else
                                dict(tol=tol, max_passes=max_passes, rng=as_generator(random_state)))
        if solver.spec.takes_start and fraction is None:
            policy = start_policy(solver, K.shape[0], k)
            # dense X only: the landmarks' kernel slices need rows of X (sparse X starts at random)
            dense = isinstance(X, np.ndarray) and kernel is not None

            def usual() -> np.ndarray:
                return (initial_block(policy, X, kernel, opts["rng"]) if dense else
                        random_start.start_block(K.shape[0], policy.width, opts["rng"]))

            if start is not None and start.ndim == 2:  # a warm start's columns, then the usual start's beyond them
                opts["start"] = start if start.shape[1] >= policy.width else extend_basis(start, usual())
            elif dense:
                opts["start"] = usual()
        res = solve(solver, op, k, fraction, **opts)
        if solver.spec.iterative and not res.converged:
            warnings.warn(f"solver={solver.value!r} stopped after {res.passes} passes above tol={tol:g}; raise "
                          f"{budget}, or use eigen_solver='dense' or 'arpack'.", ConvergenceWarning, stacklevel=3)
    res = keep_fraction_warned(postprocess(res, remove_zero=remove_zero or fraction is not None, precision=K.dtype,
                                           scale=op.centering.cancelled), op, fraction, max_passes)
    return res, op.centering
