"""This machine's ceilings, and how close dkpca's stages get to them.

    python benchmarks/ceiling.py [--n 20000] [--d 50] [--workdir DIR]

Measures GEMM (square and the kernel-block shape), exp, disk write and read
(page cache dropped with posix_fadvise before reading), then times a Gram
build and solver passes at (n, d) and reports each as a fraction of the
ceiling that bounds it.  Writes the "ceiling" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import clustered, machine
from _results import update_section
from threadpoolctl import threadpool_limits


def best_of(f, reps=3):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def parallel_rate(fn, cores):
    """Aggregate rate of ``fn(i)`` (returns units done) run on ``cores`` threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(cores) as ex:
        list(ex.map(fn, range(cores)))  # warm up (first-touch of the output buffers)
        t = time.perf_counter()
        done = sum(ex.map(fn, range(cores)))
        return done / (time.perf_counter() - t)


def gemm_rates(d: int, cores: int) -> dict:
    out = {}
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        A = rng.standard_normal((2048, 2048)).astype(dt)
        # two different blocks: X @ X.T of one array takes numpy's SYRK path
        X = rng.standard_normal((4096, d)).astype(dt)
        Y = rng.standard_normal((4096, d)).astype(dt)
        C = np.empty((4096, 4096), dt)
        with threadpool_limits(1, user_api="blas"):
            out[f"gemm_square_{dt.__name__}_1core"] = 2 * 2048**3 / best_of(lambda A=A: A @ A)
            out[f"gemm_kernel_{dt.__name__}_1core"] = 2 * d * 4096**2 / best_of(
                lambda X=X, Y=Y, C=C: np.matmul(X, Y.T, out=C))

            outs = [np.empty((4096, 4096), dt) for _ in range(cores)]

            def kern(i, X=X, Y=Y, outs=outs):
                for _ in range(3):
                    np.matmul(X, Y.T, out=outs[i])
                return 3 * 2 * d * 4096**2

            out[f"gemm_kernel_{dt.__name__}_{cores}cores"] = parallel_rate(kern, cores)
        x = -rng.random(1 << 18).astype(dt)  # 1-2 MiB: in L2, pure compute rate
        y = np.empty_like(x)
        out[f"exp_{dt.__name__}_1core"] = x.size * 10 / best_of(
            lambda x=x, y=y: [np.exp(x, out=y) for _ in range(10)])
    return out


