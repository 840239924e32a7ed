"""Store or recompute K, block Lanczos or subspace iteration: each pair's fit time from measured rates.

A fit's time is its passes times the cost of a pass, plus the build where K
is stored.  Per pass (:func:`~dkpca.planning.estimate.estimate`, the plan's
own cost model), the larger of

* the cores: entries x one thread's seconds per entry (evaluate and multiply,
  or read and multiply) / the tasks that run at once, and
* the filesystem: K's bytes at what it takes from all of them at once (the
  measured ``write_bandwidth`` for the build, ``read_bandwidth`` for a pass),

so the rule weighs the evaluation rate times the threads against K's write and
read bandwidth. The solvers differ in passes (block Lanczos needs fewer: a
Krylov space, :func:`~dkpca.planning.measure.lanczos_passes`) and in their cost
(subspace iteration's early passes multiply in single precision,
:func:`single_passes`; block Lanczos's last ones, :func:`relaxed_passes`).
Measured (issue 40): on a lent 16-core machine at n = 100,000, with the build's
blocks formed without the GIL, the stored K (20.8 GB, past the page cache's
dirty threshold of 13.4 GB) took its tasks 3.9 s and the device 4.4 s more, and
recomputing with block Lanczos was 1.2-1.3x faster than storing (10.65 / 11.93
s against 13.77 / 14.63 s); at 40,000 (K 3.5 GB) the two were within 5 %; on
the 2-core development machine at n = 40,000 storing and recomputing with block
Lanczos were within 2 % and subspace iteration 1.4x slower.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..linalg import PassCost
from ..solvers import Solver
from ..solvers.randomized import single_switch
from ..solvers.relaxed import relaxes
from .estimate import PASS_SECONDS, EntryRates, estimate

__all__ = ["ModeCost", "mode_cost", "cheapest", "single_passes", "relaxed_passes"]


def single_passes(passes: int, tol: float) -> int:
    """How many of subspace iteration's ``passes`` multiply in single precision.

    Its residual falls geometrically from about 1 to ``tol`` over the passes,
    and the products are single while it is above :func:`~dkpca.solvers.randomized.single_switch`:
    that share of the passes, the log of the one over the log of the other.
    """
    switch = single_switch(tol)
    if not 0 < tol < 1 or switch >= 1:
        return 0
    return int(min(passes, np.floor(passes * np.log(switch) / np.log(tol))))


#: the bound on a float32 product's error with a solver panel, relative to lambda_1, that block Lanczos works
#: under (``operator.single_error`` times sqrt(width)): 3.1e-5 at n = 24,000 (rbf, d = 50, block 4,000, width 20)
TYPICAL_SINGLE_ERROR = 3.1e-5


def relaxed_passes(passes: int, tol: float, single_error: float = TYPICAL_SINGLE_ERROR) -> int:
    """How many of block Lanczos's last ``passes`` multiply in single precision: the solver's own rule
    (:func:`~dkpca.solvers.relaxed.relaxes`) on a modelled residual history.

    The residual stays about 1 after the first pass (the start block's), then falls geometrically to ``tol``
    (``r_i = tol^((i - 1)/(p - 1))`` after pass i).  Measured at n = 24,000 (tol 1e-6): a fresh fit's 4
    passes ended at residuals 0.1, 1.6e-3, 2.6e-5, 2.5e-7 (the last single), a grown fit's 3 at 4.5e-3,
    6.1e-5, 9.9e-7 (the last).
    """
    if not 0 < tol < 1:
        return 0
    history = [tol ** ((i - 1) / max(1, passes - 1)) for i in range(1, passes + 1)]  # after passes 1 .. p
    return sum(relaxes(history[:i - 1], single_error, tol) for i in range(2, passes + 1))


@dataclass(frozen=True)
class ModeCost:
    """One (solver, Gram mode) pair's estimated fit time and its parts."""

    solver: str
    gram: str
    passes: int
    single: int
    build: PassCost | None
    sweep: PassCost
    seconds: float
    #: seconds of it spent compiling (numba) before the first block
    compiling: float = 0.0

    @property
    def bound(self) -> str:
        """``"disk"`` where the filesystem binds the build (stored) or a pass, else ``"cores"``."""
        parts = [self.sweep] + ([self.build] if self.build is not None else [])
        return "disk" if any(p.bound == "filesystem" for p in parts) else "cores"

    @property
    def label(self) -> str:
        return f"{self.gram}+{self.solver}"

    @property
    def summary(self) -> str:
        """The pair, its estimate and passes (and compilation), as the plan's reason lists them."""
        compiling = f", {self.compiling:.2g} s compiling" if self.compiling else ""
        return f"{self.label} {self.seconds:.3g} s ({self.passes} passes{compiling})"


def mode_cost(n: int, block: int, *, solver: str, gram: str, passes: int, tol: float, itemsize: int,
              concurrency: int, rates: EntryRates, single_ok: bool = True, compiling: float = 0.0) -> ModeCost:
    """The fit time of ``solver`` with K ``gram`` (``store`` or ``recompute``) over ``passes`` passes.

    Stored: the build (evaluate and write every block, the first product fused
    into it) and ``passes - 1`` passes that read K; recomputed: ``passes``
    passes that evaluate it (the first fused with the centring statistics).
    ``single_ok``: subspace iteration's early products and block Lanczos's late ones may be single (K in
    float32).
    Each pass adds :data:`~dkpca.planning.estimate.PASS_SECONDS` (graph, round trip, the algebra between);
    ``compiling``: the seconds this mode spends compiling first (:func:`~dkpca.planning.compiledexp.compile_seconds`).
    """
    spec = Solver.parse(solver).spec
    single = single_passes(passes, tol) if single_ok and spec.float32_early_passes else 0
    late = relaxed_passes(passes, tol) if single_ok and spec.float32_late_passes else 0
    kw = dict(gram=gram, itemsize=itemsize, concurrency=concurrency, rates=rates, task_seconds=0.0,
              distributed=False)
    build, double = estimate(n, block, **kw)
    fast = estimate(n, block, single=True, **kw)[1]
    sweeps = [fast] * single + [double] * (passes - single - late) + [fast] * late
    if build is not None:
        first = sweeps.pop(0)
        # the fused first product runs in the build's tasks, while the blocks are in cache: no read
        entry = rates.pass_entry(gram, single > 0)
        fused = first.compute * (entry - rates.read) / entry if entry > 0 else 0.0
        build = PassCost(build.block, build.tasks, build.compute + fused, build.io, build.scheduler)
    seconds = ((build.seconds if build is not None else 0.0) + sum(s.seconds for s in sweeps) + passes * PASS_SECONDS
               + compiling)
    return ModeCost(solver, gram, passes, single + late, build, double, seconds, compiling)


def cheapest(n: int, block: int, *, solvers: list[str], grams: list[str], passes: dict[str, int], tol: float,
             itemsize: int, concurrency: int, rates: EntryRates,
             compiling: Callable[[str, str], float] | None = None) -> tuple[ModeCost, list[ModeCost]]:
    """The fastest (solver, Gram mode) pair among ``solvers`` x ``grams``, and every pair's cost.

    ``passes``: each solver's expected passes over K; ``compiling(solver, gram)``: the seconds that pair
    spends compiling (none by default).  A tie goes to the earlier pair (solvers, then modes, in the order
    given).
    """
    costs = [mode_cost(n, block, solver=s, gram=g, passes=int(passes[s]), tol=tol, itemsize=itemsize,
                       concurrency=concurrency, rates=rates, single_ok=itemsize == 4,
                       compiling=compiling(s, g) if compiling is not None else 0.0)
             for s in solvers for g in grams]
    return min(costs, key=lambda c: c.seconds), costs
