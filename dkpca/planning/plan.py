"""Plan a fit before running it: sizes, memory, passes and a measured time estimate.

``dkpca.plan("data.zarr", n_components=20)`` (CLI: ``dkpca plan``) answers
what an HPC user needs to size a job request -- bytes of the Gram store and
free space where it goes, chunk shape, memory per worker task, the expected
number of passes over K and a time estimate -- without computing K.  The
estimate comes from a short measured sample on this machine:

* a few kernel blocks of the real data (first rows of X) are evaluated;
* one block is written to and read back from a scratch array next to the
  store (same filesystem);
* one block product ``K_IJ V`` is timed;
* the passes are estimated from the spectrum of a small random subsample
  (``m`` points): subspace iteration's residuals shrink roughly like
  ``(lambda_{l+1} / lambda_k)^p`` per pass ``p`` (Halko et al. 2011, sec. 9).

Times are scaled to the whole matrix and divided among the concurrent tasks
(workers x threads); they assume the store's filesystem keeps up with all of
them, so treat them as a lower bound on a shared filesystem.
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psutil

from ..cluster import cluster_spec, connected, is_scheduler_address, worker_resources
from ..execution import active_client
from ..kernels import Kernel
from ..linalg import block_bounds
from ..request import make_request
from ..solvers.randomized import block_size
from ..storage import free_bytes, gram_bytes, json_safe
from .auto import choose
from .measure import estimate_passes, measure_blocks

__all__ = ["plan", "Plan", "make_plan", "cluster_resources"]

#: scheduling + zarr open cost per task (measured ~2-4 ms with dask's threaded
#: scheduler on the development machine); dominates for small blocks
_TASK_OVERHEAD = 3e-3


def _fmt_bytes(b: float | None) -> str:
    if b is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024
    return f"{b:.1f} PiB"  # pragma: no cover


def _fmt_seconds(s: float | None) -> str:
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
    warnings: list[str] = field(default_factory=list)
    #: n_components given as a fraction of explained variance: k above is its first round's
    fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    def __str__(self) -> str:
        m = self.measured
        stored = self.gram == "store"
        lines = [
            f"plan: n={self.n_samples}, d={self.n_features}, k={self.n_components}"
            + (f" (n_components={self.fraction}: the first round; k grows until that fraction of the variance "
               "is explained)" if self.fraction is not None else "")
            + f", kernel {self.kernel.get('name', self.kernel)}",
            f"  solver:        {self.solver} ({self.solver_reason})",
            f"  Gram matrix:   {'stored in ' + self.store if stored else 'recomputed every pass (not stored)'}",
            f"  chunk shape:   {self.chunk_shape[0]} x {self.chunk_shape[1]} {self.dtype} "
            f"({_fmt_bytes(self.chunk_bytes)}), {self.n_row_blocks} row blocks, "
            f"{self.n_block_tasks} block tasks (upper triangle)",
        ]
        if stored:
            lines.append(f"  Gram store:    {_fmt_bytes(self.gram_bytes)} on disk "
                         f"(free on that filesystem: {_fmt_bytes(self.free_bytes)})")
        lines += [
            f"  workers:       {self.workers} x {self.threads_per_worker} thread(s)",
            f"  memory:        {_fmt_bytes(self.memory_per_task)} per task, "
            f"{_fmt_bytes(self.memory_per_worker)} per worker (available: "
            f"{_fmt_bytes(self.memory_available_per_worker)}), {_fmt_bytes(self.client_memory)} in the client",
            f"  passes:        ~{self.expected_passes} over K with a subspace of {self.subspace} vectors "
            f"({self.passes_note})",
        ]
        if m:
            lines.append(
                "  measured:      kernel block {kb}, write {w}, read {r}, product {p} (per {e}x{e} block, one "
                "thread)".format(kb=_fmt_seconds(m.get("kernel_block")), w=_fmt_seconds(m.get("write_block")),
                                 r=_fmt_seconds(m.get("read_block")), p=_fmt_seconds(m.get("product_block")),
                                 e=int(m.get("edge", self.block)))
            )
            lines.append(
                f"  estimate:      build {_fmt_seconds(self.build_seconds)}, {_fmt_seconds(self.pass_seconds)} "
                f"per pass, total ~{_fmt_seconds(self.total_seconds)} (assumes the filesystem keeps up)"
            )
        else:
            lines.append("  estimate:      not measured")
        lines += [f"  warning:       {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_html_(self) -> str:  # pragma: no cover - display only
        return "<pre>" + html.escape(str(self)) + "</pre>"


def _client_resources(client: Any) -> dict[str, Any]:
    workers = client.scheduler_info().get("workers", {})
    if not workers:
        return {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    w = next(iter(workers.values()))
    return {"workers": len(workers), "threads_per_worker": w.get("nthreads", 1),
            "memory_per_worker": w.get("memory_limit")}


def cluster_resources(cluster: Any) -> dict[str, Any]:
    """Workers, threads per worker and memory per worker for ``cluster`` (see :func:`plan`)."""
    out: dict[str, Any] = {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    client = cluster if hasattr(cluster, "scheduler_info") else active_client()
    if isinstance(cluster, (str, os.PathLike)) and not os.path.isfile(cluster) and is_scheduler_address(
            os.fspath(cluster)):
        with connected(os.fspath(cluster)) as c:  # a running scheduler: ask it
            out = _client_resources(c)
    elif cluster is not None and client is not cluster:
        out = worker_resources(cluster_spec(cluster))  # from the configuration; nothing is started
    elif client is not None:
        out = _client_resources(client)
    if out["workers"] is None and cluster is None and client is None:
        out = {"workers": 1, "threads_per_worker": os.cpu_count() or 1,
               "memory_per_worker": psutil.virtual_memory().total}
    out["workers"] = out["workers"] or 1
    out["threads_per_worker"] = out["threads_per_worker"] or 1
    return out


def make_plan(X: Any, kernel: Kernel, k: int, block: int, dtype: Any, solver: str, reason: str, gram: str,
              store: str, tol: float = 1e-6, max_passes: int = 60, resources: dict | None = None,
              measure: bool = True, fraction: float | None = None) -> Plan:
    """Plan for a validated dask array ``X`` (row chunks = ``block``) and resolved kernel.

    ``measure=False`` does no work beyond arithmetic on the sizes (the pass
    estimate is then ``max_passes``, except for the dense solver).
    """
    dtype = np.dtype(dtype)
    n, d = X.shape
    nb = len(block_bounds(n, block))
    tasks = nb * (nb + 1) // 2
    ell = block_size(n, k) if solver != "dense" else k
    res = resources if resources is not None else cluster_resources(None)
    conc = res["workers"] * res["threads_per_worker"]
    gbytes = gram_bytes(n, block, dtype) if gram == "store" else 0
    free = free_bytes(store)
    item = dtype.itemsize
    # Per running task: the kernel block and the block read back for a pass
    # (both kept as per-thread scratch), a float64 strip for widening, two row
    # blocks of X, and the two V slices with their products.
    per_task = 2 * block * block * item + 256 * block * 8 + 2 * block * d * 8 + 4 * block * ell * 8
    per_worker = res["threads_per_worker"] * per_task
    client_mem = 6 * n * ell * 8 + 2 * n * 8 + (n * n * 8 * 2 if solver == "dense" else 0)
    warnings = []
    if free is not None and gbytes > free:
        warnings.append(f"the Gram store needs {_fmt_bytes(gbytes)} but only {_fmt_bytes(free)} is free there")
    avail = res.get("memory_per_worker")
    if avail and per_worker > 0.8 * avail:
        warnings.append(f"{_fmt_bytes(per_worker)} per worker is close to or above its memory limit "
                        f"{_fmt_bytes(avail)}; use a smaller chunk_size")
    mp = max_passes or 60
    passes, note = (estimate_passes(X, kernel, k, ell, tol, mp, solver) if measure or solver == "dense"
                    else (mp, f"at most max_passes={mp}; not estimated"))
    p = Plan(
        fraction=fraction,
        n_samples=n, n_features=d, n_components=k, kernel=kernel.to_dict(), solver=solver, solver_reason=reason,
        gram=gram, dtype=dtype.name, block=block, n_row_blocks=nb, n_block_tasks=tasks,
        chunk_shape=(min(block, n), min(block, n)), chunk_bytes=min(block, n) ** 2 * item, gram_bytes=gbytes,
        store=store, free_bytes=free, workers=res["workers"], threads_per_worker=res["threads_per_worker"],
        memory_per_task=per_task, memory_per_worker=per_worker, memory_available_per_worker=avail,
        client_memory=client_mem, subspace=ell, expected_passes=passes, passes_note=note, warnings=warnings,
    )
    if measure:
        m = measure_blocks(X, kernel, block, dtype, ell, store)
        p.measured = m
        # diagonal blocks cost about half; (tasks + nb) / 2 full-block equivalents
        eq = (tasks - nb) + nb / 2
        if gram == "store":
            p.build_seconds = (eq * (m["kernel_block"] + m["write_block"]) + tasks * _TASK_OVERHEAD) / conc
            p.pass_seconds = tasks * (m["read_block"] + m["product_block"] + _TASK_OVERHEAD) / conc
            fused = 1 if solver != "dense" else 0
        else:
            p.build_seconds = 0.0
            p.pass_seconds = (eq * m["kernel_block"] + tasks * (m["product_block"] + _TASK_OVERHEAD)) / conc
            fused = 0
        p.total_seconds = p.build_seconds + max(0, passes - fused) * p.pass_seconds
    return p


def plan(
    source: Any,
    n_components: int | float = 2,
    kernel: Any = "rbf",
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
    gram: str = "auto",
    cluster: Any = None,
    measure: bool = True,
) -> Plan:
    """Describe a fit without computing K (same parameters as :func:`dkpca.fit`).

    Parameters
    ----------
    source, n_components, kernel, gamma, degree, coef0, kernel_params, solver, store, chunk_size, dtype, tol, \
