"""``n_components`` as a fraction of explained variance: grow the solve until it is reached.

Every solver needs k up front, but a fraction f asks for the smallest k with
``sum_{i<=k} lambda_i >= f trace(K~)`` -- unknown until the spectrum is.  What
is known exactly, before any eigenvalue, is ``trace(K~)`` (the sum of all n
eigenvalues, from K's diagonal and row sums).  So :func:`solve_fraction`
solves for a working k, and while the computed eigenvalues fall short of
``f trace(K~)`` grows k and solves again:

* the next k is at least twice the last, so the rounds are O(log n), and at
  least ``k + ceil(deficit / lambda_k)``: every eigenvalue not computed yet is
  at most ``lambda_k``, so fewer components cannot close the deficit;
* each round starts from the previous round's eigenvectors (plus random
  columns): the leading pairs are converged already, and only the new ones
  need iterating;
* rounds share one pass budget, ``max_passes`` over K in all;
* with a checkpoint, each round's state is saved with its k and the passes of
  the rounds before it, so a killed fit resumes in the round it was in.

The solve stops when the fraction is reached, when k = n (the whole spectrum,
which always reaches it up to rounding), when a round stops short of ``tol``,
or when the pass budget is spent; the caller truncates to the smallest k
(:func:`~dkpca.solvers.spectrum.keep_fraction`) after the spectrum policy and
warns when the fraction was not reached.  Ritz values never exceed the
eigenvalues they approximate, so a fraction reached by them is reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .randomized import iteration_width, start_block
from .result import DEFAULT_MAX_PASSES, Callback, EigResult, PassReport
from .spectrum import check_eigenvalues, components_for_fraction, operator_zero_threshold

__all__ = ["solve_fraction", "working_k", "next_k", "refuse_indefinite", "WORKING_K", "DEFAULT_MAX_PASSES"]

#: components solved for in the first round of an iterative solver
WORKING_K = 20


def working_k(n: int, solver: str) -> int:
    """The k of the first round: all n for the dense solver (one eigh), else ``WORKING_K`` (at most n)."""
    return n if solver == "dense" else min(n, WORKING_K)


def next_k(k: int, n: int, eigenvalues: np.ndarray, trace: float, fraction: float) -> int:
    """The next round's k after the ``k`` largest ``eigenvalues`` fell short of ``fraction``.

    At least ``2 k`` and at least ``k + ceil(deficit / lambda_k)`` (the
    uncomputed eigenvalues are each at most ``lambda_k``), at most n.
    """
    lam = np.maximum(np.asarray(eigenvalues, dtype=np.float64), 0.0)
    deficit = fraction * trace - float(lam.sum())
    smallest = float(lam.min()) if lam.size else 0.0
    needed = k + math.ceil(deficit / smallest) if smallest > 0 and deficit > 0 else k + 1
    return int(min(n, max(2 * k, needed)))


class _RoundCheckpoint:
    """A solver checkpoint seen by one round: its states carry the round's k and the passes before it.

    Solvers call ``load`` and ``save`` only; a saved state of another round is
    not this round's (None), so a round never resumes from one of a different k.
    """

    def __init__(self, inner: Any, k: int, prior_passes: int) -> None:
        self.inner, self.k, self.prior = inner, k, prior_passes

    def load(self) -> Any:
        state = self.inner.load()
        if state is None or _round_of(state) != (self.k, self.prior):
            return None
        arrays = {name: a for name, a in state.arrays.items() if name not in ("round_k", "prior_passes")}
        return replace(state, arrays=arrays)

    def save(self, passes: int, history: list[float], **arrays: np.ndarray) -> bool:
        return self.inner.save(passes, history, round_k=np.array([self.k]), prior_passes=np.array([self.prior]),
                               **arrays)


def _round_of(state: Any) -> tuple[int, int] | None:
    """(k, passes before the round) of a saved round state; None for a state saved otherwise."""
    a = state.arrays
    if "round_k" not in a or "prior_passes" not in a:
        return None
    return int(a["round_k"][0]), int(a["prior_passes"][0])


def refuse_indefinite(eigenvalues: np.ndarray, trace: float, fraction: float, tol: float,
                      rounding: float = 0.0) -> None:
    """Raise ``ValueError`` where the computed eigenvalues sum to more than ``trace(K~)``, the sum of all n, by
    more than the solver's error (``tol`` of the largest, each) and K's rounding (``rounding``: the level below
    which an eigenvalue is numerically zero, :func:`~.spectrum.operator_zero_threshold`; those count as zero
    and each other one may be off by it): then K~ has significant negative eigenvalues, and ratios to its trace
    -- which they shrink -- are no explained variance (they would add up past 1).  The dense solver, which
    sees the negative eigenvalues, refuses such a K~ too (the spectrum policy)."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    lam = lam[lam > rounding]  # a float32 K's 471 noise eigenvalues summed past an exact trace (cosine, d = 3)
    top = float(lam.max(initial=0.0))
    excess = float(lam.sum()) - trace
    if top > 0 and excess > max(lam.size * tol, 1e-8) * top + lam.size * rounding:
        raise ValueError(
            f"n_components={fraction} (a fraction of explained variance) needs a positive semi-definite kernel, but "
            f"the centred kernel matrix has significant negative eigenvalues: its {lam.size} largest sum to "
            f"{lam.sum():.6g}, more than its trace {trace:.6g} (the sum of all). Pass an integer n_components, or "
            "a positive semi-definite kernel (sigmoid, for one, is not).")


