"""dkpca vs scikit-learn KernelPCA, each fit in its own process, in one run.

    python benchmarks/compare.py [--sizes 2000 3000 5000 10000 20000 40000] [--d 50] [--k 10]

For each n: the same clustered data (rbf, gamma=1/d, k components) is fitted by

* scikit-learn from a .npy file: ``sklearn-arpack``, ``sklearn-randomized``;
  where n <= 5000 also ``sklearn-dense`` and ``sklearn-default``
  (``KernelPCA(n_components=k, kernel="rbf")``, defaults otherwise);
* scikit-learn's approximate peer ``sklearn-nystroem-pca``: ``Nystroem(rbf,
  gamma=1/d, n_components=1000, random_state=0)`` then ``PCA(k)``, its
  eigenvalues ``explained_variance_ * (n - 1)`` (see _child.py);
* dkpca from a Zarr path (``dkpca``: default settings, float32 store, auto
  solver) at every n; where n <= 10000 also the in-memory entry points
  ``dkpca-numpy`` (``dkpca.fit(X)``, X a numpy array) and ``dkpca-KernelPCA``
  (``dkpca.KernelPCA(n_components=k, kernel="rbf").fit(X)``, defaults otherwise).

For ``dkpca`` and ``dkpca-numpy`` the child first calls ``dkpca.plan`` with the
fit's arguments (measure=True) and the table gives its total-time estimate over
the measured fit time ("plan est. / measured"; the plan's own wall time is in
the notes and the JSON log).  Reports wall time of the fit, peak RSS of the whole
process tree (sampled every 50 ms), and the largest relative eigenvalue error
against the most accurate reference available (sklearn dense in float64 for
n <= 5000, else dkpca in float64 with tol=1e-10).  Writes benchmarks/RESULTS.md's
"compare" section and benchmarks/compare.png.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from _common import HERE, WARM_WHY, bench_workdir, clustered, machine, run_child, warm_bytes, write_inputs
from _results import update_section

#: up to this n the in-memory entry points run (n x n float64 in RAM)
IN_MEMORY_MAX_N = 10000
#: up to this n scikit-learn's dense eigh runs (and is the float64 reference): on the 2-core development
#: machine it takes ~14 s at n=5000 and ~2 min at 10,000, three times per size
DENSE_MAX_N = 5000
#: methods whose child first calls dkpca.plan with the fit's arguments
PLANNED = ("dkpca", "dkpca-numpy")
PLAN = json.dumps({"plan": True})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 3000, 5000, 10000, 20000, 40000])
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--warm", action="store_true",
                    help="each child touches and frees 5 n^2 bytes just before its fit (_common.start_timing)")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md or compare.png")
    a = ap.parse_args()
    work = bench_workdir(a.workdir, "dkpca-bench-")
    rows = []
    for n in a.sizes:
        X = clustered(n, a.d)
        npy, zpath = write_inputs(X, work, f"clustered_{n}_{a.d}")
        np.save(str(npy).replace(".npy", ".f64.npy"), X.astype(np.float64))
        small = n <= IN_MEMORY_MAX_N
        methods = (["dkpca"] + (["dkpca-numpy", "dkpca-KernelPCA"] if small else [])
                   + ["sklearn-arpack", "sklearn-randomized"]
                   + (["sklearn-dense", "sklearn-default"] if n <= DENSE_MAX_N else [])
                   + ["sklearn-nystroem-pca"])
        results = {m: run_child([m, str(npy), str(zpath), str(a.k)] + ([PLAN] if m in PLANNED else []),
                                warm=warm_bytes(n) if a.warm else 0) for m in methods}
        # reference: float64 dense (small n) or float64 dkpca with a tight tolerance
        if n <= DENSE_MAX_N:
            ref = run_child(["sklearn-dense", str(npy).replace(".npy", ".f64.npy"), str(zpath), str(a.k)])
            ref_name = "sklearn dense, float64"
        else:
            ref = run_child(["dkpca-ref", str(npy), str(zpath), str(a.k),
                             json.dumps({"dtype": "float64", "tol": 1e-10, "max_passes": 200})])
            ref_name = "dkpca float64, tol 1e-10"
        lam_ref = np.array(ref["eigenvalues"]) if "eigenvalues" in ref else None
        for m, r in results.items():
            err = None
            if lam_ref is not None and "eigenvalues" in r:
                err = float(np.max(np.abs(np.array(r["eigenvalues"]) - lam_ref) / lam_ref))
            rep = r.get("report", {})
            rows.append({"n": n, "method": m, "fit_s": r.get("fit_s"), "peak_rss_gb": r.get("peak_rss_gb"),
                         "eig_rel_err": err, "reference": ref_name, "error": r.get("error"),
                         "passes": rep.get("passes"), "solver": rep.get("solver", r.get("solver")),
                         "gram_s": rep.get("timings", {}).get("gram"),
                         "solve_s": rep.get("timings", {}).get("solve"),
                         "plan_total_s": r.get("plan_total_s"), "plan_s": r.get("plan_s"),
                         "plan_solver": r.get("plan_solver")})
            print(json.dumps(rows[-1]), flush=True)
    table = ["| n | method | fit time (s) | vs arpack | peak RSS (GB) | max rel. eigenvalue error "
             "| plan est. / measured | notes |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for n in a.sizes:
        arp = next((r for r in rows if r["n"] == n and r["method"] == "sklearn-arpack"), {})
        for r in (r for r in rows if r["n"] == n):
            speed = (f"{arp['fit_s'] / r['fit_s']:.2f}x" if r["fit_s"] and arp.get("fit_s") else "")
            ratio = (f"{r['plan_total_s'] / r['fit_s']:.2g}" if r["plan_total_s"] is not None and r["fit_s"]
                     else "")
            table.append(f"| {n} | {r['method']} | {_fmt(r['fit_s'], '%.2f')} | {speed} | "
                         f"{_fmt(r['peak_rss_gb'], '%.2f')} | {_fmt(r['eig_rel_err'], '%.1e')} | {ratio} | "
                         f"{_note(r)} |")
    text = "\n".join(table)
    print(text)
    if not a.no_write:
        _plot(rows, a.sizes)
        update_section("compare", f"rbf kernel, d={a.d}, k={a.k}, clustered synthetic data; "
                       f"one process per fit{WARM_NOTE if a.warm else ''}; reference per n in `reference` column "
                       f"of the JSON log.\n"
                       f"Machine: {machine()}\n\n{text}\n\n![compare](compare.png)\n")


#: what --warm adds to the section's header
WARM_NOTE = (f", which touches and frees 5 n² bytes (≥ 0.5 GiB) untimed just before it ({WARM_WHY}; peak RSS counts "
             "after it)")


def _fmt(v, f: str) -> str:
    return (f % v) if v is not None else "—"


def _note(r: dict) -> str:
    """Solver chosen, passes and timings where the fit reports them; the plan's own wall time."""
    if r["error"]:
        return r["error"]
    parts = []
    if r["method"].startswith("dkpca") or r["method"] in ("sklearn-default", "sklearn-nystroem-pca"):
        parts.append(r["solver"] or "")
    if r["passes"] is not None:
        parts.append(f"{r['passes']} passes")
    if r["gram_s"] is not None:
        parts.append(f"Gram {r['gram_s']:.1f}s, solve {r['solve_s']:.1f}s")
    if r["plan_s"] is not None:
        est = "—" if r["plan_total_s"] is None else f"{r['plan_total_s']:.2g}s"
        parts.append(f"plan took {r['plan_s']:.1f}s (est. {est}, {r['plan_solver']})")
    return ", ".join(p for p in parts if p)


def _plot(rows, sizes) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in sorted({r["method"] for r in rows}):
        pts = [(r["n"], r["fit_s"], r["peak_rss_gb"]) for r in rows if r["method"] == m and r["fit_s"]]
        if pts:
            n, t, mem = zip(*pts, strict=True)
            axes[0].loglog(n, t, "o-", label=m)
            axes[1].loglog(n, mem, "o-", label=m)
    for ax in axes:
        ax.set_xticks(sizes, [f"{n // 1000}k" for n in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set(xlabel="n", ylabel="fit time (s)", title="time (rbf, d=50, k=10)")
    axes[1].set(xlabel="n", ylabel="peak RSS of the process tree (GB)", title="memory")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(HERE / "compare.png", dpi=100)


if __name__ == "__main__":
    main()
