"""Shared helpers for the benchmarks: data, child processes, peak RSS, machine info."""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def clustered(n: int, d: int, seed: int = 0, n_clusters: int = 20) -> np.ndarray:
    """Gaussian clusters: a realistic, moderately decaying rbf spectrum."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_clusters, d)) * 2
    return (centers[rng.integers(0, n_clusters, n)] + rng.standard_normal((n, d))).astype(np.float32)


def load_usps(data_dir: Path, split: str = "train", n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """USPS digits as distributed (Hastie et al.): pixels in [-1, 1] (n, 256) float64, and labels (n,).

    ``split`` is ``"train"`` (7291 digits) or ``"test"`` (2007); ``n`` keeps the first n rows.
    """
    path = Path(data_dir) / "usps" / f"zip.{split}.gz"
    if not path.exists():
        raise SystemExit(f"{path} not found; pass --data-dir pointing at the shared data directory")
    with gzip.open(path, "rt") as f:
        A = np.loadtxt(f, dtype=np.float64)
    A = A[:n]
    return np.ascontiguousarray(A[:, 1:]), A[:, 0].astype(int)


def write_inputs(X: np.ndarray, workdir: Path, name: str) -> tuple[Path, Path]:
    """The same data as .npy (for scikit-learn) and Zarr (for dkpca)."""
    import zarr

    workdir.mkdir(parents=True, exist_ok=True)
    npy, zpath = workdir / f"{name}.npy", workdir / f"{name}.zarr"
    np.save(npy, X)
    zarr.create_array(str(zpath), data=X, chunks=(4096, X.shape[1]), overwrite=True)
    return npy, zpath


def run_child(args: list[str], timeout: float = 3600, env: dict | None = None, script: Path | None = None) -> dict:
    """Run ``python benchmarks/_child.py ARGS`` (or ``python SCRIPT ARGS``) and sample the peak RSS of its
    process tree.

    Returns the child's JSON result plus ``peak_rss_gb`` and ``wall_s`` (the
    child's own timing of the fit is in ``fit_s``).
    """
    import psutil

    cmd = [sys.executable, str(script or HERE / "_child.py"), *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    peak = 0
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
        if time.perf_counter() - t0 > timeout:
            proc.kill()
            return {"error": "timeout", "peak_rss_gb": peak / 1e9}
    out, err = proc.communicate()
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-1:] or ["?"]
        return {"error": f"exit {proc.returncode}: {tail[0][:200]}", "peak_rss_gb": peak / 1e9}
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_gb"] = peak / 1e9
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
