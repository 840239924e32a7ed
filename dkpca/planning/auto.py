"""``solver="auto"`` and ``gram="auto"`` resolved in one place, with the reason in words.

The choice is made from the sizes, the free disk at the store, the memory of
this machine and -- only where the sizes leave it open -- measured block
costs (:mod:`dkpca.planning.measure`).  It never depends on logging or
progress settings: the same request always does the same work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..execution import n_workers_threads
from ..machine import memory_available
from ..solvers import Solver, subspace_width
from ..solvers.fraction import DEFAULT_MAX_PASSES
from ..solvers.randomized import iteration_width
from ..storage import fit_footprint, gram_bytes
from ..storage import free_bytes as storage_free_bytes
from .compiledexp import COMPILED_EXP_MIN_ENTRIES, WARM_MIN_N, compile_seconds, compiled_already, use_compiled_exp
from .estimate import EntryRates
from .inmemory import DENSE_K_SHARE, DENSE_MAX_N, LANCZOS_MIN_K, in_memory_solver
from .measure import lanczos_passes, measure_and_estimate
from .modes import cheapest
from .precision import Precision, choose_precision, requested_dtype

__all__ = ["Choice", "choose", "use_compiled_exp", "COMPILED_EXP_MIN_ENTRIES", "DENSE_MAX_N", "DENSE_K_SHARE",
           "SMALL_GRAM_BYTES", "MEMORY_GRAM_BYTES", "LANCZOS_MIN_K", "memory_gram_fits", "in_memory_solver",
           "solver_rule", "gram_rule"]

#: Gram stores up to this size are stored without measuring (``gram="auto"``):
#: K stays in the page cache, a refit reuses it, and the choice -- hence the
#: rounding of the result -- does not depend on a timing.
SMALL_GRAM_BYTES = 1 << 30

#: ``gram="auto"`` holds K in memory, in the fit's ``dtype``, up to this size
#: when its store would be temporary anyway (in-memory input without
#: ``store=``): nothing to reuse or resume, so the store's writes, checksums
#: and reads are pure cost.  128 MiB: n <= 5,792 in float32 (the default),
#: n <= 4,096 in float64.  ``dkpca.fit(X)``, k = 10, d = 50, each fit in a new
#: process (``benchmarks/_child.py``), memory and store interleaved (2-core AMD
#: EPYC, 2026-11-24, K in float32, ARPACK vs stored Lanczos): n = 5,000 (5
#: rounds) 0.43-0.53 s in memory vs 0.60-0.67 s stored; n = 5,700 (4 rounds)
#: 0.56-0.67 vs 0.66-0.77.  (K in float64 crossed over earlier: 2026-11-24,
#: n = 4000 0.37-0.63 s in memory vs 0.48-0.55 stored; 5000 0.86-1.07 vs
#: 0.61-0.80.)
MEMORY_GRAM_BYTES = 1 << 27


def memory_gram_fits(need: int, memory_bytes: int | None = None, budget: int | None = MEMORY_GRAM_BYTES) -> bool:
    """Whether a K of ``need`` bytes fits ``budget`` (None: no budget, as when asked for) and a quarter of memory."""
    if memory_bytes is None:
        memory_bytes = memory_available()
    return (budget is None or need <= budget) and need <= 0.25 * memory_bytes


@dataclass
class Choice:
    """What ``auto`` resolved to (:func:`choose`).

    Attributes
    ----------
    solver : str
        ``dense``, ``randomized``, ``lanczos`` or ``nystrom``.
    gram : str
        ``store`` or ``recompute``.
    reason : str
        One human-readable sentence per decision, for the model report.
    details : dict
        The figures the decision used (JSON-safe): sizes, free disk, measured
        seconds per block, estimated passes and totals.
    compiled_exp : bool
        Evaluate the kernel with its exp compiled (:func:`use_compiled_exp`).
    precision : Precision or None
        The precision K is held in and why (:func:`~dkpca.planning.precision.choose_precision`).
    """

    solver: str
    gram: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    compiled_exp: bool = False
    precision: Precision | None = None
    #: the solver's and the Gram mode's reasons, each on its own
    reasons: tuple[str, str] = ("", "")

    @property
    def dtype(self) -> np.dtype:
        """K's precision: the decided one (float32 where nothing decided it)."""
        return np.dtype(self.precision.dtype if self.precision is not None else "float32")


