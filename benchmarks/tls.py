"""What TLS costs a fit: the same fit on a LocalCluster with and without TLS, in one run.

The TLS cluster is the one dkpca starts (``--cluster local``: TLS with a key
made for the run); the other is a plain LocalCluster on 127.0.0.1 over TCP.
Cluster start-up is not timed; the runs alternate (plain, TLS, TLS, plain, ...)
so that drift on the machine falls on both.  Needs a quiet machine.

    python benchmarks/tls.py                      # n = 20,000, d = 50, k = 10, one worker per core
    python benchmarks/tls.py --n 2000 --repeats 1 # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from distributed import Client, LocalCluster  # noqa: E402

import dkpca  # noqa: E402
from benchmarks._common import clustered, machine, write_inputs  # noqa: E402


def fit_once(zpath: Path, store: Path, k: int, tls: bool, workers: int) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    local = {"n_workers": workers, "threads_per_worker": 1, "dashboard_address": None}
    if tls:
        ctx = dkpca.cluster.connected({"dkpca": {"cluster": {"local": local}}})
    else:
        ctx = plain_cluster(local)
    with ctx as client:
        assert client.scheduler.address.startswith("tls://" if tls else "tcp://")
        t = time.perf_counter()
        model = dkpca.fit(str(zpath), n_components=k, kernel="rbf", store=store, random_state=0)
        seconds = time.perf_counter() - t
    shutil.rmtree(store, ignore_errors=True)
    return {"tls": tls, "fit_s": seconds, "gram_s": model.report["timings"].get("gram"),
            "solve_s": model.report["timings"].get("solve"), "passes": model.report["passes"]}


@contextlib.contextmanager
def plain_cluster(kwargs: dict):
    """The baseline: a LocalCluster over plain TCP on 127.0.0.1, and its client."""
    with LocalCluster(host="127.0.0.1", processes=True, **kwargs) as cluster, Client(cluster) as client:
        yield client


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=2, help="fits per setting (alternating)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dkpca-tls-bench-"))
    try:
        _, zpath = write_inputs(clustered(a.n, a.d), work, f"tls{a.n}")
        # untimed: the first fit in a process pays for imports and first-call set-up
        _, small = write_inputs(clustered(min(a.n, 2000), a.d), work, "warmup")
        fit_once(small, work / "w.dkpca.zarr", a.k, False, a.workers)
        order = [(i % 2 == 1) ^ (j == 1) for i in range(a.repeats) for j in range(2)]  # F,T,T,F,...
        runs = [fit_once(zpath, work / "s.dkpca.zarr", a.k, tls, a.workers) for tls in order]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {tls: min(r["fit_s"] for r in runs if r["tls"] == tls) for tls in (False, True)}
    overhead = 100 * (best[True] / best[False] - 1)
    print(json.dumps({"machine": machine(), "n": a.n, "d": a.d, "k": a.k, "workers": a.workers, "runs": runs,
                      "best_fit_s": {"tcp": best[False], "tls": best[True]}, "tls_overhead_pct": overhead}, indent=1))
    print(f"n={a.n}, d={a.d}, k={a.k}, {a.workers} workers: fit {best[False]:.2f}s over TCP, {best[True]:.2f}s "
          f"over TLS (best of {a.repeats}): TLS costs {overhead:+.1f}%")


if __name__ == "__main__":
    main()
