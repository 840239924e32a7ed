"""Where a fit's time goes, stage by stage, in tasks and in the client; Amdahl's projection to more cores.

    python benchmarks/scaling.py [--n 40000] [--threads 1 2] [--rounds 3] [--solver auto] [--gram auto]
    python benchmarks/scaling.py --n 2000 --rounds 1 --no-write        # a quick check of the accounting

Each fit runs in its own process (this script with ``--child``), after an
untimed warm-up: memory touched and freed (``_common.start_timing``), a small
fit of the first rows (imports, thread pools, BLAS and the compiled exp made
ready), then the timed fit of the Zarr path with dask's local scheduler on
``--threads`` threads.  The child accounts every stage of the fit -- the
scan (validation and fingerprint), the data copy, the start block, the Gram
build, each pass, the solver's algebra between passes, the spectrum policy and
the model write -- by wrapping the functions ``dkpca.pipeline`` calls, and every
task by running the local scheduler on a pool that times each task (dask's
``pool`` setting, which ``dkpca.execution.compute`` honours).  Per stage:

* wall: the stage's time;
* in tasks: the time at least one task ran (the union of the tasks' intervals),
  and the tasks' CPU (their threads' CPU time while they ran);
* in the client: the rest of the wall (nothing ran in a task), and the
  client thread's CPU (graph building, scheduling, the solver's algebra).

With ``--workers`` a LocalCluster of single-thread workers runs the same
fit; its tasks' intervals come from the scheduler's task stream (their time,
not their CPU), and per stage the table adds the busiest worker's time in
its tasks against the mean worker's: a share that finishes last shows there.

CPU figures are what other processes on a shared machine disturb least.
Amdahl: at one thread a stage's client time S is serial and its task time P
parallel, so on p cores it takes ``S + P / p`` at best; the serial fraction is
``S / (S + P)``, from wall times and, separately, from CPU times.  The
measured two-thread time is shown next to the one-thread projection to two,
with the Karp-Flatt serial fraction it implies.  ``--write-bandwidth`` (what
``benchmarks/ceiling.py`` measures for the disk) bounds a projected Gram build
below by K's bytes over it.  Results go to the "scaling" section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import bench_workdir, clustered, machine, run_child, start_timing, warm_bytes, write_inputs
from _results import update_section

#: the cores the projection is made for
PROJECT_CORES = (16, 64)


class Clock:
    """Stage intervals (wall, client-thread CPU, process CPU) and every task's interval and CPU."""

    def __init__(self) -> None:
        self.stages: list[dict] = []
        self.tasks: list[tuple[float, float, float]] = []
        self.worker_tasks: list[tuple[float, float, str]] = []
        self.lock = threading.Lock()
        self.depth = 0

    @contextlib.contextmanager
    def stage(self, name: str):
        if self.depth:  # a stage inside a stage (a pass inside the build's probe) counts in the outer one
            yield
            return
        self.depth += 1
        w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            yield
        finally:
            self.depth -= 1
            self.stages.append({"stage": name, "t0": w0, "t1": time.perf_counter(),
                                "client_cpu": time.thread_time() - c0, "process_cpu": time.process_time() - p0})

    def timed(self, fn):
        """``fn`` as a task that records its interval and its thread's CPU."""
        @functools.wraps(fn)
        def run(*args, **kwargs):
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.tasks.append((w0, time.perf_counter(), time.thread_time() - c0))
        return run

    def account(self) -> list[dict]:
        """Per stage: wall, time in tasks (union of their intervals), task CPU, client wall and CPU, other CPU;
        with a cluster's tasks (:meth:`add_worker_tasks`) also its busiest worker's and the mean worker's time."""
        def within(tasks, t0, t1):
            return sorted((max(a, t0), min(b, t1), c) for a, b, c in tasks if a < t1 and b > t0)

        out = []
        for s in self.stages:
            local, remote = (within(tasks, s["t0"], s["t1"]) for tasks in (self.tasks, self.worker_tasks))
            span, end = 0.0, -np.inf
            for a, b, _ in sorted(local + remote):
                span += max(0.0, b - max(a, end))
                end = max(end, b)
            busy: dict[str, float] = {}  # each worker's time in this stage's tasks
            for a, b, w in remote:
                busy[w] = busy.get(w, 0.0) + b - a
            wall = s["t1"] - s["t0"]
            local_cpu = sum(c for *_, c in local)
            out.append({"stage": s["stage"], "wall": wall, "tasks": span, "task_cpu": local_cpu + sum(busy.values()),
                        "client": wall - span, "client_cpu": s["client_cpu"], "n_tasks": len(local) + len(remote),
                        # this process's CPU besides its client thread and its own tasks (the workers' run elsewhere)
                        "other_cpu": max(0.0, s["process_cpu"] - s["client_cpu"] - local_cpu),
                        "busy": busy, **busy_figures(busy),
                        "durations": [round(b - a, 6) for a, b, _ in sorted(local + remote)]})
        return out

    def add_worker_tasks(self, stream: list[dict], offset: float) -> None:
        """A cluster's task stream (``distributed.get_task_stream``): each compute interval, moved from the
        workers' wall clock by ``offset`` (``time.time() - time.perf_counter()``: one machine's clock)."""
        for task in stream:
            for s in task["startstops"]:
                if s["action"] == "compute":
                    self.worker_tasks.append((s["start"] - offset, s["stop"] - offset, task["worker"]))