def choose(n: int, k: int, solver: str = "auto", gram: str = "store", *, X=None, kernel=None,
           dtype: Any = "auto", block: int | None = None, store: str | None = None, tol: float = 1e-6,
           max_passes: int | None = None, free_bytes: int | None = None, memory_bytes: int | None = None,
           measured: dict[str, float] | None = None, workers: int | None = None, temporary: bool = False,
           fraction: bool = False, stored_dtype: str | None = None, precision: Precision | None = None) -> Choice:
    """Resolve ``dtype="auto"``, ``solver="auto"`` and ``gram="auto"``; says why.

    The precision first (``dtype``: ``auto``, ``float32`` or ``float64``;
    :func:`~dkpca.planning.precision.choose_precision`, measured on a sample
    of X): the rules below are applied with K in float32, and again in
    float64 when the sample says float32 would lose the eigenvalues (its
    entries, or -- where those rules pick ARPACK on K in memory -- its
    single-precision products).  ``Choice.precision`` says which and why.

    Rules, in order (each is a sentence of ``reason``):

    solver
        * K held in memory (``gram`` is or resolves to ``memory``):
          :func:`in_memory_solver` (dense or ARPACK);
        * ``n <= DENSE_MAX_N``: ``dense`` (an in-memory eigh beats repeated passes);
        * ``k > n / 4`` and two n x n float64 arrays fit in half the memory: ``dense``;
        * else ``lanczos`` if its smallest Krylov basis (3 blocks of l columns,
          twice for workspace) fits in a quarter of the memory -- it needs
          fewer passes than subspace iteration for the same accuracy -- else
          ``randomized`` (O(n l) memory).  ``auto`` never picks the
          approximate ``nystrom``: ask for it;
        * where K is large enough to measure (below), ``lanczos`` and
          ``randomized`` are both weighed: expected passes x cost per pass
          (subspace iteration's early passes in single precision), the
          faster wins (:func:`~dkpca.planning.modes.cheapest`); a small K
          (not measured) keeps ``lanczos``: at n = 20,000 / 21,000 stored in
          float32 (2-core AMD EPYC, 2026-11-27, median of 3, each fit in its
          own process) it solved in 1.43 / 1.23 s (3 passes) against
          subspace iteration's 1.49 / 1.50 s (4), and its fit records k + 20
          Ritz pairs for an update where subspace iteration records its width.
    gram
        * ``nystrom`` never reads K: ``recompute`` (no Gram store);
        * ``temporary`` (in-memory input without ``store=``: the store would
          be removed with the model) and K in ``dtype`` fits
          ``MEMORY_GRAM_BYTES`` and a quarter of the memory: ``memory`` (K
          evaluated once into memory; no store writes, checksums or reads);
        * K (upper-triangular blocks) does not fit in 90 % of the free disk
          space at the store: ``recompute``;
        * ``dense`` reads K once: ``store`` (one build, reusable by a refit);
        * K up to ``SMALL_GRAM_BYTES`` (1 GiB): ``store``, without measuring
          (cached reads; and the same data always gets the same mode, so
          repeated fits agree bit for bit -- the two modes differ by rounding);
        * else the measured cost of one kernel block, one block write, one
          block read and one block product on this machine (``dkpca.plan``'s
          measurement of the first rows of X), times the threads, against
          what the store's filesystem takes from all of them at once (its
          write and read bandwidth, measured) gives the time of a stored fit
          (build + (P - 1) passes: the first product is fused into the build)
          and of a matrix-free one (P passes, the first fused with the
          centering pass); the cheaper wins (with ``solver="auto"``, of
          both solvers: :mod:`dkpca.planning.modes`).  P is estimated from the
          spectrum of a 1000-point subsample (``dkpca.plan``) for subspace
          iteration and converted for block Lanczos (:func:`lanczos_passes`).

    Parameters
    ----------
    n, k : int
        Samples and components.
    solver : str
        ``auto`` or a solver name (kept).
    gram : str
        ``auto``, ``store`` or ``recompute`` (kept unless ``auto``).
    X : dask array of shape (n, d), optional
        Row-chunked (chunk = ``block``) data; needed for measurements.
    kernel : Kernel, optional
        Resolved kernel; needed for measurements.
    dtype, block, store
        Gram precision, block edge and store path (where free space is checked).
    tol, max_passes
        Solver settings (for the pass estimate); ``max_passes`` None: not given (:data:`DEFAULT_MAX_PASSES`), where
        given no solver is picked that cannot keep it (ARPACK on K in memory).
    free_bytes, memory_bytes : int, optional
        Free disk at the store and memory of this process' machine (default:
        measured with ``shutil.disk_usage`` / ``psutil``); tests pass them.
    measured : dict, optional
        Per-block seconds (``kernel_block``, ``write_block``, ``read_block``,
        ``product_block``) and ``passes`` instead of measuring.
    workers : int, optional
        Concurrent block tasks (default: the active client's threads, else CPUs).
    temporary : bool, default=False
        The store is a temporary directory (in-memory input without ``store=``).
    stored_dtype : str, optional
        The precision of the K the store already holds and a refit would reuse
        (``GramStore.recorded_dtype``); ``auto`` keeps a float64 one.
    precision : Precision, optional
        The precision already chosen for this fit (an update's, measured on the same sample): taken, not
        measured again -- but where the solver picked multiplies a float32 K in float32 (ARPACK in memory).

    Returns
    -------
    Choice
    """
    requested = requested_dtype(dtype)
    kw = dict(X=X, kernel=kernel, block=block, store=store, tol=tol, max_passes=max_passes or DEFAULT_MAX_PASSES,
              free_bytes=free_bytes, memory_bytes=memory_bytes, measured=measured, workers=workers,
              temporary=temporary, fraction=fraction, budget=max_passes is not None)
    choice = _choose_modes(n, k, solver, gram, dtype="float64" if requested == "float64" else "float32", **kw)
    single = Solver.parse(choice.solver).spec.float32_products
    if precision is None or single:  # (one measured without single-precision products answers another question)
        precision = choose_precision(requested, X, kernel, k, stored=stored_dtype, tol=tol, single_products=single)
    if precision.dtype != np.dtype(choice.details["dtype"]).name:  # again in K's precision: its blocks timed again,
        if measured is None and "measured" in choice.details:  # the spectrum's passes kept
            kw["measured"] = {"passes": choice.details["measured"]["passes"]}
        note = choice.details.get("passes_note")
        choice = _choose_modes(n, k, solver, gram, dtype=precision.dtype, **kw)
        if note is not None:
            choice.details.setdefault("passes_note", note)
    choice.precision = precision
    return choice


