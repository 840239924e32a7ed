"""Scale runs: MNIST 60,000 x 784 from a Zarr path, synthetic n up to 200,000
matrix-free, time vs number of workers, and a projection to a 100-node cluster.

    python benchmarks/scale.py mnist [--data-dir ../shared/data]
    python benchmarks/scale.py synthetic [--sizes 50000 100000 200000] [--gram auto|store|recompute]
    python benchmarks/scale.py workers [--n 20000]

Each fit runs in its own process; peak RSS is that of the whole process tree
(LocalCluster workers included).  Results go to the "scale" section of
benchmarks/RESULTS.md (appended per sub-command).
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path

import numpy as np
from _common import HERE, clustered, machine, run_child, write_inputs
from _results import update_section


def load_mnist(data_dir: Path) -> np.ndarray:
    path = data_dir / "mnist" / "train-images-idx3-ubyte.gz"
    if not path.exists():
        raise SystemExit(f"{path} not found; pass --data-dir pointing at the shared data directory")
    with gzip.open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[4:8], "big")
    return (np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 784) / 255.0).astype(np.float32)


def _row(label, n, d, r, k):
    rep = r.get("report", {})
    lam = r.get("eigenvalues") or [float("nan")]
    return {
        "case": label, "n": n, "d": d, "k": k, "fit_s": r.get("fit_s"), "peak_rss_gb": r.get("peak_rss_gb"),
        "solver": rep.get("solver"), "gram": rep.get("gram", {}).get("mode"),
        "block": rep.get("gram", {}).get("block"),
        "passes": rep.get("passes_over_K", rep.get("passes")),
        "max_rel_residual": rep.get("max_relative_residual"), "lambda1": lam[0],
        "timings": rep.get("timings"), "error": r.get("error"),
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


def cmd_mnist(a) -> list[dict]:
    X = load_mnist(Path(a.data_dir))
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
    lines = ["| Dask setup | fit time | Gram build | solve | passes |", "|---|---:|---:|---:|---:|"]
    results = {}
    for label, extra in [("threads (no cluster)", {}), ("LocalCluster 1 worker", {"workers": 1}),
                         ("LocalCluster 2 workers", {"workers": 2})]:
        r = run_child(["dkpca", "-", str(zpath), "10", json.dumps(extra)])
        results[label] = r
        t = r.get("report", {}).get("timings", {})
        lines.append(f"| {label} | {r.get('fit_s', float('nan')):.2f} s | {t.get('gram', float('nan')):.2f} s | "
                     f"{t.get('solve', float('nan')):.2f} s | {r.get('report', {}).get('passes_over_K')} |")
        print(lines[-1], flush=True)
    # Projection from measured per-entry costs (2 workers): build and pass cost per
    # stored entry; scale to n = 1e6 on 100 nodes x 32 cores, assuming per-core
    # rates as measured here and a parallel filesystem of 100 GB/s aggregate.
    r2 = results["LocalCluster 2 workers"]["report"]
    cores_here = 2
    entries = a.n * a.n / 2
    build_core_s_per_entry = r2["timings"]["gram"] * cores_here / entries
    pass_core_s_per_entry = np.median(r2["pass_seconds"][1:] or [float("nan")]) * cores_here / entries
    N, cores, fs_bw = 1_000_000, 100 * 32, 100e9
    big_entries = N * N / 2
    build_cpu, io = big_entries * build_core_s_per_entry / cores, big_entries * 4 / fs_bw
    pass_cpu = big_entries * pass_core_s_per_entry / cores
    build, per_pass = max(build_cpu, io), max(pass_cpu, io)
    build_bound = "compute" if build_cpu > io else "filesystem"
    pass_bound = "compute" if pass_cpu > io else "filesystem"
    tasks = (N / 4096) ** 2 / 2
    passes = r2["passes_over_K"]
    lines += [
        "",
        f"Projection to n = 10⁶ on 100 nodes × 32 cores (3,200 workers), from the 2-worker run's measured "
        f"per-entry costs ({build_core_s_per_entry * 1e9:.2f} core-ns per stored entry to build, "
        f"{pass_core_s_per_entry * 1e9:.2f} core-ns per entry per pass), K in float32 = "
        f"{big_entries * 4 / 1e12:.1f} TB on a parallel filesystem assumed at 100 GB/s aggregate: "
        f"build ≈ {build / 60:.1f} min (bound by {build_bound}), each pass ≈ {per_pass:.0f} s "
        f"(bound by {pass_bound}), {passes} passes ≈ {(build + passes * per_pass) / 60:.0f} min in all. "
        f"With 4096² blocks that is {int(tasks):,} tasks per pass; at ~1 ms of scheduler time per task "
        f"the scheduler adds ≈ {tasks / 1000:.0f} s per pass, so blocks of 16384² (≈ 1,900 tasks) "
        "are the right choice there.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mnist")
    m.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data"))
    m.add_argument("--k", type=int, default=16)
    m.add_argument("--tol", type=float, default=1e-5)
    s = sub.add_parser("synthetic")
    s.add_argument("--sizes", type=int, nargs="+", default=[50000, 100000, 200000])
    s.add_argument("--d", type=int, default=50)
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--gram", default="auto", choices=["auto", "store", "recompute"],
                   help="default auto: dkpca stores K where the disk holds it and recomputing is not faster")
    s.add_argument("--tol", type=float, default=1e-5)
    w = sub.add_parser("workers")
    w.add_argument("--n", type=int, default=20000)
    w.add_argument("--d", type=int, default=50)
    for p in (m, s, w):
        p.add_argument("--workdir", default=None)
        p.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    a.workdir = a.workdir or tempfile.mkdtemp(prefix="dkpca-scale-")
    if a.cmd == "workers":
        text = cmd_workers(a)
    else:
        rows = cmd_mnist(a) if a.cmd == "mnist" else cmd_synthetic(a)
        text = _table(rows)
    print(text)
    if not a.no_write:
        update_section(f"scale-{a.cmd}", f"Machine: {machine()}\n\n{text}\n")


if __name__ == "__main__":
    main()
