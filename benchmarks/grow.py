"""Growing a fit: an update on grown data against a fresh fit of it (issue 38).

    python benchmarks/grow.py                          # 20,000 -> 24,000 and 40,000 -> 44,000 (the issue's sizes)
    python benchmarks/grow.py --sizes 2000:2400        # a quick check
    python benchmarks/grow.py --write                  # also write the table into benchmarks/RESULTS.md

For each ``n_old:n_new`` (clustered data, ``_common.clustered``: d = 50, rbf
gamma = 1/50, 10 components, dkpca's defaults otherwise), in one process and
after a warm-up fit (imports, the compiled exp, the thread pool):

1. the old fit: ``dkpca.fit(X[:n_old], store=S)`` (untimed);
2. the update: ``dkpca.fit(X, store=S)`` (timed);
3. a fresh fit of the same grown data into a new store (timed).

The page cache's dirty pages are written back and memory is warmed (``_common.start_timing``) before
each timed fit.  Reported:
both times and their ratio (goal: the update at most 0.4x the fresh fit),
passes, the largest eigenvalue difference relative to lambda_1 (goal: 1e-6),
and how many K chunk files of the old rows' blocks the update rewrote (by
mtime, inode and size; goal: 0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import _results
import numpy as np
from _common import bench_workdir, clustered, machine, start_timing, warm_bytes

import dkpca

D, K = 50, 10
SIZES = ((20_000, 24_000), (40_000, 44_000))


def _sizes(text: str) -> tuple[int, int]:
    try:
        old, new = (int(v.replace(",", "").replace("_", "")) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not n_old:n_new (e.g. 2000:2400)") from None
    if not 0 < old < new:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < n_old < n_new")
    return old, new


def _old_chunks(store: Path, n_old: int) -> dict[str, tuple[int, int, int]]:
    """K's chunk files of the blocks wholly in the old rows: (mtime_ns, inode, size) by name."""
    block = int(dkpca.load(store).report["gram"]["block"])
    kept = n_old // block
    out = {}
    for i in range(kept):
        for j in range(i, kept):
            st = os.stat(store / "gram" / "K" / "c" / str(i) / str(j))
            out[f"{i}/{j}"] = (st.st_mtime_ns, st.st_ino, st.st_size)
    return out


def _timed(X: np.ndarray, store: Path) -> tuple[float, dkpca.KPCAModel]:
    os.environ.setdefault("DKPCA_BENCH_WARM_BYTES", str(warm_bytes(len(X), per_entry=3.0)))
    # start_timing writes the previous fit's dirty pages back first: each timed fit starts as a later job's would
    res: dict = {}
    t0 = start_timing(res)
    model = dkpca.fit(X, store=store, n_components=K, gamma=1.0 / D)
    seconds = time.perf_counter() - t0
    print(f"  (dirty pages written back in {res['settle_s']:.1f} s before it)", flush=True)
    return seconds, model


def run(n_old: int, n_new: int, workdir: Path, seed: int = 0) -> dict:
    X = clustered(n_new, D, seed=seed)
    grown, fresh = workdir / f"grow-{n_old}.dkpca.zarr", workdir / f"fresh-{n_new}.dkpca.zarr"
    for p in (grown, fresh):
        shutil.rmtree(p, ignore_errors=True)
    dkpca.fit(X[:n_old], store=grown, n_components=K, gamma=1.0 / D)
    before = _old_chunks(grown, n_old)
    t_update, updated = _timed(X, grown)
    after = _old_chunks(grown, n_old)
    t_fresh, base = _timed(X, fresh)
    u = updated.report.get("update") or {}
    lam1 = float(base.eigenvalues_[0])
    diff = float(np.max(np.abs(updated.eigenvalues_ - base.eigenvalues_))) / lam1
    res = {"n_old": n_old, "n_new": n_new, "update_s": t_update, "fresh_s": t_fresh, "ratio": t_update / t_fresh,
           "update_passes": updated.report["passes"], "fresh_passes": base.report["passes"],
           "blocks_computed": u.get("blocks_computed"), "blocks_reused": u.get("blocks_reused"),
           "eig_diff_rel": diff, "old_chunks_rewritten": sum(before[c] != after.get(c) for c in before),
           "update_timings": updated.report["timings"], "fresh_timings": base.report["timings"],
           "was_update": bool(u)}
    for p in (grown, fresh):
        shutil.rmtree(p, ignore_errors=True)
    return res


def table(rows: list[dict]) -> str:
    head = ("| n_old -> n_new | update | fresh fit | ratio (goal <= 0.4) | passes update / fresh | K blocks "
            "computed / reused | max eigenvalue diff / lambda_1 (goal <= 1e-6) | old-row K chunks rewritten "
            "(goal 0) |\n"
            "|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['n_old']:,} -> {r['n_new']:,} | {r['update_s']:.1f} s | {r['fresh_s']:.1f} s | {r['ratio']:.2f} | "
        f"{r['update_passes']} / {r['fresh_passes']} | {r['blocks_computed']} / {r['blocks_reused']} | "
        f"{r['eig_diff_rel']:.1e} | {r['old_chunks_rewritten']} |\n" for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=_sizes, nargs="+", default=list(SIZES), metavar="N_OLD:N_NEW",
                    help="growths to measure (default: 20000:24000 40000:44000)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    a = ap.parse_args()
    workdir = bench_workdir(a.workdir, "dkpca-grow-")
    warm = clustered(2000, D, seed=99)  # imports, the compiled exp, the thread pool: untimed
    dkpca.fit(warm, store=workdir / "warmup.dkpca.zarr", n_components=K, gamma=1.0 / D)
    rows = []
    for n_old, n_new in a.sizes:
        r = run(n_old, n_new, workdir)
        rows.append(r)
        print(f"{n_old} -> {n_new}: update {r['update_s']:.2f} s ({r['update_timings']}), fresh {r['fresh_s']:.2f} s "
              f"({r['fresh_timings']})", flush=True)
        if not r["was_update"]:
            print("  warning: the refit was not an update (see model.report)")
    out = table(rows)
    print(out)
    if a.write:
        _results.update_section("grow", f"{machine()}\n\n{out}",
                                command="python benchmarks/grow.py")


if __name__ == "__main__":
    main()