def _choose_modes(n: int, k: int, solver: str, gram: str, *, X, kernel, dtype: Any, block: int | None,
                  store: str | None, tol: float, max_passes: int, free_bytes: int | None, memory_bytes: int | None,
                  measured: dict[str, float] | None, workers: int | None, temporary: bool,
                  fraction: bool, budget: bool) -> Choice:
    """:func:`choose`'s solver rule, then its Gram rule, for K in ``dtype`` (float32 or float64)."""
    details: dict[str, Any] = {"dtype": np.dtype(dtype).name}
    if memory_bytes is None and (solver in ("auto", "arpack") or gram in ("auto", "memory")):
        memory_bytes = memory_available()
    kdtype = np.dtype(dtype)  # K's precision, in memory as in a store
    k_memory = kdtype.itemsize * n * n  # K held whole in memory
    if gram == "memory" or solver == "arpack":
        if not memory_gram_fits(k_memory, memory_bytes, budget=None):
            raise ValueError(f"{'solver=arpack' if solver == 'arpack' else 'gram=memory'} needs K in memory: "
                             f"{k_memory / 1e9:.2f} GB in {kdtype.name}, more than a quarter of the "
                             "memory available; use gram='store' (or 'auto') and another solver.")
        gram = "memory" if solver == "arpack" and gram == "auto" else gram
    memory = gram == "memory" or (gram == "auto" and solver != "nystrom" and temporary
                                  and memory_gram_fits(k_memory, memory_bytes))
    name, solver_why = solver_rule(n, k, solver, memory=memory, memory_bytes=memory_bytes, fraction=fraction,
                                   budget=budget)
    if memory_bytes is not None:
        details["memory_bytes"] = memory_bytes
    # solver="auto": where measured rates decide, both iterative solvers are weighed (the Krylov basis fits)
    weighed = ("lanczos", "randomized") if solver == "auto" and name == "lanczos" else (name,)
    # whether the loops are compiled here (on a cluster: a round trip to every worker), asked once for the
    # mode comparison and the exp's rule, and only where an answer can change a decision
    already = compiled_already() if n >= WARM_MIN_N else None
    mode, why, picked = gram_rule(n, k, name, gram, memory=memory, k_memory=k_memory, X=X, kernel=kernel,
                                  dtype=dtype, block=block, store=store, tol=tol, max_passes=max_passes,
                                  free_bytes=free_bytes, measured=measured, workers=workers, details=details,
                                  solvers=weighed, already=already)
    why_measured = details.pop("modes_reason", None)
    if why_measured and len(weighed) > 1:  # both solvers measured: the faster, the reason its figures
        name, solver_why = picked, f"measured: {why_measured}"
    compiled, details["exp"] = use_compiled_exp(n, name, mode, details.get("expected_passes"), workers, already)
    return Choice(name, mode, f"solver={name}: {solver_why}; gram={mode}: {why}", details, compiled,
                  reasons=(solver_why, why))


