"""Gram build and solver pass rates with the store on S3 versus on local disk, in one run.

    python benchmarks/s3.py [--n 12000] [--d 50] [--block 2000] [--workers 2] [--passes 6] [--write]
    python benchmarks/s3.py --endpoint http://host:9000   # an S3 server of your own (AWS_* credentials)

By default an S3 API is started on loopback (``python -m moto.server``, a
process of its own), so the figures are those of moto behind one local
socket -- a floor for a real object store's per-request cost, not Amazon's
throughput.  Both fits run on the same ``distributed.LocalCluster`` (worker
processes, one thread each), read the same local input, and differ only in
the store: a local directory, or ``s3://<bucket>/store.dkpca.zarr``.  Each
fit is the randomized solver with ``gram="store"`` run for exactly
``--passes`` passes (tol=0: never converges early; its first pass is fused
into the build, so it reads K ``passes - 1`` times).

Reported: the build's kernel entries per second and the bytes of K written
per second; the median pass's seconds and bytes of K read per second.
Before timing, both stores get one tiny fit (worker imports, first connections).
``--write`` puts the table into the "s3" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
import warnings

from _common import bench_workdir, clustered, machine
from _results import update_section


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server():
    """``python -m moto.server`` on a free loopback port; yields its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto server did not start (pip install 'moto[server]')")
            time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def one_fit(data: str, store: str, k: int, block: int, passes: int) -> dict:
    import dkpca

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0 never converges: the warning says so, by design
        t = time.perf_counter()
        model = dkpca.fit(data, n_components=k, gamma=None, solver="randomized", gram="store", store=store,
                          chunk_size=block, dtype="float32", tol=0.0, max_passes=passes, random_state=0)
        wall = time.perf_counter() - t
    r = model.report
    g = r["gram"]
    n = r["n_samples"]
    k_bytes = sum((min(n, (i + 1) * block) - i * block) * (min(n, (j + 1) * block) - j * block) * 4
                  for i in range(-(-n // block)) for j in range(i, -(-n // block)))
    read_passes = [s for s in r["pass_seconds"][r["fused_passes"]:]]
    pass_s = statistics.median(read_passes) if read_passes else float("nan")
    return {"build_s": g["build_seconds"], "entries_per_s": float(n) * n / g["build_seconds"],
            "write_MBps": k_bytes / g["build_seconds"] / 1e6, "passes": len(read_passes), "pass_s": pass_s,
            "read_MBps": k_bytes / pass_s / 1e6, "fit_s": wall, "K_MB": k_bytes / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=12000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--block", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--endpoint", default=None, help="an S3 endpoint to use instead of starting moto")
    ap.add_argument("--bucket", default=None, help="bucket on --endpoint (default: a new one)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--write", action="store_true", help="update the 's3' section of benchmarks/RESULTS.md")
    a = ap.parse_args()

    import s3fs
    import zarr
    from distributed import Client, LocalCluster

    workdir = bench_workdir(a.workdir, "dkpca-s3-bench-")
    workdir.mkdir(parents=True, exist_ok=True)
    X = clustered(a.n, a.d)
    data = str(workdir / "X.zarr")
    zarr.create_array(data, data=X, chunks=(a.block, a.d), overwrite=True)

    with contextlib.ExitStack() as stack:
        if a.endpoint is None:
            endpoint = stack.enter_context(moto_server())
            os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                               "AWS_DEFAULT_REGION": "us-east-1"})
        else:
            endpoint = a.endpoint
        os.environ["AWS_ENDPOINT_URL"] = endpoint  # before the workers start: they inherit it
        bucket = a.bucket or f"dkpca-bench-{os.getpid()}"
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        cluster = stack.enter_context(LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                                                   dashboard_address=None))
        stack.enter_context(Client(cluster))
        stores = {"local disk": str(workdir / "store.dkpca.zarr"),
                  "S3 (moto, loopback)" if a.endpoint is None else f"S3 ({endpoint})":
                      f"s3://{bucket}/store-{os.getpid()}.dkpca.zarr"}
        # Warm-up: the workers' first fit imports dkpca and opens their first S3 connections; not timed.
        small = str(workdir / "warm.zarr")
        zarr.create_array(small, data=X[: 2 * min(a.block, a.n // 2)], chunks=(min(a.block, a.n // 2), a.d),
                          overwrite=True)
        for store in stores.values():
            one_fit(small, store + ".warm", min(a.k, 2), min(a.block, a.n // 2), 2)
        results = {}
        for name, store in stores.items():
            print(f"{name}: fitting into {store} ...", flush=True)
            results[name] = one_fit(data, store, a.k, a.block, a.passes)
            print(f"  {results[name]}", flush=True)

    K_MB = next(iter(results.values()))["K_MB"]
    lines = [f"n = {a.n}, d = {a.d}, block {a.block}, K {K_MB:.0f} MB float32 (upper blocks), "
             f"{a.workers} worker processes x 1 thread, randomized solver, {a.passes} passes; {machine()}", "",
             "| store | build s | build entries/s | K written MB/s | pass s (median) | K read MB/s |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['build_s']:.2f} | {r['entries_per_s']:.3g} | {r['write_MBps']:.3g} | "
                     f"{r['pass_s']:.2f} | {r['read_MBps']:.3g} |")
    table = "\n".join(lines)
    print(table)
    if a.write:
        update_section("s3", table)


if __name__ == "__main__":
    main()