def disk_rates(workdir: Path, size_gb: float = 2.0) -> dict:
    path = workdir / "disk_probe.bin"
    chunk = np.random.default_rng(0).random(8 << 20).astype(np.float64).tobytes()  # 64 MiB
    n = int(size_gb * 1e9 // len(chunk))
    # page-cache write: what a Gram build sees while dirty pages fit in RAM
    t = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(n // 4):
            f.write(chunk)
    cache_write = (n // 4) * len(chunk) / (time.perf_counter() - t)
    path.unlink()
    t = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(n):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    write = n * len(chunk) / (time.perf_counter() - t)
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    buf = bytearray(len(chunk))
    t = time.perf_counter()
    with os.fdopen(fd, "rb") as f:
        while f.readinto(buf):
            pass
    read = n * len(chunk) / (time.perf_counter() - t)
    t = time.perf_counter()
    with open(path, "rb") as f:
        while f.readinto(buf):
            pass
    cached = n * len(chunk) / (time.perf_counter() - t)
    path.unlink()
    return {"disk_write": write, "disk_read": read, "page_cache_read": cached, "page_cache_write": cache_write}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dkpca-ceiling-"))
    work.mkdir(parents=True, exist_ok=True)
    r = gemm_rates(a.d, cores)
    r.update(disk_rates(work))

    import dkpca
    from dkpca.gram import build_gram, gram_bytes
    from dkpca.io import as_dask, default_block_size, scan
    from dkpca.kernels import RBF
    from dkpca.operator import StoredKernelOperator

    X = clustered(a.n, a.d)
    store = str(work / "ceiling.dkpca.zarr")
    shutil.rmtree(store, ignore_errors=True)
    Xd = as_dask(X, block_rows=default_block_size(a.n))
    t = time.perf_counter()
    info = build_gram(store, Xd, RBF(1.0 / a.d), scan(Xd), dtype="float32")
    build_s = time.perf_counter() - t
    b = info.block
    computed = gram_bytes(a.n, b, "float32") / 4  # entries actually evaluated (upper blocks)
    op = StoredKernelOperator(info)
    V = np.random.default_rng(0).standard_normal((a.n, 20))
    single_s = best_of(lambda: op.matmat(V, single=True), reps=2)
    double_s = best_of(lambda: op.matmat(V), reps=2)
    shutil.rmtree(store, ignore_errors=True)

    # kernel-evaluation ceiling: GEMM (2d flop/entry, kernel shape) + one exp per entry, all cores
    per_entry = 2 * a.d / r["gemm_kernel_float32_1core"] + 1 / r["exp_float32_1core"]
    kernel_ceiling = cores / per_entry
    # The build writes through the page cache (no fsync); writeback to disk
    # overlaps with later work as long as dirty pages fit in RAM.
    disk_ceiling = r["page_cache_write"] / 4
    build_rate = computed / build_s
    bound = "kernel evaluation" if kernel_ceiling < disk_ceiling else "disk write"
    ceiling = min(kernel_ceiling, disk_ceiling)
    pass_bytes = gram_bytes(a.n, b, "float32")
    lines = [
        f"Machine: {machine()}",
        "",
        "| ceiling | measured |",
        "|---|---:|",
        f"| GEMM float64, square 2048, 1 core | {r['gemm_square_float64_1core'] / 1e9:.0f} GFLOP/s |",
        f"| GEMM float32, square 2048, 1 core | {r['gemm_square_float32_1core'] / 1e9:.0f} GFLOP/s |",
        f"| GEMM float32, kernel shape 4096x{a.d}x4096, 1 core | {r['gemm_kernel_float32_1core'] / 1e9:.0f} GFLOP/s |",
        f"| GEMM float32, kernel shape, {cores} cores | {r[f'gemm_kernel_float32_{cores}cores'] / 1e9:.0f} GFLOP/s |",
        f"| exp float32, 1 core (in cache) | {r['exp_float32_1core'] / 1e9:.2f} G/s |",
        f"| exp float64, 1 core (in cache) | {r['exp_float64_1core'] / 1e9:.2f} G/s |",
        f"| disk write (fsync) | {r['disk_write'] / 1e9:.2f} GB/s |",
        f"| page-cache write (new file, no fsync) | {r['page_cache_write'] / 1e9:.2f} GB/s |",
        f"| disk read (cache dropped) | {r['disk_read'] / 1e9:.2f} GB/s |",
        f"| page-cache read | {r['page_cache_read'] / 1e9:.2f} GB/s |",
        "",
        f"rbf kernel-evaluation ceiling at d={a.d}, float32, {cores} cores: "
        f"{kernel_ceiling / 1e6:.0f} M entries/s (GEMM + exp); page-cache write ceiling "
        f"{disk_ceiling / 1e6:.0f} M float32 entries/s; fsync'd disk {r['disk_write'] / 4e6:.0f} M entries/s.",
        "",
        f"| stage (n={a.n}, d={a.d}, block {b}) | time | rate | fraction of ceiling ({bound}) |",
        "|---|---:|---:|---:|",
        f"| Gram build (float32, upper blocks) | {build_s:.2f} s | {build_rate / 1e6:.0f} M computed entries/s "
        f"({a.n**2 / build_s / 1e6:.0f} M/s of full K) | {build_rate / ceiling:.0%} |",
        f"| solver pass, single precision | {single_s:.2f} s | {pass_bytes / single_s / 1e9:.2f} GB/s of K | "
        f"{pass_bytes / single_s / r['disk_read']:.0%} of disk read, "
        f"{pass_bytes / single_s / r['page_cache_read']:.0%} of page-cache read |",
        f"| solver pass, float64 accumulation | {double_s:.2f} s | {pass_bytes / double_s / 1e9:.2f} GB/s of K | "
        f"{pass_bytes / double_s / r['disk_read']:.0%} of disk read, "
        f"{pass_bytes / double_s / r['page_cache_read']:.0%} of page-cache read |",
    ]
    text = "\n".join(lines)
    print(text)
    del dkpca
    if not a.no_write:
        update_section("ceiling", text)


if __name__ == "__main__":
    main()