def busy_figures(busy: dict[str, float]) -> dict[str, float]:
    """The busiest worker's time in a stage's tasks and the mean over the workers that ran any."""
    times = [t for t in busy.values() if t > 1e-9]
    return {"busiest": max(times, default=0.0), "mean_busy": sum(times) / len(times) if times else 0.0}


class TimedPool:
    """A thread pool for dask's local scheduler whose tasks are timed by a :class:`Clock`."""

    def __init__(self, threads: int, clock: Clock) -> None:
        from dask.threaded import ContextAwareThreadPoolExecutor

        self._pool = ContextAwareThreadPoolExecutor(threads)
        self._max_workers = threads
        self.clock = clock

    def submit(self, fn, /, *args, **kwargs):
        return self._pool.submit(self.clock.timed(fn), *args, **kwargs)


def instrument(clock: Clock) -> None:
    """Wrap what ``dkpca.pipeline`` calls, so each stage is timed (nothing in dkpca changes)."""
    import dkpca.pipeline as pipeline
    from dkpca.model import KPCAModel
    from dkpca.operator import CenteredKernelOperator, MatrixFreeKernelOperator
    from dkpca.storage import FitStore

    def wrap(owner, attr, name):
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def staged(*args, **kwargs):
            label = name(args) if callable(name) else name
            with clock.stage(label):
                return fn(*args, **kwargs)
        setattr(owner, attr, staged)

    wrap(pipeline, "scan", "validate (scan)")
    wrap(FitStore, "store_data", "data copy")
    wrap(pipeline, "initial_block", "start block")
    wrap(pipeline, "build_gram", "Gram build")
    # K recomputed: the operator's construction is the pass of the centring statistics (K 1, fused with the
    # start block's product)
    wrap(MatrixFreeKernelOperator, "__init__", "centring pass (K recomputed)")
    wrap(pipeline, "postprocess", "spectrum policy")
    wrap(KPCAModel, "save", "model write")
    wrap(CenteredKernelOperator, "matmat", lambda args: f"pass {args[0].passes + 1}")
    solve = pipeline.solve

    @functools.wraps(solve)
    def solving(*args, **kwargs):
        before = len(clock.stages)
        t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            return solve(*args, **kwargs)
        finally:
            # the solver's own algebra: its time outside the passes (one stage, its CPU less the passes')
            passes = clock.stages[before:]
            clock.stages.append({"stage": "solver algebra", "t0": t0, "t1": time.perf_counter(), "algebra": True,
                                 "client_cpu": time.thread_time() - c0 - sum(s["client_cpu"] for s in passes),
                                 "process_cpu": time.process_time() - p0 - sum(s["process_cpu"] for s in passes),
                                 "minus": [(s["t0"], s["t1"]) for s in passes]})
    pipeline.solve = solving


