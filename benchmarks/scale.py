"""Scale runs: MNIST 60,000 x 784 from a Zarr path, synthetic n up to 200,000
matrix-free, time vs number of workers, and a projection to a 100-node cluster
(from rates measured in the run, dkpca's measured scheduler cost per task and an
assumed filesystem bandwidth, through the planning functions ``dkpca plan`` uses).

    python benchmarks/scale.py mnist [--data-dir DIR]
    python benchmarks/scale.py synthetic [--sizes 50000 100000 200000] [--gram auto|store|recompute]
    python benchmarks/scale.py workers [--n 20000] [--fs-bandwidth 100GB/s] [--nodes 100 --cores 32]

Each fit runs in its own process; peak RSS is that of the whole process tree
(LocalCluster workers included).  Results go to the "scale" section of
benchmarks/RESULTS.md (appended per sub-command).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import DATA_DIR_HELP, WARM_WHY, bench_workdir, clustered, machine, run_child, warm_bytes, write_inputs
from _results import update_section
from dask.utils import parse_bytes

#: the sizes whose runs fill the "scale-synthetic" and "scale-workers" sections (others get their own)
SYNTHETIC_SIZES = [50000, 100000, 200000]
WORKERS_N = 20000


def load_mnist(data_dir: str | None) -> np.ndarray:
    """MNIST train, pixels scaled to [0, 1] float32 (``data_dir``: an offline copy, else dkpca's data cache)."""
    from dkpca.datasets import load_mnist as mnist

    try:
        X = mnist("train", data_dir)[0]
    except (OSError, ValueError) as exc:  # no network, a missing or altered file: the message says what to do
        raise SystemExit(str(exc)) from None
    return (X / 255.0).astype(np.float32)


def _row(label, n, d, r, k):
    rep = r.get("report", {})
    lam = r.get("eigenvalues") or [float("nan")]
    return {
        "case": label, "n": n, "d": d, "k": k, "fit_s": r.get("fit_s"), "peak_rss_gb": r.get("peak_rss_gb"),
        "solver": rep.get("solver"), "gram": rep.get("gram", {}).get("mode"),
        "block": rep.get("gram", {}).get("block"),
        "passes": rep.get("passes_over_K", rep.get("passes")),
        "max_rel_residual": rep.get("max_relative_residual"), "lambda1": lam[0],
        "timings": rep.get("timings"), "error": r.get("error"), "pass_seconds": rep.get("pass_seconds"),
        "fused_passes": rep.get("fused_passes", 0),
        "compiled_exp": rep.get("gram", {}).get("compiled_exp"),
    }


def _table(rows) -> str:
    out = ["| case | n | d | k | solver / Gram | passes over K | fit time | Gram build | K written | solve "
           "| peak RSS | max residual / λ₁ |",
           "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| {r['case']} | {r['n']} | {r['d']} | {r['k']} | — | — | — | — | — | — | "
                       f"{r['peak_rss_gb']:.2f} GB | {r['error']} |")
            continue
        t = r.get("timings") or {}
        written = "—"
        if r["gram"] == "store" and t.get("gram"):
            from dkpca.storage import gram_bytes

            written = f"{gram_bytes(r['n'], r['block'], 'float32') / t['gram'] / 1e9:.2f} GB/s"
        out.append(f"| {r['case']} | {r['n']} | {r['d']} | {r['k']} | {r['solver']} / {r['gram']} | {r['passes']} | "
                   f"{r['fit_s']:.1f} s | {t.get('gram', 0):.1f} s | {written} | {t.get('solve', 0):.1f} s | "
                   f"{r['peak_rss_gb']:.2f} GB | {r['max_rel_residual']:.1e} |")
    return "\n".join(out)


def synthetic_projection(rows, project_n: float) -> str:
    """n = ``project_n`` on this machine from the largest matrix-free run's measured passes (``pass_cost``)."""
    from dkpca.linalg import pass_cost

    mf = [r for r in rows if r.get("gram") == "recompute" and not r.get("error") and r.get("pass_seconds")]
    if not mf:
        return ""
    r = max(mf, key=lambda r: r["n"])
    n, block, passes = r["n"], r["block"], r["passes"]
    # the first products were fused into the centring statistics' pass (no pass of their own): not timed as passes
    t_pass = float(np.median(r["pass_seconds"][r["fused_passes"]:]))

    def sweep(m: float, entry_seconds: float = 1.0):  # the planner's cost of one pass, in one thread's time
        return pass_cost(int(m), block, concurrency=1, entry_seconds=entry_seconds, task_seconds=0.0).compute

    entries = sweep(n)
    big = sweep(project_n, t_pass / entries)
    total = passes * big  # passes over K, the centring statistics' included
    return (f"\n\nProjection to n = {project_n:,.0f} on this machine, from the n = {n:,} run's measured passes "
            f"(median {t_pass:.1f} s over {entries:.3g} kernel entries = {entries / t_pass / 1e6:.0f} M entries/s, "
            f"exp {'compiled' if r.get('compiled_exp') else 'numpy'}), assuming the same {passes} passes over K "
            f"(the centring statistics' included) and a cost proportional to the entries: {big:,.0f} s a pass, "
            f"{total / 3600:.1f} h in all, O(n k) memory.")


def cmd_mnist(a) -> list[dict]:
    X = load_mnist(a.data_dir)
    work = Path(a.workdir)
    _, zpath = write_inputs(X, work, "mnist_train")
    extra = {"tol": a.tol}
    r = run_child(["dkpca", "-", str(zpath), str(a.k), json.dumps(extra)], timeout=3600)
    return [_row("MNIST train (Zarr path, pixels/255, rbf γ=1/784)", *X.shape, r, a.k)]


def cmd_synthetic(a) -> list[dict]:
    rows = []
    for n in a.sizes:
        X = clustered(n, a.d)
        _, zpath = write_inputs(X, Path(a.workdir), f"clustered_{n}_{a.d}")
        extra = {"gram": a.gram, "tol": a.tol}
        r = run_child(["dkpca", "-", str(zpath), str(a.k), json.dumps(extra)], timeout=3 * 3600)
        rows.append(_row(f"synthetic clusters (d={a.d}), gram={a.gram}", n, a.d, r, a.k))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def cmd_workers(a) -> str:
    X = clustered(a.n, a.d)
    _, zpath = write_inputs(X, Path(a.workdir), f"clustered_{a.n}_{a.d}")
    setups = [("threads (no cluster)", {}), ("1 thread (no cluster)", {"threads": 1}),
              ("LocalCluster 1 worker", {"workers": 1}), ("LocalCluster 2 workers", {"workers": 2}),
              # before dkpca's housekeeping intervals (cluster.resources.LOCAL_HOUSEKEEPING): distributed's own
              ("LocalCluster 2 workers, distributed's housekeeping", {"workers": 2, "housekeeping": "distributed"}),
              # before dkpca's allocator setting (cluster.resources.LOCAL_MALLOC): distributed's trim threshold
              ("LocalCluster 2 workers, distributed's MALLOC_TRIM_THRESHOLD_", {"workers": 2, "malloc": "distributed"})]
    # Rounds run the setups in turn and the table gives each one's median: on
    # this shared 2-core VM one fit's build or pass varies by +-10 % from run
    # to run, as much as the differences measured here.
    runs: dict[str, list[dict]] = {label: [] for label, _ in setups}
    warm = 0 if a.no_warm else warm_bytes(a.n, 3)
    for _ in range(a.rounds):
        for label, extra in setups:
            r = run_child(["dkpca", "-", str(zpath), "10", json.dumps(extra)], warm=warm)
            rep = r.get("report", {})
            r["gram_s"] = rep.get("timings", {}).get("gram", float("nan"))
            r["solve_s"] = rep.get("timings", {}).get("solve", float("nan"))
            r["pass_s"] = float(np.median(rep.get("pass_seconds", [0.0])[1:] or [float("nan")]))  # 1st is fused
            runs[label].append(r)
            print(label, f"fit {r.get('fit_s', float('nan')):.2f} s, build {r['gram_s']:.2f} s, "
                  f"pass {r['pass_s']:.3f} s", flush=True)
    med = {label: {key: float(np.median([r.get(key, float("nan")) for r in rs]))
                   for key in ("fit_s", "gram_s", "solve_s", "pass_s", "peak_rss_gb", "teardown_s")}
           for label, rs in runs.items()}
    base = med["threads (no cluster)"]
    lines = [f"Median of {a.rounds} rounds (each round runs the setups in turn, each fit in its own process; "
             "a cluster's start-up and its workers' imports are not timed, as the client's are not, nor its close "
             "(distributed's, given apart)"
             + ("" if a.no_warm else f"; before each fit the child touches and frees {warm / 2**30:.1f} "
                f"GiB, untimed: {WARM_WHY}, and a cluster's processes use up the pages freed before them; "
                "`--no-warm` leaves that out") + ").", "",
             "| Dask setup | fit time (vs threads) | Gram build (vs threads) | solve | pass, median (vs threads) "
             "| passes | peak RSS | cluster close |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, _ in setups:
        m, passes = med[label], runs[label][-1].get("report", {}).get("passes_over_K")
        close = f"{m['teardown_s']:.2f} s" if m["teardown_s"] == m["teardown_s"] else "-"
        lines.append(f"| {label} | {m['fit_s']:.2f} s ({m['fit_s'] / base['fit_s']:.2f}x) | {m['gram_s']:.2f} s "
                     f"({m['gram_s'] / base['gram_s']:.2f}x) | {m['solve_s']:.2f} s | {m['pass_s']:.3f} s "
                     f"({m['pass_s'] / base['pass_s']:.2f}x) | {passes} | {m['peak_rss_gb']:.2f} GB | {close} |")
    one, two = med["LocalCluster 1 worker"], med["LocalCluster 2 workers"]
    solo = med["1 thread (no cluster)"]
    lines += ["", "1 -> 2 workers, parallel efficiency (time with 1 / (2 x time with 2)): Gram build "
              f"{one['gram_s'] / (2 * two['gram_s']):.0%}, pass {one['pass_s'] / (2 * two['pass_s']):.0%}; "
              "the same for local threads, 1 -> 2 (this machine's own scaling on its 2 cores, the ceiling of the "
              f"workers'): Gram build {solo['gram_s'] / (2 * base['gram_s']):.0%}, "
              f"pass {solo['pass_s'] / (2 * base['pass_s']):.0%}."]
    before = med["LocalCluster 2 workers, distributed's housekeeping"]
    lines += ["", "2 workers with distributed's housekeeping intervals (20 ms ticks, 100 ms memory monitor, "
              "10 ms profiler samples) instead of dkpca's (200 / 500 / 100 ms, "
              "`dkpca.cluster.resources.LOCAL_HOUSEKEEPING`): "
              f"fit {before['fit_s'] / two['fit_s']:.2f}x, Gram build {before['gram_s'] / two['gram_s']:.2f}x, "
              f"pass {before['pass_s'] / two['pass_s']:.2f}x dkpca's time."]
    trim = med["LocalCluster 2 workers, distributed's MALLOC_TRIM_THRESHOLD_"]
    lines += ["", "2 workers with distributed's `MALLOC_TRIM_THRESHOLD_=65536` in their environment instead of "
              "glibc's own thresholds (`dkpca.cluster.resources.LOCAL_MALLOC`): "
              f"fit {trim['fit_s'] / two['fit_s']:.2f}x, Gram build {trim['gram_s'] / two['gram_s']:.2f}x, "
              f"pass {trim['pass_s'] / two['pass_s']:.2f}x dkpca's time; peak RSS of the process tree "
              f"{trim['peak_rss_gb']:.2f} GB against {two['peak_rss_gb']:.2f} GB."]
    report2 = runs["LocalCluster 2 workers"][-1]["report"]
    return "\n".join(lines + ["", projection(a, X, report2, two["gram_s"], two["pass_s"])])


def projection(a, X: np.ndarray, r2: dict, gram_s: float, pass_s: float) -> str:
    """n = ``a.project_n`` on ``a.nodes`` x ``a.cores`` workers, by the planning functions ``dkpca plan`` uses.

    Measured here: one thread's time per entry for each step of a fit
    (``measure_blocks`` on this run's data, at this run's block) and the
    passes of the 2-worker fit (``r2``, its report; ``gram_s`` and ``pass_s``,
    the 2-worker medians, for the end-to-end cross-check); the scheduler's cost per task is dkpca's
    constant, measured by benchmarks/scheduler.py; the filesystem bandwidth
    and the workers' memory are assumptions (options).
    """
    from dkpca.kernels import make_kernel
    from dkpca.linalg import default_block_size
    from dkpca.planning import SCHEDULER_SECONDS_PER_TASK, EntryRates, choose_block, estimate, measure_blocks
    from dkpca.request import check_bandwidth
    from dkpca.solvers.randomized import block_size

    bw = check_bandwidth("--fs-bandwidth", a.fs_bandwidth)
    mem = parse_bytes(a.memory_per_worker)
    k, dtype = 10, np.dtype("float32")
    block_here = r2["gram"]["block"]
    m = measure_blocks(X, make_kernel("rbf").resolve(a.d), block_here, dtype, block_size(a.n, k), a.workdir)
    rates = EntryRates.measured(m, block_here)
    N, workers = int(a.project_n), a.nodes * a.cores
    res = {"workers": workers, "threads_per_worker": 1, "memory_per_worker": mem, "distributed": True}
    ell = block_size(N, k)
    block = choose_block(N, d=a.d, ell=ell, itemsize=dtype.itemsize, gram="store", resources=res, rates=rates,
                         fs_bandwidth=bw)
    passes = int(r2["passes_over_K"])

    def at(b: int, per_task: float = SCHEDULER_SECONDS_PER_TASK) -> tuple:
        build, sweep = estimate(N, b, gram="store", itemsize=dtype.itemsize, concurrency=workers, rates=rates,
                                fs_bandwidth=bw, task_seconds=per_task)
        return build, sweep, build.seconds + max(0, passes - 1) * sweep.seconds

    entries = a.n * a.n / 2  # the 2-worker fit, end to end, as a cross-check of the per-block rates
    fit_build = gram_s * 2 / entries * 1e9
    fit_pass = pass_s * 2 / entries * 1e9
    out = [f"Projection to n = {N:,} on {a.nodes} nodes x {a.cores} cores ({workers:,} single-threaded workers), "
           "from `dkpca.planning` (`choose_block`, `estimate`: the functions `dkpca plan --cluster ... "
           "--fs-bandwidth` uses), K in float32, the first product fused into the build:", "",
           "| input | value | source |", "|---|---:|---|",
           f"| kernel block (per entry, one thread) | {rates.kernel * 1e9:.2f} ns | measured here (block "
           f"{rates.edge}, d={a.d}) |",
           f"| block write / read (per entry, one thread) | {rates.write * 1e9:.2f} / {rates.read * 1e9:.2f} ns | "
           "measured here, this machine's disk |",
           f"| block product (per entry, one thread) | {rates.product * 1e9:.2f} ns | measured here with "
           f"l={block_size(a.n, k)} vectors (taken as is for the projection's l={ell}) |",
           f"| 2-worker fit end to end (cross-check) | {fit_build:.2f} core-ns build, {fit_pass:.2f} core-ns per "
           "pass, per stored entry | measured here |",
           f"| passes over K | {passes} | measured here (n={a.n}; assumed the same at n={N:,}) |",
           f"| scheduler per task | {SCHEDULER_SECONDS_PER_TASK * 1e3:.2g} ms | measured "
           "(`SCHEDULER_SECONDS_PER_TASK`, benchmarks/scheduler.py) |",
           f"| filesystem, aggregate | {bw / 1e9:.3g} GB/s | **assumed** (--fs-bandwidth) |",
           f"| memory per worker | {mem / 2**30:.3g} GiB | **assumed** (--memory-per-worker) |", "",
           "| block | tasks per pass | build | pass (bound) | scheduler per pass | share of a pass | total |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    for b, why in ((default_block_size(N), "default"), (block, "chosen")):
        build, sweep, total = at(b)
        out.append(f"| {b} ({why}) | {sweep.tasks:,} | {build.seconds:.0f} s ({build.bound}) | {sweep.seconds:.1f} s "
                   f"({sweep.bound}) | {sweep.scheduler:.1f} s | {100 * sweep.share:.1f} % | {total / 60:.1f} min |")
        if b == block:
            break
    _, twice, total = at(block, 2 * SCHEDULER_SECONDS_PER_TASK)
    out += ["", f"At twice the scheduler's cost per task ({2e3 * SCHEDULER_SECONDS_PER_TASK:.2g} ms: its background "
            "work for thousands of workers is not measured here) the chosen block's pass would take "
            f"{twice.seconds:.1f} s, the scheduler {100 * twice.share:.1f} % of it, the fit {total / 60:.1f} min."]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mnist")
    m.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    m.add_argument("--k", type=int, default=16)
    m.add_argument("--tol", type=float, default=1e-5)
    s = sub.add_parser("synthetic")
    s.add_argument("--sizes", type=int, nargs="+", default=SYNTHETIC_SIZES)
    s.add_argument("--d", type=int, default=50)
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--gram", default="auto", choices=["auto", "store", "recompute"],
                   help="default auto: dkpca stores K where the disk holds it and recomputing is not faster")
    s.add_argument("--tol", type=float, default=1e-5)
    s.add_argument("--project-n", type=float, default=1e6, help="n of the projection from the largest run")
    w = sub.add_parser("workers")
    w.add_argument("--n", type=int, default=WORKERS_N)
    w.add_argument("--d", type=int, default=50)
    w.add_argument("--project-n", type=float, default=1e6, help="n of the projection")
    w.add_argument("--nodes", type=int, default=100, help="nodes of the projected cluster")
    w.add_argument("--cores", type=int, default=32, help="cores (single-threaded workers) per node")
    w.add_argument("--fs-bandwidth", default="100GB/s", help="assumed aggregate filesystem bandwidth")
    w.add_argument("--memory-per-worker", default="8GiB", help="assumed memory per worker")
    w.add_argument("--rounds", type=int, default=3, help="rounds of the setups (the table gives medians)")
    w.add_argument("--no-warm", action="store_true",
                   help="no memory touched and freed before each fit (_common.start_timing)")
    for p in (m, s, w):
        p.add_argument("--workdir", default=None)
        p.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    a.workdir = str(bench_workdir(a.workdir, "dkpca-scale-"))
    if a.cmd == "workers":
        text = cmd_workers(a)
    else:
        rows = cmd_mnist(a) if a.cmd == "mnist" else cmd_synthetic(a)
        text = _table(rows) + (synthetic_projection(rows, a.project_n) if a.cmd == "synthetic" else "")
    print(text)
    if not a.no_write:
        name, command = f"scale-{a.cmd}", None
        if a.cmd == "workers" and a.n != WORKERS_N:  # another size keeps its own section
            name, command = f"scale-workers-n{a.n}", f"python benchmarks/scale.py workers --n {a.n}"
        if a.cmd == "synthetic" and a.sizes != SYNTHETIC_SIZES:  # so do other sizes
            sizes = " ".join(str(n) for n in a.sizes)
            name = f"scale-synthetic-n{sizes.replace(' ', '-')}-{a.gram}"
            command = f"python benchmarks/scale.py synthetic --sizes {sizes} --gram {a.gram}"
        update_section(name, f"Machine: {machine()}\n\n{text}\n", command)


if __name__ == "__main__":
    main()
