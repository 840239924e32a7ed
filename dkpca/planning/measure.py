"""Measurements that planning and ``auto`` rest on: block costs on this machine, passes from a subsample.

* :func:`measure_blocks` times one kernel block of the real data (first rows
  of X), one block write and read through the Gram build's and the
  operator's own chunk I/O on the store's filesystem, and one block product
  (in float64 accumulation and in single precision); and what the store's
  filesystem takes from all the threads at once (:func:`disk_bandwidth`): a
  build's writes and a pass's reads are bound by it, whatever the cores;
* :func:`estimate_passes` estimates the passes over K from the spectrum of a
  small random subsample: subspace iteration's residuals shrink roughly like
  ``(lambda_{l+1} / lambda_k)^p`` per pass ``p`` (Halko et al. 2011, sec. 9);
  :func:`lanczos_passes` converts that count for block Lanczos.
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import psutil
import scipy.linalg
import scipy.sparse.linalg

from ..execution import compute, for_the_client, n_workers_threads, serial_blas
from ..kernels import Kernel, NonFiniteKernelError, largest_value
from ..linalg import Centering, block_products, scratch
from ..machine import cores
from ..storage import ChunkReader, ChunkWriter, gram_bytes, probe_array, write_direct

__all__ = ["measure_blocks", "measure_and_estimate", "disk_bandwidth", "dirty_threshold", "writeback_rates",
           "rates_line", "estimate_passes", "spectrum_passes",
           "lanczos_passes", "dense_solve_seconds", "centred_spectrum", "extrapolated_gap",
           "MAX_MEASURE_EDGE", "BANDWIDTH_EDGE", "SPECTRUM_SAMPLE", "DENSE_SAMPLE"]

#: blocks larger than this are measured at this edge and scaled (entries ~ edge^2): 2048, not 4096, since
#: a 16-thread plan spent ~1 s measuring 4096-edge blocks (a 40,000-point fit took 5.8 s in all there)
MAX_MEASURE_EDGE = 2048
#: edge of the chunk each thread writes and reads at once to measure the filesystem's aggregate rate
#: (:func:`disk_bandwidth`): 16 MB in float32, 0.26 GB from 16 threads
BANDWIDTH_EDGE = 2048
#: subsample size for the spectrum estimate (its leading eigenvalues: :func:`centred_spectrum`)
SPECTRUM_SAMPLE = 1000
#: :func:`centred_spectrum` finds up to this share of a sample's eigenvalues by ARPACK, more by a dense eigh
ARPACK_SHARE = 0.1
#: edge of the symmetric matrix whose eigh is timed to estimate the dense solver (out of cache, ~0.1 s)
DENSE_SAMPLE = 800


def _best_time(f: Any, repeat: int = 2) -> float:
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def measure_blocks(X: Any, kernel: Kernel, block: int, dtype: np.dtype, ell: int,
                   store: str | None) -> dict[str, float]:
    """Seconds per ``block x block`` block, one thread: kernel, write, read, product (float64 accumulation and
    single precision), and the measured edge; with :func:`disk_bandwidth`'s aggregate write and read rates
    (bytes/s) of the tasks that run at once, for blocks of at least :data:`BANDWIDTH_EDGE`.
    """
    n = X.shape[0]
    edge = min(block, MAX_MEASURE_EDGE, n)
    rows = compute(X[: min(n, 2 * edge)], local=for_the_client(X.nbytes))[0]
    # one thread's rates, as a block task runs (BLAS on one thread): the plan multiplies them by the
    # threads, and a GEMM timed on all of them would count the cores twice
    with serial_blas():
        return _time_blocks(rows, kernel, block, edge, dtype, ell, store, k_bytes=gram_bytes(n, min(block, n), dtype))


def measure_and_estimate(X: Any, kernel: Kernel, block: int, dtype: np.dtype, ell: int, store: str | None, *,
                         k: int, tol: float, max_passes: int,
                         passes: int | None = None) -> tuple[dict[str, float], str | None]:
    """:func:`measure_blocks`' timings with :func:`estimate_passes`' randomized passes (key ``passes``), and how
    those were estimated (None where ``passes`` was known already: kept from a decision in another precision,
    not estimated).  ``dkpca plan`` shows the decision's estimate (``estimate_passes(known=)``), not another.

    Both run in the client before anything else can start, so they are a fit's serial part: at n = 40,000
    the timings ~0.2-0.3 s here and the estimate 0.07-0.08 s (0.22-0.24 s before its spectra were found by
    ARPACK, :func:`centred_spectrum`), ~10 % of a fit's projected time on 16 cores.  One
    after the other: with the subsample's eigendecomposition on the other core, the one-thread block timings
    it overlapped were up to 2.5x slow, and the store-or-recompute rule compares them (measured on the
    2-core AMD EPYC, 4 rounds each, kernel block at n = 40,000: 0.038-0.099 s beside it, 0.039-0.044 s
    alone; a fit's plan took 0.22-0.30 s either way).
    """
    timed = measure_blocks(X, kernel, block, dtype, ell, store)
    note = None
    if passes is None:
        passes, note = estimate_passes(X, kernel, k, ell, tol, max_passes, "randomized")
    return {**timed, "passes": passes}, note


def _time_blocks(rows: np.ndarray, kernel: Kernel, block: int, edge: int, dtype: np.dtype, ell: int,
                 store: str | None, k_bytes: float = 0.0) -> dict[str, float]:
    """:func:`measure_blocks`' timings on the first ``2 edge`` rows of X."""
    XI = np.ascontiguousarray(rows[:edge])
    XJ = np.ascontiguousarray(rows[-edge:]) if rows.shape[0] >= 2 * edge else XI
    out = np.empty((edge, XJ.shape[0]), dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, in one line, before any work
        t_kernel = _best_time(lambda: kernel.block(XI, XJ, dtype, out=out))
    if not np.isfinite(out).all() and np.isfinite(rows).all():  # non-finite data: the scan names its row
        raise NonFiniteKernelError.of("the kernel", kernel.to_dict(),
                                      " on the first rows of the data" + largest_value("their", rows))
    V = np.random.default_rng(0).standard_normal((out.shape[1], ell))
    t_prod = _best_time(lambda: block_products(out, V[: out.shape[0]], V, True))
    V32 = V.astype(np.float32)  # a single-precision pass (the randomized solver's early ones)
    t_single = _best_time(lambda: block_products(out, V32[: out.shape[0]], V32, True))
    # The scratch array goes next to the store (same filesystem) when possible.
    parent = os.path.dirname(os.path.abspath(store)) if store and "://" not in store else None
    while parent and not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    try:
        scratch = tempfile.TemporaryDirectory(prefix=".dkpca-plan-", dir=parent)
    except OSError as exc:  # named by the directory the store would go into, not by the probe's passing name
        raise OSError(exc.errno, f"cannot write in the store's directory ({exc.strerror})",
                      parent or tempfile.gettempdir()) from exc
    with scratch as tmp:
        # the Gram build's and the operator's own write and read paths, on an array laid out like K
        path, z = probe_array(tmp, out.shape[0], dtype)
        writer, reader = ChunkWriter.of(path, z), ChunkReader.of(path, z)
        t_write = _best_time(lambda: writer.write((0, 0), out))
        t_read = _best_time(lambda: reader.read(0, 0, out.shape))
        # a chunk of a few MB measures the files' fixed costs, not a bandwidth: small K is not bound by it.
        # At most this machine's cores write at once: a cluster's aggregate over many nodes is not
        # measured here (``fs_bandwidth``, an assumption, replaces it in the plan).
        threads = min(n_workers_threads(), cores())
        rates = dict(zip(("write_bandwidth", "read_bandwidth"), disk_bandwidth(tmp, out, threads),
                         strict=True)) if edge >= BANDWIDTH_EDGE else {}
        if rates:
            rates.update(writeback_rates(tmp, out, k_bytes, rates["write_bandwidth"]))
    scale = (block / edge) ** 2
    return {"edge": edge, "kernel_block": t_kernel * scale, "write_block": t_write * scale,
            "read_block": t_read * scale, "product_block": t_prod * scale, "product_single_block": t_single * scale,
            **rates}


def disk_bandwidth(directory: str, block: np.ndarray, threads: int,
                   edge: int = BANDWIDTH_EDGE) -> tuple[float, float]:
    """``(write, read)`` bytes/s of ``threads`` chunks written at once under ``directory``, then read at once.

    Each thread writes one chunk of ``edge`` x ``edge`` (from ``block``) through the Gram build's own writer
    (checksums, a temporary file renamed into place) into an array laid out like K, then all read them back
    through the operator's reader.  One thread's block rates scale with the threads; this is what they
    cannot beat: on a 16-core machine a 40,000-point build wrote K at 1.3 GB/s from 4 threads as from 16
    (issue 40), and there a stored fit's build is bound by the disk, not by the cores.
    """
    threads = max(1, int(threads))
    e = min(edge, *block.shape)
    data = np.ascontiguousarray(block[:e, :e])
    # one array with a chunk for each thread: creating an array's metadata took ~5 ms in the client, 85 ms of a
    # 16-thread plan when each thread had its own (issue 40, main-thread stack samples)
    path, z = probe_array(os.path.join(directory, "bw"), e, data.dtype, count=threads)
    writer, reader = ChunkWriter.of(path, z), ChunkReader.of(path, z)
    with ThreadPoolExecutor(threads) as pool:
        t = time.perf_counter()
        list(pool.map(lambda i: writer.write((i, 0), data), range(threads)))
        t_write = time.perf_counter() - t
        t = time.perf_counter()
        list(pool.map(lambda i: reader.read(i, 0, data.shape), range(threads)))
        t_read = time.perf_counter() - t
    nbytes = float(threads) * data.nbytes
    return nbytes / max(t_write, 1e-9), nbytes / max(t_read, 1e-9)


def dirty_threshold() -> float | None:
    """Bytes of dirty page cache from which Linux writes back to the device (``vm.dirty_background_*``), or None.

    Below it a build's writes only fill the page cache, at what
    :func:`disk_bandwidth`'s short probe sees; past it they wait for the
    device.  ``dirty_background_ratio`` counts a share of the memory that can
    be dirtied (free and reclaimable: ``MemAvailable``, close enough).
    """
    try:
        with open("/proc/sys/vm/dirty_background_bytes") as f:
            nbytes = int(f.read())
        with open("/proc/sys/vm/dirty_background_ratio") as f:
            ratio = int(f.read())
    except (OSError, ValueError):  # not Linux
        return None
    return float(nbytes) if nbytes > 0 else ratio / 100 * psutil.virtual_memory().available


def writeback_rates(directory: str, block: np.ndarray, k_bytes: float, cache_rate: float,
                    edge: int = BANDWIDTH_EDGE) -> dict[str, float]:
    """Where K outgrows :func:`dirty_threshold`: the device's write rate and the threshold, for the build's estimate.

    The device's rate is that of one chunk written with ``O_DIRECT`` (past the
    page cache), measured only for such a K.  Returns the keys
    ``write_device_bandwidth`` and ``dirty_threshold``
    (:meth:`~dkpca.planning.estimate.EntryRates.measured` takes them;
    :func:`~dkpca.planning.estimate.estimate` writes the threshold's worth
    of K as the probe's rate allows and the rest at the device's); nothing
    where K stays below the threshold, the filesystem takes no ``O_DIRECT``
    or the device is not slower than ``cache_rate``.
    """
    threshold = dirty_threshold()
    if threshold is None or k_bytes <= threshold:
        return {}
    e = min(edge, *block.shape)
    data = scratch("plan-direct", (e, e), block.dtype)  # page-aligned, as O_DIRECT needs
    data[:] = block[:e, :e]
    path = os.path.join(directory, "direct")
    if not write_direct(path, data):  # no O_DIRECT on this filesystem: nothing learned
        return {}
    device = data.nbytes / max(_best_time(lambda: write_direct(path, data)), 1e-9)
    return {"write_device_bandwidth": device, "dirty_threshold": threshold} if device < cache_rate else {}


def rates_line(measured: dict[str, float], plan: Any) -> str:
    """The plan's line of measured rates: kernel entries a second (one thread, and all its threads) against
    what the filesystem takes, and what binds the fit (the plan's build or pass bound by the filesystem).

    ``measured``: seconds per block of the plan's edge (:meth:`~dkpca.planning.estimate.EntryRates.per_block`);
    ``plan``: a :class:`~dkpca.planning.plan.Plan` (its block, workers, threads and bounds).
    """
    block, threads = plan.block, plan.workers * plan.threads_per_worker
    bounds = (plan.build_bound, plan.pass_bound)
    seconds = measured["kernel_block"] + measured["product_block"]
    rate = float(block) * block / seconds if seconds > 0 else float("inf")
    disk = ", ".join(f"{what} {measured[key] / 1e9:.3g} GB/s" for what, key in
                     (("written", "write_bandwidth"), ("read", "read_bandwidth")) if measured.get(key))
    if measured.get("write_device_bandwidth") and measured.get("dirty_threshold"):
        disk += (f"; past {measured['dirty_threshold'] / 1e9:.3g} GB of dirty pages K is written at the "
                 f"device's {measured['write_device_bandwidth'] / 1e9:.3g} GB/s")
    bound = "the disk" if "filesystem" in bounds else "the cores"
    return (f"  rates:         kernel + product {rate / 1e6:.0f} M entries/s a thread x {threads} = "
            f"{rate * threads / 1e6:.0f} M/s; the store's filesystem, all threads at once: "
            f"{disk or 'not measured'}; bound by {bound}")


def lanczos_passes(p_subspace: int, tol: float, max_passes: int) -> int:
    """Block Lanczos passes for the accuracy subspace iteration reaches in ``p_subspace``.

    Subspace iteration's residual shrinks like ``g^p`` (g = lambda_{l+1} /
    lambda_k); a Krylov space of p blocks contains the Chebyshev polynomial of
    degree p - 1 on [0, lambda_{l+1}], which shrinks like ``rho^p`` with
    ``rho = 1 / (gamma + sqrt(gamma^2 - 1))``, ``gamma = 2 / g - 1`` (Saad,
    *Numerical Methods for Large Eigenvalue Problems*, sec. 6.6).  g is
    recovered from the subspace estimate, ``target = g^(p - 1)``.
    """
    if p_subspace <= 2:
        return p_subspace
    if tol <= 0:  # as far as the arithmetic goes: the budget ends it (spectrum_passes)
        return max_passes
    g = min(max(tol, 1e-300) ** (1.0 / (p_subspace - 1)), 1 - 1e-12)
    gamma = 2.0 / g - 1.0
    rho = 1.0 / (gamma + np.sqrt(gamma * gamma - 1.0))
    return int(min(max_passes, max(2, np.ceil(np.log(tol) / np.log(rho)) + 1)))


def dense_solve_seconds(n: int, k: int, sample: int = DENSE_SAMPLE) -> float:
    """Seconds of the dense solver's ``eigh`` (top ``k``) on an n x n K~, on this machine.

    Timed on a random symmetric ``m x m`` matrix (``m = min(n, sample)``) and
    scaled by ``(n / m)^3``: the tridiagonal reduction, O(n^3), dominates.
    """
    m = max(2, min(n, sample))
    A = np.random.default_rng(0).standard_normal((m, m))
    A += A.T
    km = max(1, min(m, round(k * m / n)))
    t = _best_time(lambda: scipy.linalg.eigh(A, subset_by_index=(m - km, m - 1), check_finite=False))
    return t * (n / m) ** 3


#: ARPACK's products per Lanczos vector it keeps (``ncv``), to its default
#: tolerance: 48, 55, 58 products at n = 2,000, 3,000, 5,000 with k = 10
#: (ncv = 21; rbf, d = 50, scikit-learn's start vector; benchmarks/compare.py).
ARPACK_PRODUCTS_PER_NCV = 2.6


def estimate_passes(X: Any, kernel: Kernel, k: int, ell: int, tol: float, max_passes: int, solver: str,
                    seed: int = 0, known: tuple[int, str] | None = None) -> tuple[int, str]:
    """Passes over K and how they were estimated, from the spectrum of a random subsample.

    ``known``: subspace iteration's passes and how they were estimated, as a decision found them
    (:func:`measure_and_estimate`): converted for ``solver`` without a subsample.
    """
    if solver == "dense":
        return 1, "dense: one read of K, then an in-memory eigh"
    if solver == "nystrom":
        return 1, "Nystrom: one sweep over n x m kernel slices (approximate)"
    n = X.shape[0]
    if solver == "arpack":
        ncv = min(n, max(2 * k + 1, 20))  # scipy's eigsh default
        return int(np.ceil(ARPACK_PRODUCTS_PER_NCV * ncv)), (
            f"ARPACK: ~{ARPACK_PRODUCTS_PER_NCV:g} x ncv={ncv} one-vector products (measured, not estimated)")
    p, note = known if known is not None else spectrum_passes(X, kernel, k, ell, tol, max_passes, seed)
    if solver == "lanczos":
        p, note = lanczos_passes(p, tol, max_passes), note + ", block Lanczos"
    return p, note


def spectrum_passes(X: Any, kernel: Kernel, k: int, ell: int, tol: float, max_passes: int,
                    seed: int = 0) -> tuple[int, str]:
    """Subspace iteration's passes at width ``ell`` from the spectrum of a random subsample, and how."""
    n = X.shape[0]
    m = min(n, SPECTRUM_SAMPLE)
    idx = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
    S = np.asarray(compute(X[idx], local=for_the_client(X.nbytes))[0], dtype=np.float64)
    K = kernel.block(S, None, np.float64)
    half = np.sort(np.random.default_rng(seed + 1).choice(m, size=m // 2, replace=False))
    top = min(m, max(k, ell + 1))  # the eigenvalues the estimate reads: lambda_1, lambda_k, lambda_{ell+1}
    lam_half = centred_spectrum(K[np.ix_(half, half)], min(top, m // 2))  # a copy: K stays uncentred
    lam = centred_spectrum(K, top)
    if k >= m or lam[min(k, m) - 1] <= 0:
        return max_passes, (f"subsample of {m} points cannot resolve k={k}: subspace iteration taken to need "
                            f"max_passes={max_passes}")
    sample_gap = lam[ell] / lam[k - 1] if ell < m else 0.0
    gap = extrapolated_gap(lam, lam_half, k, ell, n, (m, m // 2)) if ell < m // 2 else sample_gap
    # residual_p ~ lambda_k gap^p, relative to lambda_1 -> stop when below tol
    target = tol * lam[0] / lam[k - 1]
    if target <= 0:  # tol=0: as far as the arithmetic goes, which only the pass budget ends
        p = max_passes
    elif gap <= 1e-12:
        p = 2
    elif gap >= 1:
        p = max_passes
    else:
        p = int(np.ceil(np.log(target) / np.log(gap))) + 1
    p = int(min(max(p, 2), max_passes))
    return p, (f"estimated from a {m}-point subsample: lambda_{ell + 1}/lambda_{k} = {sample_gap:.3f} there, "
               f"~{gap:.3f} at n={n:,}, tol={tol:g}")


def centred_spectrum(K: np.ndarray, count: int | None = None) -> np.ndarray:
    """The ``count`` largest eigenvalues of the centred ``K`` (None: all), largest first (``K`` is centred in place).

    A few of many (up to :data:`ARPACK_SHARE` of them) by ARPACK from a fixed start vector, so the same
    sample always gives the same values: the plan's 21 of a 1,000-point sample take 12 ms, where a dense eigh
    took 40-54 ms; inside a fit at n = 40,000 both spectra took 29-31 ms against 171-177 ms (2-core AMD EPYC,
    2026-11-27) -- before any block can start, so serial on any number of cores.  The two agree to ~1e-15 of
    lambda_1.
    """
    Centering.of_matrix(K).center_matrix(K)
    m = K.shape[0]
    if count is not None and 0 < count <= ARPACK_SHARE * m:
        start = np.random.default_rng(0).standard_normal(m)
        try:
            return np.sort(scipy.sparse.linalg.eigsh(K, k=count, which="LA", v0=start,
                                                     return_eigenvectors=False))[::-1]
        except scipy.sparse.linalg.ArpackError:  # rare (no convergence, no shift on a K~ near c I): eigh answers
            pass
    lam = scipy.linalg.eigh(K, eigvals_only=True, overwrite_a=True)[::-1]
    return lam if count is None else lam[:count]


def extrapolated_gap(lam: np.ndarray, lam_half: np.ndarray, k: int, ell: int, n: int,
                     sizes: tuple[int, int] | None = None) -> float:
    """``lambda_{ell+1} / lambda_k`` of the n-point K from the spectra of an m-point subsample and of its half.

    A subsample's leading eigenvalues grow like its size (each is ``m`` times
    an eigenvalue of the kernel's operator), but its tail also holds a floor
    of sampling noise that grows far slower, so the subsample overstates the
    gap the solvers see.  Measured on 20 Gaussian clusters (``benchmarks/_common.clustered``,
    n = 20,000, d = 50, rbf): lambda_21/lambda_10 = 0.46 / 0.33 / 0.21 / 0.145 /
    0.10 in subsamples of 250 / 500 / 1,000 / 2,000 / 4,000 points against
    0.061 in K itself; the subsample's estimate took 10 passes where subspace
    iteration took 5.  The tail is taken as ``a m + b`` (the two sizes fix a
    and the floor b) and the leading one as proportional, each at ``n``:
    0.071 here from 500 and 1,000 points.  Where the tail grows with the
    size as the leading eigenvalue does (no floor) this is the subsample's
    own gap; it never exceeds it.  ``sizes``: the points of the subsample and
    of its half (default: the spectra's lengths, where they are whole).
    """
    m, h = sizes if sizes is not None else (len(lam), len(lam_half))  # points: the spectra may be their tops only
    sample = lam[ell] / lam[k - 1]
    if lam_half[k - 1] <= 0 or m <= h:
        return float(sample)
    slope = (lam[ell] - lam_half[ell]) / (m - h)
    tail = max(0.0, lam[ell] + slope * (n - m))
    return float(min(sample, tail / (lam[k - 1] * n / m)))
