"""The printable plan: what a fit will do and need (:class:`Plan`), and how its sizes and times are written.

:func:`dkpca.planning.plan` fills it (:mod:`dkpca.planning.plan`); ``str(plan)`` is the table ``dkpca plan`` prints.
"""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from ..grammode import NO_GRAM
from ..storage import json_safe
from .decision import FitPlan
from .estimate import LOCAL_SECONDS_PER_TASK, SCHEDULER_SECONDS_PER_TASK
from .measure import rates_line

__all__ = ["Plan", "fmt_bytes", "fmt_seconds"]


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024


def fmt_seconds(s: float | None) -> str:
    if s is None or not np.isfinite(s):
        return "unknown"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


@dataclass
class Plan:
    """What a fit will do and need; ``str(plan)`` is the printable table.

    Sizes are bytes, times seconds; ``None`` where unknown (not measured).
    """

    n_samples: int
    n_features: int
    n_components: int
    kernel: dict
    solver: str
    solver_reason: str
    gram: str
    dtype: str
    block: int
    n_row_blocks: int
    n_block_tasks: int
    chunk_shape: tuple[int, int]
    chunk_bytes: int
    gram_bytes: int
    store: str
    free_bytes: int | None
    workers: int
    threads_per_worker: int
    memory_per_task: int
    memory_per_worker: int
    memory_available_per_worker: int | None
    client_memory: int
    subspace: int
    expected_passes: int
    passes_note: str
    measured: dict[str, float] = field(default_factory=dict)
    build_seconds: float | None = None
    pass_seconds: float | None = None
    total_seconds: float | None = None
    #: the dense solver's eigh (measured on a small matrix, scaled by n^3); None for iterative solvers
    solve_seconds: float | None = None
    warnings: list[str] = field(default_factory=list)
    #: n_components given as a fraction of explained variance: k above is its first round's
    fraction: float | None = None
    #: how the block edge was set (the default, chunk_size, or chosen for the cluster)
    block_reason: str = ""
    #: tasks in one pass's graph, the scheduler's seconds for them and its share of a pass (0..1)
    tasks_per_pass: int = 0
    scheduler_seconds: float = 0.0
    scheduling_share: float = 0.0
    #: where the per-entry times behind the share come from: "measured" or "documented" (not measured)
    rates_source: str = "documented"
    #: the assumed aggregate filesystem bandwidth (bytes/s); None: the filesystem is assumed to keep up
    fs_bandwidth: float | None = None
    #: "compute" or "filesystem": what bounds a pass and the build
    pass_bound: str = "compute"
    build_bound: str | None = None
    #: seconds a pass's bytes of K take at ``fs_bandwidth`` (0: not bounded or not stored)
    filesystem_seconds: float = 0.0
    #: planned for a distributed cluster (False: this machine's threads, no block choice or warning)
    distributed: bool = False
    #: the precision K is held in and why (``Precision.to_dict()``; None: not decided here)
    precision: dict | None = None
    #: the typed decisions ``dkpca.fit`` with the same parameters runs (None: not decided here)
    decision: FitPlan | None = field(default=None, repr=False, compare=False)
    update: str = ""  #: a fit would update the store's fit of fewer rows: what it computes and reuses
    #: the share of K's entries the store holds already, which the fit reuses (the build's time and bytes are the rest)
    reused: float = 0.0
    reuse: str = ""  #: what of the store's K a fit of the same data would reuse, in words ("": nothing)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, decision=None))
        out["decision"] = self.decision.to_dict() if self.decision is not None else None
        return json_safe(out)

    def __str__(self) -> str:
        m = self.measured
        stored = self.gram == "store"
        k_at = {"store": f"stored in {self.store}", "memory": f"held in memory ({self.dtype}), no store",
                NO_GRAM: "not formed (n x m kernel slices only)"}.get(self.gram, "recomputed every pass (not stored)")
        lines = [
            f"plan: n={self.n_samples}, d={self.n_features}, k={self.n_components}"
            + (f" (n_components={self.fraction}: the first round; k grows until that fraction of the variance "
               "is explained)" if self.fraction is not None else "")
            + f", kernel {self.kernel.get('name', self.kernel)}",
            f"  solver:        {self.solver} ({self.solver_reason})",
            f"  Gram matrix:   {k_at}",
        ]
        lines += [f"  chunk shape:   {self.chunk_shape[0]} x {self.chunk_shape[1]} {self.dtype} "
                  f"({fmt_bytes(self.chunk_bytes)}), {self.n_row_blocks} row blocks, "
                  f"{self.n_block_tasks} block tasks (upper triangle)"] * (self.gram != NO_GRAM)
        if self.precision is not None:
            lines.append(f"  precision:     {self.precision['dtype']} ({self.precision['reason']})")
        if self.block_reason:
            lines.append(f"  block:         {self.block_reason}")
        rate = "the measured blocks" if self.rates_source == "measured" else "the documented rate, not measured"
        where, per_task = (("the distributed scheduler", SCHEDULER_SECONDS_PER_TASK) if self.distributed else
                           ("dask's threaded scheduler", LOCAL_SECONDS_PER_TASK))
        lines.append(f"  scheduling:    ~{self.tasks_per_pass} tasks per pass, ~{fmt_seconds(self.scheduler_seconds)} "
                     f"of {where} = {100 * self.scheduling_share:.1f} % of a pass (at {per_task * 1e3:.2g} ms per "
                     f"task, measured by benchmarks/scheduler.py; the pass from {rate})")
        if stored:
            new = ("" if not self.reused else "none of it new; " if self.reused >= 1 else
                   f"{fmt_bytes(self.gram_bytes * (1 - self.reused))} of it new; ")
            lines.append(f"  Gram store:    {fmt_bytes(self.gram_bytes)} on disk "
                         f"({new}free on that filesystem: {fmt_bytes(self.free_bytes)})")
        lines += [
            f"  workers:       {self.workers} x {self.threads_per_worker} thread(s)",
            f"  memory:        {fmt_bytes(self.memory_per_task)} per task, "
            f"{fmt_bytes(self.memory_per_worker)} per worker (available: "
            f"{fmt_bytes(self.memory_available_per_worker)}), {fmt_bytes(self.client_memory)} in the client",
            f"  passes:        ~{self.expected_passes} over K with a subspace of {self.subspace} vectors "
            f"({self.passes_note})",
        ]
        if m:
            lines.append("  measured:      kernel block {}, write {}, read {}, product {} (per {b}x{b} block, one "
                         "thread; timed at {e}x{e})".format(*(fmt_seconds(m.get(f"{key}_block")) for key in (
                             "kernel", "write", "read", "product")), b=self.block, e=int(m.get("edge", self.block))))
            build = (f"build {fmt_seconds(self.build_seconds)} (bound by {self._bound(self.build_bound)}), "
                     if stored else "")
            lines.append(f"  estimate:      {build}{fmt_seconds(self.pass_seconds)} per pass (bound by "
                         f"{self._bound(self.pass_bound)}), "
                         + (f"dense eigh {fmt_seconds(self.solve_seconds)}, " if self.solve_seconds is not None
                            else "") + f"total ~{fmt_seconds(self.total_seconds)}")
            lines.append(rates_line(m, self))
        else:
            lines.append("  estimate:      not measured" + (f"; a pass is bound by {self._bound(self.pass_bound)}"
                                                            if self.fs_bandwidth else ""))
        lines.append("  filesystem:    " + (
            f"an assumed {self.fs_bandwidth / 1e9:.3g} GB/s aggregate (an assumption, not measured): K's bytes take "
            f"{fmt_seconds(self.filesystem_seconds)} per pass" if self.fs_bandwidth else
            "assumed to keep up (no fs_bandwidth given)"))
        lines += [f"  update:        {self.update}"] * bool(self.update)
        lines += [f"  reuse:         {self.reuse}"] * bool(self.reuse)
        lines += [f"  warning:       {w}" for w in self.warnings]
        return "\n".join(lines)

    @staticmethod
    def _bound(bound: str | None) -> str:
        return "the filesystem" if bound == "filesystem" else "compute"

    def _repr_html_(self) -> str:  # pragma: no cover - display only
        return "<pre>" + html.escape(str(self)) + "</pre>"