def solver_rule(n: int, k: int, solver: str, *, memory: bool, memory_bytes: int | None,
                fraction: bool, budget: bool = False) -> tuple[str, str]:
    """``(solver, reason)``: the solver asked for, else (``auto``) the rules of :func:`choose` (``budget``:
    ``max_passes`` given)."""
    if solver != "auto":
        return solver, "solver requested"
    if memory:
        return in_memory_solver(n, k, fraction, budget=budget)
    if n <= DENSE_MAX_N:
        return "dense", f"n={n} <= {DENSE_MAX_N}: a dense eigh is cheaper than iterating"
    if k > n // 4 and 16 * n * n <= 0.5 * memory_bytes:
        return "dense", f"n_components={k} > n/4: most of the spectrum is wanted and K~ fits in memory"
    if 2 * 8 * n * 3 * (krylov := subspace_width("lanczos", n, k)) <= 0.25 * memory_bytes:
        return "lanczos", (f"n={n} > {DENSE_MAX_N}, k={k}: block Lanczos (fewer passes over K than subspace "
                           f"iteration); its Krylov basis fits in memory")
    return "randomized", (f"n={n}, k={k}: a Krylov basis of 3 x {krylov} columns would not fit in a quarter of "
                          f"the {memory_bytes / 1e9:.1f} GB available; subspace iteration needs O(n l)")


def gram_rule(n: int, k: int, name: str, gram: str, *, memory: bool, k_memory: int, X, kernel, dtype: Any,
              block: int | None, store: str | None, tol: float, max_passes: int, free_bytes: int | None,
              measured: dict[str, float] | None, workers: int | None, details: dict[str, Any],
              solvers: tuple[str, ...] = (), already: bool | None = None) -> tuple[str, str, str]:
    """``(mode, reason, solver)``: the Gram mode asked for, else (``auto``) the rules of :func:`choose` for ``name``;
    ``solvers`` are weighed where measured rates decide (``solver``: the one picked, else ``name``);
    ``already``: :func:`~dkpca.planning.compiledexp.compiled_already`'s answer (None: asked where needed)."""
    weigh = len(solvers) > 1 and gram in ("auto", "store", "recompute")
    if gram != "auto" and not weigh:
        return gram, ("ARPACK takes one pass per one-vector product: only with K in memory"
                      if name == "arpack" else "requested"), name
    if name == "nystrom":
        return "recompute", "the Nystroem solver evaluates only n x m kernel slices and never reads K", name
    if memory:
        return "memory", (f"the input is in memory and its store temporary (nothing to reuse or resume), and "
                          f"K ({k_memory / 1e6:.0f} MB in {np.dtype(dtype).name}) fits in memory: evaluated once, "
                          "no store"), name
    ell = iteration_width(n, k)
    blk = min(block or n, n)
    d = int(X.shape[1]) if X is not None else 0
    need = fit_footprint(n, d, blk, dtype, ell, np.dtype(X.dtype).itemsize if X is not None else 8)
    k_bytes = gram_bytes(n, blk, dtype)
    details["gram_bytes"], details["footprint_bytes"] = k_bytes, need
    if free_bytes is None and store is not None:
        free_bytes = storage_free_bytes(str(store))
    details["free_bytes"] = free_bytes
    grams = [gram] if gram != "auto" else ["store", "recompute"]
    if gram == "auto" and free_bytes is not None and need > 0.9 * free_bytes:
        grams = ["recompute"]
        why = (f"a stored fit needs {need / 1e9:.2f} GB on disk but only {free_bytes / 1e9:.2f} GB "
               "is free at the store: kernel blocks are re-evaluated every pass")
        if not weigh:
            return "recompute", why, name
    elif name == "dense" or k_bytes <= SMALL_GRAM_BYTES:
        if gram != "auto":
            return gram, "requested", name
        if name == "dense":
            return "store", "the dense solver reads K once; storing it lets a refit reuse it", name
        return "store", (f"K is small ({k_bytes / 1e6:.0f} MB <= {SMALL_GRAM_BYTES / 1e6:.0f} MB): stored once, "
                         "read from the page cache, reusable by a refit"), name
    else:
        why = ""
    mode, fig, picked = compare_modes(n, k, solvers or (name,), grams, ell, blk, dtype, X, kernel, store, tol,
                                      max_passes, measured, workers, details, already)
    return mode, (why or fig) if gram == "auto" else "requested", picked


