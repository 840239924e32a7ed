"""Solvers benchmark: passes and time to a residual, Nystroem error, stored vs recomputed passes.

    python benchmarks/solvers.py [all] [--data-dir DIR]   # convergence + modes (~3 min, 2 cores)
    python benchmarks/solvers.py convergence [--n-usps 7291] [--n-slow 6000]
    python benchmarks/solvers.py modes [--n 8192] [--dims 4 32 256 1024]
    python benchmarks/solvers.py largest --n 150000 [--d 50]        # one matrix-free lanczos fit, own process

* ``convergence``: each solver (dense, randomized, lanczos) on a stored
  float32 Gram matrix of USPS (train, 7291 x 256, rbf gamma = 1/d) and of a
  synthetic slow-decay set (isotropic Gaussian, d = 40, rbf gamma = 0.5/d),
  k = 10, run to tol = 1e-8; from the per-pass residual history: passes and
  wall time until ``max_i ||K~u_i - theta_i u_i|| / theta_1`` first drops
  below 1e-4, 1e-6, 1e-8.  Nystroem (rpcholesky landmarks) for growing m:
  time, exact residual (one extra pass, not counted) and eigenvalue error
  against the dense solution.
* ``modes``: seconds per pass (n x 20 block, float64 accumulation) with K
  stored in float32 vs re-evaluated from X, as d grows; plus the one-off build.
* ``largest``: a ``dkpca.fit(..., solver="lanczos", gram="recompute")`` in a
  child process, peak RSS of the process tree.

Results go to benchmarks/RESULTS_solvers.md (one section per sub-command).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _results
import numpy as np
from _common import DATA_DIR_HELP, HERE, clustered, load_usps, machine, run_child, write_inputs

_results.PATH = HERE / "RESULTS_solvers.md"
_results.HEADER = ("# dkpca solver benchmarks\n\nEach section is rewritten by the benchmark named in its title "
                   "(merged into RESULTS.md by hand).\n")
THRESHOLDS = (1e-4, 1e-6, 1e-8)


class Timed:
    """Wraps an operator: wall-clock time at the start of every product."""

    def __init__(self, op):
        self.op, self.starts = op, []
        orig = op.matmat

        def matmat(V, single=False):
            self.starts.append(time.perf_counter())
            return orig(V, single)

        op.matmat = matmat


def _stored_operator(X, kernel, workdir: Path, block: int, dtype="float32"):
    from dkpca.gram import build_gram
    from dkpca.io import as_dask, scan
    from dkpca.operator import StoredKernelOperator
    from dkpca.storage import FitStore

    Xd = as_dask(X, block_rows=block)
    t = time.perf_counter()
    info = build_gram(FitStore.at(workdir / f"g{X.shape[1]}-{dtype}.zarr"), Xd, kernel, scan(Xd), dtype=dtype,
                      overwrite=True)
    return StoredKernelOperator(info), time.perf_counter() - t


def _fmt(v, unit=""):
    return "–" if v is None else f"{v:.3g}{unit}"


def convergence(a) -> str:
    from dkpca.kernels import RBF
    from dkpca.solvers import get_solver, postprocess

    rng = np.random.default_rng(0)
    sets = [
        (f"USPS train ({a.n_usps} x 256, rbf γ=1/256)", load_usps(a.data_dir, "train", a.n_usps)[0],
         RBF(1 / 256)),
        (f"synthetic slow decay ({a.n_slow} x 40 Gaussian, rbf γ=0.5/40)", rng.standard_normal((a.n_slow, 40)),
         RBF(0.5 / 40)),
    ]
    k, rows, ny_rows = a.k, [], []
    with tempfile.TemporaryDirectory(prefix="dkpca-bench-") as tmp:
        for label, X, kernel in sets:
            op, build = _stored_operator(X, kernel, Path(tmp), a.block)
            t = time.perf_counter()
            ref = postprocess(get_solver("dense")(op, k, tol=0.0, max_passes=1, rng=None), remove_zero=False)
            t_dense = time.perf_counter() - t
            lam_ref = ref.eigenvalues
            rows.append((label, "dense", ["1"] * 3, [_fmt(t_dense, " s")] * 3, build, "eigh of the dense K~"))
            for name, opts in (("randomized", {}), ("lanczos", {})):
                timed = Timed(op)
                t0 = time.perf_counter()
                res = get_solver(name)(op, k, tol=1e-8, max_passes=a.max_passes, rng=0, **opts)
                t_end = time.perf_counter()
                starts = timed.starts[-res.passes:] + [t_end]
                passes, times = [], []
                for th in THRESHOLDS:
                    hit = next((i for i, h in enumerate(res.history) if h <= th), None)
                    passes.append("–" if hit is None else str(hit + 1))
                    times.append("–" if hit is None else _fmt(starts[hit + 1] - t0, " s"))
                err = float(np.max(np.abs(np.sort(res.eigenvalues)[::-1] - lam_ref) / lam_ref))
                note = f"{'converged' if res.converged else 'not converged'}, eigenvalue rel. err {err:.1e}"
                rows.append((label, name, passes, times, build, note))
                del op.matmat  # drop the timing wrapper
            for m in a.landmarks:
                from dkpca.io import as_dask

                t = time.perf_counter()
                res = get_solver("nystrom")(op, k, n_landmarks=m, rng=0, X=as_dask(X, block_rows=a.block),
                                            kernel=kernel)
                t_ny = time.perf_counter() - t
                U = res.eigenvectors
                resid = np.linalg.norm(op.matmat(U) - U * res.eigenvalues, axis=0).max() / lam_ref[0]
                err = float(np.max(np.abs(res.eigenvalues - lam_ref) / lam_ref))
                ny_rows.append((label, m, t_ny, res.passes, resid, err, res.info["relative_trace_error"]))
    out = [f"Machine: {machine()}", "",
           f"k = {k}, K stored as float32 (block {a.block}), products accumulate in float64; tol = 1e-8, "
           f"max_passes = {a.max_passes}.  Residual = max_i ||K~u_i − θ_i u_i|| / θ₁ after each pass "
           "(K~ = the stored, float32-rounded matrix).  Time counts from the solver's start (the Gram build, "
           "listed separately, is shared by all solvers; randomized and lanczos each made one full read "
           "pass for their first product here, not fused into the build).", "",
           "| data | solver | passes to 1e-4 | 1e-6 | 1e-8 | time to 1e-4 | 1e-6 | 1e-8 | Gram build | notes |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, name, p, t, build, note in rows:
        out.append(f"| {label} | {name} | {' | '.join(p)} | {' | '.join(t)} | {build:.2f} s | {note} |")
    out += ["", "Nyström (rpcholesky landmarks; passes are over X, each an n × m or n × b kernel slice; the "
            "residual is measured with one extra product with the exact K~):", "",
            "| data | m | time | passes over X | max residual / θ₁ | max eigenvalue rel. err "
            "| trace(K−K_nys)/trace(K) |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for label, m, t, p, r, e, tr in ny_rows:
        out.append(f"| {label} | {m} | {t:.2f} s | {p} | {r:.1e} | {e:.1e} | {tr:.1e} |")
    return "\n".join(out)


def modes(a) -> str:
    from dkpca.kernels import RBF
    from dkpca.operator import MatrixFreeKernelOperator

    rng = np.random.default_rng(1)
    V = rng.standard_normal((a.n, 20))
    out = [f"Machine: {machine()}", "",
           f"n = {a.n}, block {a.block}, rbf γ = 1/d, one product with an n × 20 block (float64 accumulation), "
           "best of 3.  Stored: float32 K, upper-triangular blocks, read each pass (from the page cache: "
           f"the {a.n}² store fits in RAM here — reads from a cold disk are slower).  Recompute: kernel "
           "blocks re-evaluated from X in float32 every pass.", "",
           "| d | Gram build (once) | stored: s / pass | recompute: s / pass | recompute / stored |",
           "|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="dkpca-bench-") as tmp:
        for d in a.dims:
            X = rng.standard_normal((a.n, d)).astype(np.float32)
            kernel = RBF(1.0 / d)
            op, build = _stored_operator(X, kernel, Path(tmp), a.block)
            mf = MatrixFreeKernelOperator(X, kernel, dtype=np.float32, block=a.block)
            ts, tr = [], []
            for _ in range(3):
                t = time.perf_counter()
                op.matmat(V)
                ts.append(time.perf_counter() - t)
                t = time.perf_counter()
                mf.matmat(V)
                tr.append(time.perf_counter() - t)
            out.append(f"| {d} | {build:.2f} s | {min(ts):.3f} | {min(tr):.3f} | {min(tr) / min(ts):.1f}× |")
            import shutil

            shutil.rmtree(Path(tmp) / f"g{d}-float32.zarr", ignore_errors=True)
    return "\n".join(out)


def largest(a) -> str:
    with tempfile.TemporaryDirectory(prefix="dkpca-bench-") as tmp:
        X = clustered(a.n, a.d, seed=0)
        _, zpath = write_inputs(X, Path(tmp), f"largest{a.n}")
        del X
        extra = {"solver": "lanczos", "gram": "recompute", "tol": a.tol, "max_passes": 60}
        r = run_child(["dkpca-largest", "-", str(zpath), str(a.k), json.dumps(extra)], timeout=3600)
    rep = r.get("report", {})
    gram_s = rep.get("timings", {}).get("gram")
    solve_s = rep.get("timings", {}).get("solve")
    return "\n".join([
        f"Machine: {machine()}", "",
        f"`dkpca.fit(zarr, n_components={a.k}, kernel='rbf', solver='lanczos', gram='recompute', tol={a.tol})` on "
        f"synthetic clusters ({a.n} × {a.d}, float32, γ = 1/d), own process; peak RSS of the process tree.", "",
        "| n | d | k | fit time | centering pass (+ fused first product) | solve | passes over K | peak RSS | "
        "max residual / λ₁ | converged |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {a.n} | {a.d} | {a.k} | {_fmt(r.get('fit_s'), ' s')} | {_fmt(gram_s, ' s')} | {_fmt(solve_s, ' s')} | "
        f"{rep.get('passes_over_K', '–')} | {_fmt(r.get('peak_rss_gb'), ' GB')} | "
        f"{_fmt(rep.get('max_relative_residual'))} | {rep.get('converged', r.get('error'))} |",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", nargs="?", default="all", choices=["all", "convergence", "modes", "largest"])
    p.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    p.add_argument("--n-usps", type=int, default=7291)
    p.add_argument("--n-slow", type=int, default=6000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--block", type=int, default=2048)
    p.add_argument("--max-passes", type=int, default=200)
    p.add_argument("--landmarks", type=int, nargs="+", default=[250, 1000, 4000])
    p.add_argument("--n", type=int, default=None, help="modes: n (default 8192); largest: n (default 150000)")
    p.add_argument("--dims", type=int, nargs="+", default=[4, 32, 256, 1024])
    p.add_argument("--d", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-6)
    a = p.parse_args()
    if a.what in ("all", "convergence"):
        body = convergence(a)
        print(body)
        _results.update_section("solvers-convergence", body)
    if a.what in ("all", "modes"):
        a.n = a.n or 8192
        body = modes(a)
        print(body)
        _results.update_section("solvers-modes", body)
    if a.what == "largest":
        a.n = a.n or 150_000
        body = largest(a)
        print(body)
        _results.update_section("solvers-largest", body)


if __name__ == "__main__":
    main()
