"""Shared helpers for the benchmarks: data, child processes, peak RSS, machine info."""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def clustered(n: int, d: int, seed: int = 0, n_clusters: int = 20) -> np.ndarray:
    """Gaussian clusters: a realistic, moderately decaying rbf spectrum."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_clusters, d)) * 2
    return (centers[rng.integers(0, n_clusters, n)] + rng.standard_normal((n, d))).astype(np.float32)


#: help of every benchmark's ``--data-dir`` (its default, None, downloads into dkpca's data cache once)
DATA_DIR_HELP = ("offline copy of the data laid out as usps/, mnist/ (default: download once into dkpca's data "
                 "cache, $DKPCA_DATA or ~/.cache/dkpca; see dkpca.datasets)")


def load_usps(data_dir: Path | str | None, split: str = "train",
              n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """USPS digits as distributed (Hastie et al.): pixels in [-1, 1] (n, 256) float64, and labels (n,).

    ``split`` is ``"train"`` (7291 digits) or ``"test"`` (2007); ``n`` keeps the first n rows.
    ``data_dir``: an offline copy, or None for dkpca's data cache (``dkpca.datasets``).
    """
    from dkpca.datasets import load_usps as usps

    try:
        X, y = usps(split, data_dir)
    except (OSError, ValueError) as exc:  # no network, a missing or altered file: the message says what to do
        raise SystemExit(str(exc)) from None
    return np.ascontiguousarray(X[:n]), y[:n]


def bench_workdir(given: str | os.PathLike | None, prefix: str) -> Path:
    """The benchmark's working directory: ``given`` (``--workdir``: made if missing, kept), else a temporary
    directory removed when the benchmark's process exits (its data, stores and models: GBs at n = 40,000)."""
    if given is not None:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def write_inputs(X: np.ndarray, workdir: Path, name: str) -> tuple[Path, Path]:
    """The same data as .npy (for scikit-learn) and Zarr (for dkpca)."""
    import zarr

    workdir.mkdir(parents=True, exist_ok=True)
    npy, zpath = workdir / f"{name}.npy", workdir / f"{name}.zarr"
    np.save(npy, X)
    zarr.create_array(str(zpath), data=X, chunks=(4096, X.shape[1]), overwrite=True)
    return npy, zpath


#: the environment variable telling a child how many bytes to warm (:func:`start_timing`)
WARM_ENV = "DKPCA_BENCH_WARM_BYTES"

#: why the benchmarks warm memory, for the headers of the tables they write
WARM_WHY = ("this VM backs memory freed and reported to its host at 0.3-0.8 GB/s on first touch, "
            "`_common.start_timing`")


def warm_bytes(n: int, per_entry: float = 5.0) -> int:
    """Memory warmed before a fit of n points: ``per_entry`` n^2 bytes, at least 0.5 GiB, at most a third of the RAM.

    5 (the default) is above the largest fit's new memory: scikit-learn's float32 K and ARPACK's workspace,
    8.2 GB peak at n = 40,000; 3 is above a float32 Gram store's page cache (2 n^2 bytes) and a cluster's
    workers."""
    import psutil

    return int(min(max(per_entry * n * n, 2**29), psutil.virtual_memory().total // 3))


def start_timing(res: dict) -> float:
    """Warm memory (see below), record when that ended in ``res``, and return the start of the fit's timing.

    This VM (Firecracker, free page reporting) backs a page the guest has
    not touched since it was freed and reported only when it is next touched:
    measured 0.34 GB/s on one thread, 0.67-0.85 GB/s on two, against 9.2 GB/s
    for pages freed just before (a scratch script touching 0.5-1 GB).  A fit's new memory
    -- its arrays, and the page cache a Gram build writes -- then costs what
    the host makes of it: at n = 20,000 the last Gram chunks a LocalCluster's
    workers wrote took 0.16-0.31 s each against 0.04 s (their processes had
    used up the freed pages), and with 2 GiB touched and freed just before
    the fit they took 0.03-0.06 s like local threads'.  So before every timed
    fit, whatever the method, the child touches and frees ``$DKPCA_BENCH_WARM_BYTES``
    (set by :func:`run_child`), untimed, and the peak RSS counts only after it.
    First the page cache's dirty pages are written back (:func:`settle_disk`; its seconds in
    ``res["settle_s"]``): a fit that followed a stored one in the same round otherwise built its K while
    the other's 3.2 GB were still being written (n = 40,000, ``scaling.py --compare``: Gram 6.0 s for the
    round's first fit against 2.8-4.1 s, 2026-11-27).
    """
    res["settle_s"] = settle_disk()
    nbytes = int(os.environ.get(WARM_ENV, "0"))
    if nbytes:
        block = np.ones(nbytes // 8)
        del block
    res["warm_done_at"] = time.time()
    return time.perf_counter()


def settle_disk() -> float:
    """Write back the page cache's dirty pages (``os.sync``) before a timed fit; returns the seconds it took.

    Dirty pages left by an earlier fit's writes throttle the next fit's writes on this VM: after 3.5 GB
    written, new writes ran at 0.46-0.81 GB/s for 35 s with 1.2-2.1 GB still dirty (2026-11-27), and an
    update's 11 Gram blocks, written right after the old fit's 55, took 0.24 s each to write against the old
    fit's 0.105 s.  Each timed fit then starts with nothing dirty, as one in a later job does.
    """
    t = time.perf_counter()
    os.sync()
    return time.perf_counter() - t


def run_child(args: list[str], timeout: float = 3600, env: dict | None = None, script: Path | None = None,
              warm: int = 0) -> dict:
    """Run ``python benchmarks/_child.py ARGS`` (or ``python SCRIPT ARGS``) and sample the peak RSS of its
    process tree.

    ``warm``: bytes the child touches and frees just before its timed fit
    (:func:`start_timing`); the peak RSS counts only samples after that.
    Returns the child's JSON result plus ``peak_rss_gb`` and ``wall_s`` (the
    child's own timing of the fit is in ``fit_s``).
    """
    import psutil

    cmd = [sys.executable, str(script or HERE / "_child.py"), *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {}), WARM_ENV: str(int(warm))})
    samples: list[tuple[float, int]] = []

    def peak_gb(since: float = 0.0) -> float:
        return max((rss for at, rss in samples if at >= since), default=0) / 1e9

    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            at = time.time()
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            samples.append((at, rss))
        except psutil.Error:
            pass
        time.sleep(0.05)
        if time.perf_counter() - t0 > timeout:
            proc.kill()
            return {"error": "timeout", "peak_rss_gb": peak_gb()}
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-1:] or ["?"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}", "peak_rss_gb": peak_gb()}
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_gb"] = peak_gb(since=result.get("warm_done_at", 0.0))
    result["wall_s"] = time.perf_counter() - t0
    return result


def machine() -> str:
    import psutil

    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line)
    except (OSError, StopIteration):
        model = platform.processor()
    return (f"{model}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}, numpy {np.__version__}")


def threads_env() -> dict:
    """BLAS at one thread per process for scikit-learn too? No: users run it with defaults."""
    return {}