def algebra_fix(rows: list[dict], clock: Clock) -> None:
    """The algebra stage's wall and tasks without its passes' (it spans them)."""
    for row, s in zip(rows, clock.stages, strict=True):
        for a, b in s.get("minus", []):
            inner = next(r for r, t in zip(rows, clock.stages, strict=True) if t["t0"] == a and t["t1"] == b)
            for key in ("wall", "tasks", "task_cpu", "client", "n_tasks"):
                row[key] -= inner[key]
            for w, t in inner["busy"].items():  # a worker's time is additive; the busiest is found again
                row["busy"][w] = row["busy"].get(w, 0.0) - t
            row["durations"] = []
        if s.get("minus"):
            row.update(busy_figures(row["busy"]))


def warm_compiled(d: int) -> None:
    """numba's compilations a large fit may make (the compiled exp, the products' and the build's loops), untimed."""
    from dkpca.kernels import make_kernel
    from dkpca.linalg import block_products, formed_block_products, kernel_block_products

    rows = np.random.default_rng(0).standard_normal((128, d)).astype(np.float32)
    V = np.ones((64, 2))
    kernel = make_kernel("rbf").resolve(d).compiled()
    kernel_block_products(kernel, rows[:64], rows[64:], V, V, "float32", False, True)
    block_products(kernel.block(rows[:64], rows[64:], np.float32), V, V, True, True)
    formed_block_products(kernel, rows[:64], rows[64:], "float32", False, np.empty((64, 64), np.float32), V, V)


def child(zpath: str, k: int, threads: int, extra: dict) -> dict:
    import dask
    import zarr

    import dkpca

    X = zarr.open_array(zpath, mode="r")
    clock = Clock()
    pool = TimedPool(threads, clock)
    res: dict = {"threads": threads}
    workers = extra.pop("workers", None)
    if workers:  # a LocalCluster of single-thread workers: its tasks are not timed (the client's CPU is)
        from dkpca.cluster import connected

        where = connected({"dkpca": {"cluster": {"local": {"n_workers": int(workers)}}}})
    else:
        where = dask.config.set(num_workers=threads, pool=pool)
    with where, tempfile.TemporaryDirectory() as tmp:
        # warm-up, untimed: imports, the pool's threads, BLAS, the compiled exp (a large fit's kernel)
        small = np.asarray(X[: min(2000, X.shape[0])])
        dkpca.fit(small, n_components=k, kernel="rbf", store=f"{tmp}/warm", random_state=0, **extra).close()
        if X.shape[0] >= 20_000:  # where a fit may evaluate its kernel with the compiled code (~2.5 s to compile)
            warm_compiled(X.shape[1])
            if workers:
                from distributed import get_client

                get_client().run(warm_compiled, X.shape[1])
        instrument(clock)
        clock.tasks.clear()
        stream = contextlib.nullcontext()
        if workers:  # the workers' tasks, from the scheduler's task stream
            from distributed import get_client, get_task_stream

            stream = get_task_stream(get_client())
        t = start_timing(res)
        c0 = time.thread_time()
        with stream as tasks:
            m = dkpca.fit(zpath, n_components=k, kernel="rbf", store=f"{tmp}/fit", random_state=0, **extra)
        res["fit_s"] = time.perf_counter() - t
        if workers:
            clock.add_worker_tasks(tasks.data, time.time() - time.perf_counter())
        # the rest of the fit: what no stage above covers (plan, lock, checkpoint, report), all in the client
        clock.stages.append({"stage": "rest (plan, lock, report)", "t0": t, "t1": t, "client_cpu": 0.0,
                             "process_cpu": 0.0, "rest": (res["fit_s"], time.thread_time() - c0)})
    rows = clock.account()
    algebra_fix(rows, clock)
    fit_wall, fit_cpu = clock.stages[-1]["rest"]
    rest = rows[-1]
    rest["wall"] = rest["client"] = max(0.0, fit_wall - sum(r["wall"] for r in rows[:-1]))
    rest["client_cpu"] = max(0.0, fit_cpu - sum(r["client_cpu"] for r in rows[:-1]))
    rep = m.report
    res.update({"stages": rows, "timings": rep.get("timings"), "solver": rep.get("solver"),
                "gram": (rep.get("gram") or {}).get("mode"), "block": (rep.get("gram") or {}).get("block"),
                "passes": rep.get("passes_over_K", rep.get("passes")), "dtype": (rep.get("gram") or {}).get("dtype"),
                "eigenvalues": [float(v) for v in m.eigenvalues_]})
    return res


