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

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["plan", "Plan"]

#: blocks larger than this are measured at this edge and scaled (entries ~ edge^2)
_MAX_MEASURE_EDGE = 4096
#: subsample size for the spectrum estimate (an m x m dense eigh: ~0.2 s)
_SPECTRUM_SAMPLE = 1000
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

    def to_dict(self) -> dict[str, Any]:
        from .store import json_safe

        return json_safe(asdict(self))

    def __str__(self) -> str:
        m = self.measured
        stored = self.gram == "store"
        lines = [
            f"plan: n={self.n_samples}, d={self.n_features}, k={self.n_components}, "
            f"kernel {self.kernel.get('name', self.kernel)}",
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
        import html

        return "<pre>" + html.escape(str(self)) + "</pre>"


def _time(f, repeat: int = 2) -> float:
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _measure(X, kernel, block: int, dtype: np.dtype, ell: int, store: str) -> dict[str, float]:
    """Time one kernel block, one write/read and one product on this machine."""
    import zarr

    from ._compute import compute
    from .operator import _read_block, block_products
    from .store import ChunkWriter, chunk_file

    n = X.shape[0]
    edge = min(block, _MAX_MEASURE_EDGE, n)
    rows = compute(X[: min(n, 2 * edge)], label="")[0]
    XI = np.ascontiguousarray(rows[:edge])
    XJ = np.ascontiguousarray(rows[-edge:]) if rows.shape[0] >= 2 * edge else XI
    out = np.empty((edge, XJ.shape[0]), dtype=dtype)
    t_kernel = _time(lambda: kernel.block(XI, XJ, dtype, out=out))
    V = np.random.default_rng(0).standard_normal((out.shape[1], ell))
    t_prod = _time(lambda: block_products(out, V[: out.shape[0]], V, True))
    # The scratch array goes next to the store (same filesystem) when possible.
    parent = os.path.dirname(os.path.abspath(store)) if "://" not in store else None
    while parent and not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    with tempfile.TemporaryDirectory(prefix=".dkpca-plan-", dir=parent) as tmp:
        # the Gram build's and the operator's own write and read paths, on a K-like array
        path = os.path.join(tmp, "k.zarr")
        z = zarr.open_group(path, mode="w").create_array("gram/K", shape=out.shape, chunks=out.shape,
                                                         dtype=dtype, compressors=None, fill_value=0.0)
        writer, raw_dir = ChunkWriter.of(path, z), chunk_file(z, ())
        t_write = _time(lambda: writer.write((0, 0), out))
        t_read = _time(lambda: _read_block(path, raw_dir, 0, 0, 0, edge, 0, edge, edge, dtype.name))
    scale = (block / edge) ** 2
    return {"edge": edge, "kernel_block": t_kernel * scale, "write_block": t_write * scale,
            "read_block": t_read * scale, "product_block": t_prod * scale}


def _estimate_passes(X, kernel, k: int, ell: int, tol: float, max_passes: int, solver: str,
                     seed: int = 0) -> tuple[int, str]:
    """Passes over K, from the spectrum of a random subsample."""
    import scipy.linalg

    from ._compute import compute

    if solver == "dense":
        return 1, "dense: one read of K, then an in-memory eigh"
    if solver == "nystrom":
        return 1, "Nystrom: one sweep over n x m kernel slices (approximate)"
    n = X.shape[0]
    m = min(n, _SPECTRUM_SAMPLE)
    idx = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
    S = np.asarray(compute(X[idx], label="")[0], dtype=np.float64)
    K = kernel.block(S, None, np.float64)
    K -= K.mean(axis=0)[None, :]
    K -= K.mean(axis=1)[:, None]
    lam = scipy.linalg.eigh(K, eigvals_only=True)[::-1]
    if k >= m or lam[min(k, m) - 1] <= 0:
        return max_passes, f"subsample of {m} points cannot resolve k={k}; at most max_passes={max_passes}"
    gap = lam[ell] / lam[k - 1] if ell < m else 0.0
    # residual_p ~ lambda_k gap^p, relative to lambda_1 -> stop when below tol
    target = tol * lam[0] / lam[k - 1]
    if gap <= 1e-12:
        p = 2
    elif gap >= 1:
        p = max_passes
    else:
        p = int(np.ceil(np.log(target) / np.log(gap))) + 1
    p = int(min(max(p, 2), max_passes))
    note = f"estimated from a {m}-point subsample: lambda_{ell + 1}/lambda_{k} = {gap:.3f}, tol={tol:g}"
    if solver == "lanczos":
        from .solvers import _lanczos_passes

        p, note = _lanczos_passes(p, tol, max_passes), note + ", block Lanczos"
    return p, note


def _resources(cluster: Any) -> dict[str, Any]:
    from ._compute import active_client
    from .cluster import load_config, validate_config, worker_resources

    out: dict[str, Any] = {"workers": None, "threads_per_worker": None, "memory_per_worker": None}
    client = cluster if hasattr(cluster, "scheduler_info") else active_client()
    owned = None
    if isinstance(cluster, (str, os.PathLike)):
        from .cluster import _looks_like_address, connect

        s = os.fspath(cluster)
        if not os.path.isfile(s) and _looks_like_address(s):
            client = owned = connect(s)  # a running scheduler: ask it
        else:
            out = worker_resources(load_config(s))
    elif isinstance(cluster, dict):
        out = worker_resources(validate_config(cluster))
    if out["workers"] is None and client is not None:
        workers = client.scheduler_info().get("workers", {})
        if workers:
            w = next(iter(workers.values()))
            out = {"workers": len(workers), "threads_per_worker": w.get("nthreads", 1),
                   "memory_per_worker": w.get("memory_limit")}
    if owned is not None:
        owned.close()
    if out["workers"] is None and cluster is None and client is None:
        import psutil

        out = {"workers": 1, "threads_per_worker": os.cpu_count() or 1,
               "memory_per_worker": psutil.virtual_memory().total}
    out["workers"] = out["workers"] or 1
    out["threads_per_worker"] = out["threads_per_worker"] or 1
    return out


def make_plan(X, kernel, k: int, block: int, dtype: Any, solver: str, reason: str, gram: str, store: str,
              tol: float = 1e-6, max_passes: int = 60, resources: dict | None = None,
              measure: bool = True) -> Plan:
    """Plan for a validated dask array ``X`` (row chunks = ``block``) and resolved kernel."""
    from .gram import block_bounds, gram_bytes
    from .solvers.randomized import block_size

    dtype = np.dtype(dtype)
    n, d = X.shape
    nb = len(block_bounds(n, block))
    tasks = nb * (nb + 1) // 2
    ell = block_size(n, k) if solver != "dense" else k
    res = resources or _resources(None)
    conc = res["workers"] * res["threads_per_worker"]
    gbytes = gram_bytes(n, block, dtype) if gram == "store" else 0
    free = None
    if "://" not in store:
        probe = os.path.abspath(store)
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        free = shutil.disk_usage(probe).free
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
    passes, note = (_estimate_passes(X, kernel, k, ell, tol, mp, solver) if measure or solver == "dense"
                    else (mp, f"at most max_passes={mp}; not estimated"))
    p = Plan(
        n_samples=n, n_features=d, n_components=k, kernel=kernel.to_dict(), solver=solver, solver_reason=reason,
        gram=gram, dtype=dtype.name, block=block, n_row_blocks=nb, n_block_tasks=tasks,
        chunk_shape=(min(block, n), min(block, n)), chunk_bytes=min(block, n) ** 2 * item, gram_bytes=gbytes,
        store=store, free_bytes=free, workers=res["workers"], threads_per_worker=res["threads_per_worker"],
        memory_per_task=per_task, memory_per_worker=per_worker, memory_available_per_worker=avail,
        client_memory=client_mem, subspace=ell, expected_passes=passes, passes_note=note, warnings=warnings,
    )
    if measure:
        m = _measure(X, kernel, block, dtype, ell, store)
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
    n_components: int = 2,
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
        Cluster config file (sizes the workers without starting them), or a
        client; default: the active client, else this machine's cores.
    measure : bool, default=True
        Time a few kernel blocks, one block write/read and one product, and
        estimate passes from a subsample (a second or so); False gives sizes only.

    Returns
    -------
    Plan
        ``print(plan)`` for the table; attributes for the numbers.
    """
    from . import solvers
    from .io import as_dask, check_n_components, default_block_size, open_input
    from .kernels import make_kernel
    from .pipeline import _check_params, default_store_path

    dt = _check_params(solver, dtype, tol, max_passes, chunk_size, gram)
    kern = make_kernel(kernel, gamma=gamma, degree=degree, coef0=coef0, kernel_params=kernel_params)
    X = as_dask(open_input(source), block_rows=None)
    n, d = X.shape
    k = check_n_components(n_components, n)
    block = min(int(chunk_size) if chunk_size else default_block_size(n), n)
    X = X.rechunk((block, d))
    kern = kern.resolve(d)
    if store is not None:
        path = os.fspath(store)
    elif isinstance(source, (str, os.PathLike)):
        path = default_store_path(source)
    else:  # fit would create a temporary directory here; plan creates nothing
        path = os.path.join(tempfile.gettempdir(), "dkpca-<new>", "store.dkpca.zarr")
    mp = max_passes or 60
    if hasattr(solvers, "choose"):  # the same resolution of "auto" as fit
        c = solvers.choose(n, k, solver, gram, X=X if measure else None, kernel=kern, dtype=dt, block=block,
                           store=path, tol=tol, max_passes=mp)
        solver_name, gram, reason = c.solver, c.gram, c.reason
    else:  # pragma: no cover - older solver registry
        solver_name, reason = solvers.choose_solver(n, k, solver)
    return make_plan(X, kern, k, block, dt, solver_name, reason, gram, path, tol=tol, max_passes=mp,
                     resources=_resources(cluster), measure=measure)
