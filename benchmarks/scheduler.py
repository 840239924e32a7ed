"""What the distributed scheduler costs per task: the graph of one solver pass, with stand-in tasks.

    python benchmarks/scheduler.py [--workers 2] [--n 1e5 1e6 1e7] [--blocks 4096 8192 16384 32768 65536]
                                   [--max-tasks 200000] [--budget 300] [--repeats 2]
                                   [--sweep-workers 2 8 32] [--no-write]

For each n and block edge the graph is that of one pass over K as
``CenteredKernelOperator.raw_matmat`` builds it (``dkpca/operator.py``): one
piece of V per row block (inside the tasks' arguments when there are at most
``FAN_IN`` tasks), one two-output task per upper-triangular block
(I <= J) -- the same ``dkpca.linalg.TaskGraph`` task with the same
arguments: a small frozen reader object, I, J, the block shape, V_I, V_J, a
digest -- and ``dkpca.linalg.scatter_sum``'s 8-way tree sums per row block,
which read the block tasks' outputs directly.  That is the graph of a pass
on a cluster with at least as many worker threads as blocks; with fewer,
a pass runs one task per worker thread (``dkpca.execution.shares``) and the
scheduler has less to do.  Only the payloads are stand-ins: V has one value per row block and a
"block product" returns its inputs, so the time is the client's graph
construction, the scheduler's work, the workers' task handling and the
messages between them.  The task count is ``dkpca.linalg.pass_tasks(nb)``
(checked against the graph).  The cluster is a LocalCluster started as
dkpca starts one (``dkpca.cluster.connected``: TLS, one thread per worker).

Rows are run in order of task count while the count is at most
``--max-tasks`` and the time spent, with the row's time foreseen at the
per-task cost so far, stays under ``--budget`` seconds; the rest
(n = 1e7 at 4096 is ~9 million tasks) are marked *not run*, with the time
the largest measured per-task cost would give -- a projection, not a
measurement.  The scheduler's peak RSS is sampled during each run.

Two costs per task are reported.  *Wall* is the pass's time over its tasks:
on this 2-core machine the workers' handling of each task (the sweep's
"workers' CPU" column; in parallel on a real cluster) shares the cores with
the scheduler, so wall time is the sum of everyone's work, not the scheduler's.
*Scheduler CPU* is the CPU time of the process that runs the client and the
scheduler (LocalCluster keeps them in one process, on one event loop) while
it builds and runs the graph, less what that process spends idle with the
same workers in the same time (heartbeats, monitors; measured just before):
what the graph's tasks add to the one serial process at the centre.  The
sweep repeats one graph (n = 10^6 at block 16384) with more workers.  The
scheduler CPU per task is what ``dkpca.planning.SCHEDULER_SECONDS_PER_TASK``
cites.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass

import dask
import numpy as np
import psutil
from _common import machine
from _results import update_section

from dkpca.cluster import connected
from dkpca.execution import compute
from dkpca.linalg import FAN_IN, TaskGraph, n_blocks, pass_tasks, scatter_sum, touched_rows, upper_pairs


@dataclass(frozen=True)
class StandInReader:
    """In place of the frozen ``ChunkReader`` a stored pass sends with every block task."""

    path: str = "/scratch/store.dkpca.zarr/gram/K"
    shape: tuple[int, int] = (0, 0)
    chunks: tuple[int, int] = (0, 0)


def stand_in_product(reader, I, J, shape, VI, VJ, expect):
    """In place of ``_stored_product``: the two outputs ``(K_IJ V_J, K_IJ^T V_I)``, here V_J and V_I."""
    return VJ, VI


def pass_graph(nb: int) -> list:
    """The per-row-block sums of one pass over ``nb`` row blocks, built as ``raw_matmat`` builds them."""
    V = np.arange(nb, dtype=np.float64)[:, None]
    reader = StandInReader(shape=(nb, nb), chunks=(1, 1))
    graph = TaskGraph("stand-in-pass")
    pairs = upper_pairs(nb)
    inline = len(pairs) <= FAN_IN  # raw_matmat's few tasks carry their pieces of V
    pieces = [V[i:i + 1] if inline else graph.data(V[i:i + 1]) for i in range(nb)]
    tasks = [graph.task(stand_in_product, reader, I, J, (1, 1), pieces[I], pieces[J], I * nb + J) for I, J in pairs]
    if len(tasks) <= FAN_IN:  # raw_matmat adds these few outputs itself (gather_sum)
        return graph.outputs(tasks)
    return graph.outputs(scatter_sum([touched_rows([p]) for p in pairs], tasks, nb, graph=graph))


def graph_size(outs: list) -> int:
    """Tasks the scheduler receives for ``outs`` (the graph after dask's optimisation, the wrapper excluded)."""
    return len(dict(dask.delayed(outs).__dask_graph__())) - 1


class PeakRSS:
    """The peak RSS of one process, sampled every 50 ms in a thread while in the ``with`` block."""

    def __init__(self, pid: int) -> None:
        self.proc, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRSS:
        self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(procs: list | None = None) -> float:
    """User + system CPU time so far of ``procs`` (psutil processes, e.g. the workers), by default this one.

    This process is the client and, with a LocalCluster, the scheduler.
    """
    return sum(sum(p.cpu_times()[:2]) for p in (procs or [psutil.Process()]))


def idle_rate(seconds: float = 3.0) -> float:
    """This process's CPU seconds per second while the cluster idles (heartbeats, monitors)."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (cpu_seconds() - c0) / (time.perf_counter() - t0)


def one_pass(nb: int, scheduler_pid: int, idle: float) -> dict:
    """Time one pass-shaped graph: the client building it, then computing it; the scheduler's peak RSS and CPU.

    ``idle``: the client's and scheduler's CPU per second without work, subtracted from the CPU they spend.
    """
    with PeakRSS(scheduler_pid) as rss:
        c0, t0 = cpu_seconds(), time.perf_counter()
        outs = pass_graph(nb)
        t1 = time.perf_counter()
        compute(*outs)
        t2 = time.perf_counter()
        cpu = cpu_seconds() - c0
    return {"build_s": t1 - t0, "compute_s": t2 - t1, "total_s": t2 - t0, "rss": rss.peak, "cpu_s": cpu,
            "busy_s": cpu - idle * (t2 - t0)}


def sweep(workers: list[int], nb: int, repeats: int) -> list[dict]:
    """One graph of ``nb`` row blocks on LocalClusters of each worker count: the best of ``repeats`` runs each."""
    out = []
    for w in workers:
        with connected({"dkpca": {"cluster": {"local": {"n_workers": w}}}}) as client:
            spid = client.run_on_scheduler(os.getpid)
            procs = [psutil.Process(pid) for pid in client.run(os.getpid).values()]
            one_pass(4, spid, 0.0)  # warm-up
            idle = idle_rate(10.0)
            runs = []
            for _ in range(repeats):
                w0 = cpu_seconds(procs)
                runs.append({**one_pass(nb, spid, idle), "workers_cpu_s": cpu_seconds(procs) - w0})
            best = min(runs, key=lambda x: x["total_s"])
            out.append({"workers": w, "idle": idle, "tasks": pass_tasks(nb), **best})
            print(f"{w} workers: {out[-1]['tasks']} tasks, wall {best['total_s']:.2f} s, scheduler CPU "
                  f"{best['busy_s'] / out[-1]['tasks'] * 1e3:.3f} ms per task (idle {idle * 1e3:.0f} ms/s)", flush=True)
    return out


def cases(ns: list[int], blocks: list[int]) -> list[dict]:
    """Every (n, block) with its row blocks and tasks per pass, by task count; equal grids measured once."""
    out = []
    for n in ns:
        for b in blocks:
            nb = n_blocks(n, b)
            out.append({"n": n, "block": b, "nb": nb, "block_tasks": nb * (nb + 1) // 2, "tasks": pass_tasks(nb)})
    return sorted(out, key=lambda c: (c["tasks"], c["n"]))


def fmt_s(s: float) -> str:
    return f"{s:.2f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (one thread each)")
    ap.add_argument("--n", type=float, nargs="+", default=[1e5, 1e6, 1e7], help="sample counts")
    ap.add_argument("--blocks", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536], help="block edges")
    ap.add_argument("--max-tasks", type=int, default=200_000, help="largest graph run (tasks per pass)")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds of measuring: a row is not run when the per-task cost so far foresees it ending "
                         "later")
    ap.add_argument("--repeats", type=int, default=2, help="runs per row below 20,000 tasks (the best counts)")
    ap.add_argument("--sweep-workers", type=int, nargs="*", default=[2, 8, 32],
                    help="worker counts for the sweep over one graph (n = 1e6, block 16384); none: no sweep")
    ap.add_argument("--no-write", action="store_true", help="print only; leave benchmarks/RESULTS.md alone")
    a = ap.parse_args()
    rows = cases([int(n) for n in a.n], a.blocks)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with connected({"dkpca": {"cluster": {"local": {"n_workers": a.workers}}}}) as client:
        spid = client.run_on_scheduler(os.getpid)
        one_pass(4, spid, 0.0)  # warm-up: connections, function pickles
        done: dict[int, dict] = {}
        per_task = 0.0  # the last measured row's, to foresee the next row's time
        for r in rows:
            repeats = a.repeats if r["tasks"] < 20_000 else 1
            foreseen = time.perf_counter() - start + r["tasks"] * per_task * repeats
            if r["nb"] not in done and (r["tasks"] > a.max_tasks or foreseen > a.budget):
                r["status"] = "not run"
                continue
            if r["nb"] not in done:
                outs = pass_graph(r["nb"])
                assert graph_size(outs) == r["tasks"], (graph_size(outs), r["tasks"])
                del outs
                idle = idle_rate()
                runs = [one_pass(r["nb"], spid, idle) for _ in range(repeats)]
                best = min(runs, key=lambda x: x["total_s"])
                best["rss"] = max(x["rss"] for x in runs)
                done[r["nb"]] = best
                per_task = best["total_s"] / r["tasks"]
                print(f"n={r['n']:.0e} block={r['block']}: {r['tasks']} tasks, {best['total_s']:.2f} s = "
                      f"{best['total_s'] / r['tasks'] * 1e3:.3f} ms per task, scheduler CPU "
                      f"{best['busy_s'] / r['tasks'] * 1e3:.3f} ms per task", flush=True)
            r.update(done[r["nb"]], status="measured")
        same_process = spid == os.getpid()
    swept = sweep(a.sweep_workers, n_blocks(1_000_000, 16384), a.repeats) if a.sweep_workers else []
    measured = [r for r in rows if r["status"] == "measured"]
    if not measured:
        raise SystemExit("nothing measured: raise --max-tasks or --budget")
    largest = max(measured, key=lambda r: r["tasks"])
    per_task = largest["total_s"] / largest["tasks"]
    lines = [
        f"Machine: {machine()}; LocalCluster of {a.workers} worker(s) x 1 thread, TLS, as dkpca starts it "
        f"(scheduler {'in the client process' if same_process else 'in its own process'}). 1-minute load "
        f"average at the start: {load:.2f} (other processes on these cores inflate every figure below).",
        "",
        "One solver pass as `raw_matmat` builds it (V pieces, one 2-output task per upper-triangular block, "
        "8-way tree sums per row block) with stand-in payloads: only the client, the scheduler and the "
        "workers' task handling are timed. Block 4096 is dkpca's default (`DEFAULT_BLOCK`).",
        "",
        "| n | block | row blocks | block tasks | tasks per pass | status | graph built (client) | computed "
        "| per pass | wall per task | scheduler CPU per task | scheduler RSS peak |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        head = f"| {r['n']:.0e} | {r['block']} | {r['nb']:,} | {r['block_tasks']:,} | {r['tasks']:,} |"
        if r["status"] == "measured":
            lines.append(f"{head} measured | {fmt_s(r['build_s'])} | {fmt_s(r['compute_s'])} | "
                         f"{fmt_s(r['total_s'])} | {r['total_s'] / r['tasks'] * 1e3:.3f} ms | "
                         f"{r['busy_s'] / r['tasks'] * 1e3:.3f} ms | {r['rss'] / 2**20:.0f} MiB |")
        else:
            lines.append(f"{head} **not run** (over {a.max_tasks:,} tasks or the {a.budget:.0f} s budget) | — | — "
                         f"| ≈ {fmt_s(r['tasks'] * per_task)} *projected, not measured* | — | — | — |")
    busy = largest["busy_s"] / largest["tasks"]
    summary = (f"At the largest count measured ({largest['tasks']:,} tasks): wall {per_task * 1e3:.3f} ms per task "
               f"(graph construction and the workers' handling included, on the same 2 cores), **scheduler CPU "
               f"{busy * 1e3:.3f} ms per task**; projections of the rows not run use the wall figure, assuming it "
               "stays flat, which the rows above only show up to that count.")
    if len({r["tasks"] for r in measured}) >= 2:
        t = np.array([r["tasks"] for r in measured], dtype=float)
        y = np.array([r["total_s"] for r in measured])
        slope, icpt = np.polyfit(t, y, 1)
        summary += (f" A straight line through the measured rows: {icpt:.2f} s + {slope * 1e3:.3f} ms x tasks "
                    "(the marginal cost per task).")
    lines += ["", summary]
    if swept:
        lines += ["", f"The same graph (n = 1e6, block 16384, {swept[0]['tasks']:,} tasks) with more workers, each "
                  "count a new LocalCluster (best of the runs). Where \"less idle\" is negative or tiny the idle "
                  "load did not go on while the loop was busy (heartbeats wait), so the subtraction does not hold "
                  "there; the CPU per task without it is the bound.", "",
                  "| workers | wall per task | workers' CPU per task (all) | client + scheduler CPU per task "
                  "| idle client + scheduler CPU | scheduler CPU per task (less idle) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in swept:
            lines.append(f"| {r['workers']} | {r['total_s'] / r['tasks'] * 1e3:.3f} ms | "
                         f"{r['workers_cpu_s'] / r['tasks'] * 1e3:.3f} ms | "
                         f"{r['cpu_s'] / r['tasks'] * 1e3:.3f} ms | {r['idle'] * 1e3:.0f} ms/s | "
                         f"{r['busy_s'] / r['tasks'] * 1e3:.3f} ms |")
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        update_section("scheduler", text + "\n", command=" ".join(["python benchmarks/scheduler.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
