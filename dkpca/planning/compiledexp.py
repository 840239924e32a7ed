"""Whether a fit evaluates its kernel with the compiled exp (:mod:`dkpca.kernels.fastexp`), and why."""

from __future__ import annotations

from ..execution import active_client, config_switch, n_workers_threads
from ..kernels import fastexp

__all__ = ["use_compiled_exp", "compiled_already", "compile_seconds", "COMPILED_EXP_MIN_ENTRIES", "COMPILE_SECONDS",
           "ASSUMED_PASSES", "WARM_MIN_N"]

#: kernel entries per thread from which a fit evaluates exp-based kernels with the compiled exp
#: (``Kernel.compiled``, :mod:`dkpca.kernels.fastexp`).  Measured on the 2-core AMD EPYC (znver1),
#: 4000 x 4000 rbf blocks, d = 50, one thread, numpy vs compiled interleaved: float32 8.06-8.11 ->
#: 5.94-5.95 ns an entry off the diagonal (5.38-5.43 -> 4.26-4.37 on it), float64 19.7-20.2 -> 16.8-16.9;
#: numba's import and the first compilation cost 1.7 s once per process.  At 2.1 ns saved an entry,
#: 1.5e9 entries a thread save 3.2 s: twice the compilation, a margin for CPUs whose numpy exp is faster
#: (AVX-512), where the saving is smaller.  The products' and the build's loops compiled with it (fastexp)
#: bring the compilation to :data:`COMPILE_SECONDS` and save more on many threads, where numpy's strip
#: loops wait for the GIL: measured on a 16-core Xeon (issue 40), n = 100,000 recomputed, 16 threads,
#: 1.9e9 entries a thread: 22.5 s -> 11.5 s after compilation; n = 40,000 (2e8 a thread): 4.3 s -> 2.8 s,
#: less than it costs.
COMPILED_EXP_MIN_ENTRIES = 1.5e9

#: seconds a process pays once to compile the loops (numba's import, the exp, the products' and the build's
#: loops in one precision): 4.4 and 5.8 s in two fresh processes on the 2-core AMD EPYC
#: (``benchmarks/scaling.warm_compiled``, 2026-11-27), 4.4 s more in a 40,000-point recomputed fit's first pass
#: than in its next.  A mode that would compile carries it in the plan's comparison (:func:`compile_seconds`).
COMPILE_SECONDS = 4.4

#: points from which a process that compiled already uses the compiled code whatever the count (a smaller
#: fit gains milliseconds, and keeps numpy's exp, whatever ran before it in the process)
WARM_MIN_N = 20_000

#: passes assumed for a matrix-free fit whose passes were not estimated (the fewest measured: 4)
ASSUMED_PASSES = 4


def compiled_already() -> bool:
    """Whether the compiled loops are built where the fit's blocks run: this process, or every worker."""
    client = active_client()
    if client is None:
        return fastexp.ready()
    try:
        answers = client.run(fastexp.ready)
    except Exception:  # a worker that cannot answer has not compiled, as far as a plan can tell
        return False
    return bool(answers) and all(answers.values())


def use_compiled_exp(n: int, solver: str, gram: str, passes: int | None = None,
                     threads: int | None = None, already: bool | None = None) -> tuple[bool, str]:
    """``(compile, reason)``: whether the fit's kernel blocks are worth numba's one-off compilation.

    Counts the entries the fit evaluates -- the upper triangle of K once for
    a stored K, once a pass matrix-free (``passes``, default
    :data:`ASSUMED_PASSES`), none where K is in memory or only Nystroem
    slices are evaluated -- per thread (``threads``: the cluster's, else this
    machine's), against :data:`COMPILED_EXP_MIN_ENTRIES`.  Dask config
    ``dkpca.compiled-exp`` (``true`` / ``false``, default ``auto``) overrides
    the count, e.g. to keep numba out of a job whose environment breaks it.
    ``already``: :func:`compiled_already`'s answer where the caller has it (default: asked).
    """
    forced = config_switch("dkpca.compiled-exp")
    if gram == "memory" or solver == "nystrom":
        return False, "kernel entries are evaluated once in memory or as Nystroem slices only: numpy's exp"
    if forced is not None:
        return forced, ("dask config dkpca.compiled-exp=true: exp compiled (numba) where the kernel has one"
                        if forced else "dask config dkpca.compiled-exp=false: numpy's exp")
    if n >= WARM_MIN_N and (compiled_already() if already is None else already):
        # a process (or every worker) that has compiled in an earlier fit, a notebook's second: nothing to pay
        return True, "exp and products compiled already (numba), here or on every worker: no compilation to pay"
    entries = n * (n + 1) / 2 * (1 if gram == "store" else (passes or ASSUMED_PASSES))
    threads = threads or max(1, n_workers_threads())
    per_thread = entries / threads
    if per_thread < COMPILED_EXP_MIN_ENTRIES:
        return False, (f"{per_thread / 1e9:.2g} G kernel entries a thread (< {COMPILED_EXP_MIN_ENTRIES / 1e9:g} G): "
                       "numpy's exp, no compilation")
    return True, (f"{per_thread / 1e9:.2g} G kernel entries a thread: exp and products compiled (numba, "
                  f"~{COMPILE_SECONDS:g} s once per process) where the kernel has one")


def compile_seconds(n: int, solver: str, gram: str, passes: int | None, threads: int | None,
                    already: bool) -> float:
    """Seconds of compilation a fit in this mode pays: :data:`COMPILE_SECONDS` where :func:`use_compiled_exp`
    compiles and nothing is compiled yet (``already``: :func:`compiled_already`), else 0.

    Why: the plan weighs store against recompute by their passes, and only recompute evaluates enough
    entries to compile; on the 2-core machine at n = 40,000 the two were estimated within 3 % of each other,
    and a recomputed fit that compiled took 15.3 s against a stored one's 11.4-12.2 s.
    """
    if already:
        return 0.0
    return COMPILE_SECONDS if use_compiled_exp(n, solver, gram, passes, threads, already=False)[0] else 0.0