max_passes, gram
        As for :func:`dkpca.fit`.
    cluster : str, dict or distributed.Client, optional
        A back end (``"slurm"``), a cluster file or configuration dict (sizes
        the workers from the Dask configuration without starting them), a
        scheduler address, or a client; default: the active client, else this
        machine's cores.
    measure : bool, default=True
        Time a few kernel blocks, one block write/read and one product, and
        estimate passes from a subsample (a second or so); False gives sizes only.

    Returns
    -------
    Plan
        ``print(plan)`` for the table; attributes for the numbers.
    """
    req = make_request(source, n_components, kernel, gamma, degree, coef0, kernel_params, solver, store, chunk_size,
                       dtype, tol, max_passes, gram=gram, create_store=False)
    # fit would create a temporary directory for in-memory input; a plan creates nothing
    path = req.store.path if req.store is not None else os.path.join(tempfile.gettempdir(), "dkpca-<new>",
                                                                       "store.dkpca.zarr")
    c = choose(req.n, req.n_components, req.solver, req.gram, X=req.X if measure else None, kernel=req.kernel,
               dtype=req.dtype, block=req.block, store=path, tol=req.tol, max_passes=req.max_passes)
    return make_plan(req.X, req.kernel, req.n_components, req.block, req.dtype, c.solver, c.reason, c.gram, path,
                     tol=req.tol, max_passes=req.max_passes, resources=cluster_resources(cluster), measure=measure,
                     fraction=req.fraction)