def median_stages(runs: list[dict]) -> dict[str, dict]:
    """Each stage's figures, the median over rounds (stages matched by name)."""
    names: list[str] = []
    for r in runs:
        names += [s["stage"] for s in r["stages"] if s["stage"] not in names]
    out = {}
    for name in names:
        rows = [s for r in runs for s in r["stages"] if s["stage"] == name]
        out[name] = {key: float(np.median([s[key] for s in rows])) for key in rows[0]
                     if key not in ("stage", "durations", "busy")}
        out[name]["durations"] = rows[len(rows) // 2].get("durations", [])
    return out


def makespan(durations: list[float], cores: int) -> float:
    """The tasks, handed out in order to whichever of ``cores`` frees first (dask's local scheduler): the end.

    A stage of few tasks cannot use more cores than it has tasks, and its
    largest task bounds it whatever the cores (Graham's list scheduling).
    """
    import heapq

    free = [0.0] * max(1, cores)
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def amdahl(one: dict[str, dict], write_seconds: float | None) -> tuple[list[str], dict[int, float]]:
    """Per stage: serial fraction (wall and CPU) and the projected time on ``PROJECT_CORES``."""
    totals = {p: 0.0 for p in (1, 2, *PROJECT_CORES)}
    lines = []
    for name, s in one.items():
        S, P = s["client"], s["tasks"]
        f_wall = S / (S + P) if S + P > 0 else 0.0
        cpu = s["client_cpu"] + s["task_cpu"]
        f_cpu = s["client_cpu"] / cpu if cpu > 0 else 0.0
        proj = {}
        # the tasks' own durations at one thread, rescaled to the stage's time in tasks
        d = s.get("durations") or []
        scale = P / sum(d) if d and sum(d) > 0 else 0.0
        for p in totals:
            t = S + (makespan([x * scale for x in d], p) if d else P / p)
            if name == "Gram build" and write_seconds is not None:
                t = max(t, S + write_seconds)  # the disk takes K at its own rate, whatever the cores
            proj[p] = t
            totals[p] += t
        lines.append(f"| {name} | {f_wall:.0%} | {f_cpu:.0%} | "
                     + " | ".join(f"{proj[p]:.2f} s" for p in (1, 2, *PROJECT_CORES)) + " |")
    return lines, totals


def table(label: str, med: dict[str, dict], workers: bool = False) -> list[str]:
    """A stage table; ``workers``: a cluster's, its tasks' time (not CPU) and its busiest and mean worker."""
    cpu = "task time" if workers else "task CPU"
    extra = " busiest worker | mean worker |" if workers else ""
    out = [f"**{label}** (median of rounds)", "",
           f"| stage | wall | in tasks | {cpu} | tasks |{extra} in the client | client CPU | other CPU |",
           "|---|---:|---:|---:|---:|" + "---:|" * (5 if workers else 3)]
    for name, s in med.items():
        busy = f" {s['busiest']:.3f} s | {s['mean_busy']:.3f} s |" if workers else ""
        out.append(f"| {name} | {s['wall']:.3f} s | {s['tasks']:.3f} s | {s['task_cpu']:.3f} s | "
                   f"{s['n_tasks']:.0f} |{busy} {s['client']:.3f} s | {s['client_cpu']:.3f} s | "
                   f"{s['other_cpu']:.3f} s |")
    return out


def report(a, runs: dict[int, list[dict]]) -> str:
    from dkpca.storage import gram_bytes

    meds = {t: median_stages(rs) for t, rs in runs.items()}
    first = runs[min(runs)][-1]
    lines = [f"n = {a.n:,}, d = {a.d}, k = {a.k}, rbf γ = 1/d, from a Zarr path; solver={a.solver}, gram={a.gram} "
             f"-> {first['solver']} / {first['gram']} ({first['dtype']}, block {first['block']}, "
             f"{first['passes']} passes over K); {a.rounds} round(s), each fit in its own process after an "
             "untimed warm-up (memory touched and freed, a 2,000-row fit).", ""]
    for t in sorted(meds):
        fit = float(np.median([r["fit_s"] for r in runs[t]]))
        lines += table(f"{t} thread(s): fit {fit:.2f} s", meds[t]) + [""]
    one = meds[min(meds)]
    write_s = None
    if a.write_bandwidth and first["gram"] == "store":
        write_s = gram_bytes(a.n, first["block"], first["dtype"]) / a.write_bandwidth
    rows, totals = amdahl(one, write_s)
    lines += [f"Amdahl from the {min(meds)}-thread run: a stage's client time serial, its tasks (their measured "
              "durations) handed out to the cores in turn -- a stage of few tasks cannot use more cores than "
              "it has tasks" + (f"; the Gram build at least K's bytes at {a.write_bandwidth / 1e9:.2g} GB/s "
                                "(--write-bandwidth)" if write_s else "") + ":", "",
              "| stage | serial (wall) | serial (CPU) | 1 core | 2 | " + " | ".join(map(str, PROJECT_CORES)) + " |",
              "|---|---:|---:|---:|---:|" + "---:|" * len(PROJECT_CORES), *rows,
              "| **sum** | | | " + " | ".join(f"{totals[p]:.2f} s" for p in (1, 2, *PROJECT_CORES)) + " |", ""]
    serial = sum(s["client"] for s in one.values())
    whole = serial + sum(s["tasks"] for s in one.values())
    lines.append(f"Serial fraction of the fit: {serial / whole:.1%} ({serial:.2f} s of {whole:.2f} s at "
                 f"{min(meds)} thread); speed-up bound 1/f = {whole / serial:.1f}x; projected "
                 + ", ".join(f"{p} cores {totals[1] / totals[p]:.1f}x" for p in PROJECT_CORES) + ".")
    if 2 in meds and 1 in meds:
        t1 = float(np.median([r["fit_s"] for r in runs[1]]))
        t2 = float(np.median([r["fit_s"] for r in runs[2]]))
        kf = (t2 / t1 - 0.5) / 0.5
        lines.append(f"Measured 1 -> 2 threads: {t1:.2f} -> {t2:.2f} s ({t1 / t2:.2f}x; projected "
                     f"{totals[1] / totals[2]:.2f}x); Karp-Flatt serial fraction {kf:.1%}.")
    return "\n".join(lines)


def run_fit(zpath: Path, k: int, threads: int, extra: dict, warm: int, what: str) -> dict:
    """One fit in its own process (this script's ``--child``); exits naming ``what`` on its error."""
    r = run_child(["--child", str(zpath), str(k), str(threads), json.dumps(extra)], script=Path(__file__), warm=warm)
    if r.get("error"):
        sys.exit(f"{what}: {r['error']}")
    return r


#: the choices ``--compare`` runs: (solver, gram)
CHOICES = [("auto", "auto"), ("lanczos", "store"), ("randomized", "store"), ("lanczos", "recompute")]


def compare(a, zpath: Path) -> str:
    """``auto`` against each explicit choice, all cores, rounds in turn; medians, and auto's ratio to the fastest."""
    import os

    threads = os.cpu_count() or 1
    warm = 0 if a.no_warm else warm_bytes(a.n, 3)
    runs: dict[tuple[str, str], list[dict]] = {c: [] for c in CHOICES}
    for _ in range(a.rounds):
        for solver, gram in CHOICES:
            r = run_fit(zpath, a.k, threads, {"solver": solver, "gram": gram}, warm, f"{solver} / {gram}")
            runs[solver, gram].append(r)
            print(f"{solver} / {gram}: fit {r['fit_s']:.2f} s ({r['solver']} / {r['gram']}, {r['passes']} passes)",
                  flush=True)
    med = {c: float(np.median([r["fit_s"] for r in rs])) for c, rs in runs.items()}
    best = min(v for c, v in med.items() if c != ("auto", "auto"))
    lines = [f"n = {a.n:,}, d = {a.d}, k = {a.k}, rbf, Zarr path, {threads} threads; median of {a.rounds} round(s), "
             "each fit in its own process after an untimed warm-up.", "",
             "| solver / gram | ran | passes | fit | Gram | solve | vs the fastest explicit |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for c, rs in runs.items():
        r = rs[-1]
        t = r.get("timings") or {}
        lines.append(f"| {c[0]} / {c[1]} | {r['solver']} / {r['gram']} | {r['passes']} | {med[c]:.2f} s | "
                     f"{t.get('gram', float('nan')):.2f} s | {t.get('solve', float('nan')):.2f} s | "
                     f"{med[c] / best:.2f}x |")
    auto = med["auto", "auto"] / best
    lines += ["", f"auto: {auto:.2f}x the fastest explicit choice (goal: at most 1.15x) -- "
              + ("met." if auto <= 1.15 else "NOT met.")]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--workers", type=int, default=0,
                    help="also a LocalCluster of this many single-thread workers (its tasks timed by the scheduler's "
                         "task stream; 'other CPU' is then the scheduler's and the client's communication)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the thread counts (tables give medians)")
    ap.add_argument("--solver", default="auto")
    ap.add_argument("--gram", default="auto")
    ap.add_argument("--write-bandwidth", type=float, default=None,
                    help="the disk's write rate, bytes/s (benchmarks/ceiling.py), bounding a projected Gram build")
    ap.add_argument("--compare", action="store_true",
                    help="instead: solver and gram auto against the explicit choices (stored + Lanczos, stored + "
                         "randomized, recomputed + Lanczos) on all cores, each fit in its own process, in turn")
    ap.add_argument("--no-warm", action="store_true", help="no memory touched and freed before each fit")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--child", nargs=4, metavar=("ZARR", "K", "THREADS", "EXTRA"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        zpath, k, threads, extra = a.child
        print(json.dumps(child(zpath, int(k), int(threads), json.loads(extra))))
        return
    work = bench_workdir(a.workdir, "dkpca-scaling-")
    _, zpath = write_inputs(clustered(a.n, a.d), work, f"clustered_{a.n}_{a.d}")
    if a.compare:
        text = compare(a, zpath)
        print(text)
        if not a.no_write:
            update_section(f"scaling-auto-n{a.n}", f"Machine: {machine()}\n\n{text}\n",
                           f"python benchmarks/scaling.py --compare --n {a.n}")
        return
    opts = {"solver": a.solver, "gram": a.gram}
    runs: dict[int, list[dict]] = {t: [] for t in a.threads}
    cluster: list[dict] = []
    warm = 0 if a.no_warm else warm_bytes(a.n, 3)
    for _ in range(a.rounds):
        if a.workers:
            r = run_fit(zpath, a.k, 1, {**opts, "workers": a.workers}, warm, "LocalCluster")
            cluster.append(r)
            print(f"LocalCluster {a.workers} x 1: fit {r['fit_s']:.2f} s", flush=True)
        for t in a.threads:
            r = run_fit(zpath, a.k, t, opts, warm, f"{t} thread(s)")
            runs[t].append(r)
            print(f"{t} thread(s): fit {r['fit_s']:.2f} s ({r['solver']} / {r['gram']}, {r['passes']} passes)",
                  flush=True)
    text = report(a, runs)
    if cluster:
        fit = float(np.median([r["fit_s"] for r in cluster]))
        local = float(np.median([r["fit_s"] for r in runs[max(runs)]]))
        text += "\n\n" + "\n".join(table(f"LocalCluster {a.workers} x 1: fit {fit:.2f} s, {fit / local:.2f}x the "
                                           f"{max(runs)} local threads' (the workers' tasks from the scheduler's "
                                           "task stream: their time, not their CPU; a stage's busiest worker "
                                           "against the mean of those that ran its tasks; other CPU: the "
                                           "scheduler and communication in the client's process)",
                                           median_stages(cluster), workers=True))
    print(text)
    if not a.no_write:
        name = "scaling" if a.n == 40000 else f"scaling-n{a.n}"
        update_section(name, f"Machine: {machine()}\n\n{text}\n",
                       f"python benchmarks/scaling.py --n {a.n} --solver {a.solver} --gram {a.gram}")


if __name__ == "__main__":
    main()