def compare_modes(n, k, solvers, grams, ell, blk, dtype, X, kernel, store, tol, max_passes, measured, workers,
                  details, already: bool | None = None) -> tuple[str, str, str]:
    """``(mode, reason, solver)``: the fastest of ``solvers`` x ``grams`` from measured rates and expected passes."""
    if measured is None or "kernel_block" not in measured:  # not measured, or only the passes (another dtype's)
        if X is None or kernel is None:
            return grams[0], "no data to measure a pass on; storing K (the default)", solvers[0]
        measured, note = measure_and_estimate(X, kernel, blk, np.dtype(dtype), ell, store, k=k, tol=tol,
                                              max_passes=max_passes, passes=(measured or {}).get("passes"))
        if note is not None:  # how the passes were estimated: dkpca plan shows this estimate, not another
            details["passes_note"] = note
    if workers is None:
        workers = max(1, n_workers_threads())
    p = int(measured.get("passes", max_passes))
    passes = {"randomized": p, "lanczos": lanczos_passes(p, tol, max_passes)}
    rates = EntryRates.measured(measured, blk)
    # a mode that would compile the loops first carries the compilation: only recompute evaluates enough
    # entries to compile, and in a fresh process that decides a close call (compiledexp.compile_seconds)
    already = compiled_already() if already is None else already
    best, costs = cheapest(n, blk, solvers=list(solvers), grams=list(grams), passes=passes, tol=tol,
                           itemsize=np.dtype(dtype).itemsize, concurrency=workers, rates=rates,
                           compiling=lambda s, g: compile_seconds(n, s, g, passes[s], workers, already))
    mine = {c.gram: c for c in costs if c.solver == best.solver}
    details.update({"measured": {key: float(v) for key, v in measured.items()}, "expected_passes": best.passes,
                    "workers": workers, "bound": best.bound,
                    "seconds_per_pass": {g: c.sweep.seconds for g, c in mine.items()},
                    "build_seconds": mine["store"].build.seconds if "store" in mine else None,
                    "estimated_seconds": {g: c.seconds for g, c in mine.items()},
                    "modes": {c.label: c.seconds for c in costs}})
    details["modes_reason"] = (f"{best.solver} ~{best.passes} passes, {best.seconds:.3g} s estimated, is the fastest "
                               "of " + ", ".join(c.summary for c in costs))
    fig = (f"measured pass {best.sweep.seconds:.3g} s {best.gram}d"
           + (f" (after a {best.build.seconds:.3g} s build)" if best.build is not None else "")
           + f", bound by the {best.bound}, {workers} threads; ~{best.passes} passes: "
           + ", ".join(f"{g} {c.seconds:.3g} s" for g, c in mine.items()))
    return best.gram, fig, best.solver