def _offset(callback: Callback | None, prior: int) -> Callback | None:
    """``callback`` with pass numbers counted over all rounds."""
    if callback is None or prior == 0:
        return callback
    return lambda r: callback(PassReport(r.pass_number + prior, r.max_relative_residual, r.seconds))


def _warm_start(U: np.ndarray, ell: int, rng: np.random.Generator) -> np.ndarray:
    """An orthonormal n x ``ell`` block spanning the previous eigenvectors ``U`` and random directions."""
    n = U.shape[0]
    extra = start_block(n, ell, rng)[:, : max(0, ell - U.shape[1])]
    Q, _ = np.linalg.qr(np.hstack([U[:, :ell], extra]))
    return Q


def solve_fraction(solve: Callable[..., EigResult], operator: Any, fraction: float, *, k: int, tol: float,
                   max_passes: int | None, rng: Any, callback: Callback | None = None,
                   start: np.ndarray | None = None, checkpoint: Any = None,
                   width: Callable[[int], int] | None = None, **options: Any) -> EigResult:
    """Eigenpairs of K~ enough to explain ``fraction`` of ``trace(K~)``, by rounds of ``solve``.

    Parameters
    ----------
    solve : callable
        A solver's ``solve`` (dense, randomized or lanczos).
    operator : CenteredKernelOperator
        With exact centring statistics (``operator.trace``).
    fraction : float
        In (0, 1).
    k : int
        The first round's k (:func:`working_k`).
    tol, rng, callback
        As for the solver; pass numbers run on over all rounds.
    max_passes : int or None
        Passes over K for all rounds together (None: ``DEFAULT_MAX_PASSES``).
    start : ndarray, optional
        The first round's start block (the pipeline's fused probe).
    checkpoint : SolverCheckpoint, optional
        Keyed to this fit (fraction included, not k); resumed in the round it was saved in.
    width : callable, optional
        The solver's subspace width for a k (a later round's warm start has it;
        default ``iteration_width(n, k)``, subspace iteration's).
    **options
        The solver's own options.

    Returns
    -------
    EigResult
        The last round's eigenpairs (not yet truncated), ``passes`` over all
        rounds; ``info["fraction"]`` holds ``rounds`` (k, passes and
        convergence of each), ``complete`` (the whole spectrum was computed)
        and, after a resume, ``resumed_in_round_k``.
    """
    n = operator.n
    trace = float(operator.trace)
    budget = DEFAULT_MAX_PASSES if max_passes is None else int(max_passes)
    rng = np.random.default_rng(rng)
    used, rounds, history = 0, [], []
    resumed_k = None
    saved = checkpoint.load() if checkpoint is not None else None
    where = _round_of(saved) if saved is not None else None
    if where is not None:
        # killed in a later round: its state replaces the rounds before it
        k, used = where
        start = None
        resumed_k = k
    while True:
        kw = dict(options)
        if checkpoint is not None:
            kw["checkpoint"] = _RoundCheckpoint(checkpoint, k, used)
        if start is not None:
            kw["start"] = start
        res = solve(operator, k, tol=tol, max_passes=max(1, budget - used), rng=rng,
                    callback=_offset(callback, used), **kw)
        used += res.passes
        history += res.history
        rounds.append({"k": k, "passes": res.passes, "converged": bool(res.converged)})
        lam = np.asarray(res.eigenvalues, dtype=np.float64)
        refuse_indefinite(lam, trace, fraction, tol, operator_zero_threshold(operator, float(lam.max(initial=0.0))))
        # the whole spectrum is known: all n pairs, or a computed eigenvalue that is numerically 0
        # (the spectrum policy's test; a PSD K~'s remaining ones are 0 too); then only rounding can
        # keep the fraction from being reached
        complete = k >= n or bool(np.any(check_eigenvalues(lam) == 0))
        if components_for_fraction(lam, trace, fraction) is not None or complete or not res.converged \
                or used >= budget:
            break
        k_next = next_k(k, n, lam, trace, fraction)
        order = np.argsort(-lam, kind="stable")
        ell = iteration_width(n, k_next) if width is None else width(k_next)
        start = _warm_start(np.asarray(res.eigenvectors)[:, order], ell, rng)
        k = k_next
    info = dict(res.info)
    info["fraction"] = {"rounds": rounds, "complete": bool(complete)}
    if resumed_k is not None:
        info["fraction"]["resumed_in_round_k"] = resumed_k
    return replace(res, passes=used, history=history, info=info)
