"""What checking every chunk costs a solver pass: checksums on vs the reader before them, in one run.

    python benchmarks/integrity.py [--n 20000] [--d 50] [--rounds 5]

Builds K (float32, the default) at (n, d), then times ``op.matmat`` passes
(single precision, as the randomized solver's early passes, and float64
accumulation) with three readers of the same chunk files, interleaved round
by round so that a busy machine slows all three alike:

* ``before``: the reader before checksums (``readinto`` into a reused
  buffer, nothing verified; the 4-byte trailer is simply not read);
* ``now``: dkpca's reader (``mmap`` + ``MAP_POPULATE``, size checked, and
  the chunk's XXH3 digest against the one its done marker recorded);
* ``now, unchecked``: the same mapping without the checks, to show their share.

A separate line times the CRC-32C of the same bytes (what checking the
chunk's own trailer instead would cost) and the digest.

Writes the "integrity" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
from _common import bench_workdir, clustered, machine
from _results import update_section

from dkpca.gram import build_gram
from dkpca.io import as_dask, scan
from dkpca.kernels import RBF
from dkpca.linalg import default_block_size
from dkpca.linalg.workspace import scratch
from dkpca.operator import StoredKernelOperator
from dkpca.storage import ChunkReader, CorruptChunkError, FitStore, chunks, gram_bytes

NOW = ChunkReader.read


def before(self, I, J, shape, purpose="op-block", expect=None):
    """The reader of commit 4af3d37: readinto a per-thread buffer, no verification."""
    full = scratch(purpose, self.chunks, self.dtype)
    with open(os.path.join(self.raw_dir, str(I), str(J)), "rb") as f:
        f.readinto(memoryview(full).cast("B"))
    return full[: shape[0], : shape[1]]


@contextlib.contextmanager
def arm(name: str):
    """Readers under test; ``now, unchecked`` stubs the checks out (set once: tasks run on several threads)."""
    saved = chunks.checksum, chunks.verify_crc, chunks.digest, chunks.verify_digest
    ChunkReader.read = before if name == "before" else NOW
    if name == "now, unchecked":
        chunks.checksum = lambda data, crc=0: 0
        chunks.verify_crc = chunks.verify_digest = lambda *args: None
        chunks.digest = lambda data: 0
    try:
        yield
    finally:
        ChunkReader.read = NOW
        chunks.checksum, chunks.verify_crc, chunks.digest, chunks.verify_digest = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = bench_workdir(a.workdir, "dkpca-integrity-")
    store = FitStore.at(work / "integrity.dkpca.zarr")
    shutil.rmtree(store.path, ignore_errors=True)
    X = as_dask(clustered(a.n, a.d), block_rows=default_block_size(a.n))
    info = build_gram(store, X, RBF(1.0 / a.d), scan(X), dtype="float32")
    op = StoredKernelOperator(info)
    V = np.random.default_rng(0).standard_normal((a.n, 20))
    arms = ("before", "now", "now, unchecked")
    times: dict[tuple[str, str], list[float]] = {(name, p): [] for name in arms for p in ("single", "double")}
    for _ in range(a.rounds):
        for name in arms:
            with arm(name):
                for precision, single in (("single", True), ("double", False)):
                    op.matmat(V, single=single)  # warm: the page cache and the per-thread buffers
                    t = time.perf_counter()
                    op.matmat(V, single=single)
                    times[(name, precision)].append(time.perf_counter() - t)
    # what each check costs on its own, per pass (all threads): one chunk hashed on this thread, scaled
    chunk = np.frombuffer((Path(op.reader.raw_dir) / "0" / "0").read_bytes()[:-4], dtype=np.float32)
    per_byte = {}
    for label, fn in (("CRC-32C", lambda: chunks.checksum(chunk)), ("XXH3", lambda: chunks.digest(chunk))):
        fn()
        t = time.perf_counter()
        for _ in range(5):
            fn()
        per_byte[label] = (time.perf_counter() - t) / 5 / chunk.nbytes
    # the check is real: a flipped byte is refused
    path = Path(op.reader.raw_dir) / "0" / "0"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x40
    path.write_bytes(bytes(data))
    try:
        op.matmat(V)
        refused = "NOT refused"
    except CorruptChunkError as exc:
        refused = f"refused: {exc}".split(";")[0]
    shutil.rmtree(store.path, ignore_errors=True)

    K_bytes = gram_bytes(a.n, info.block, "float32")
    rows = []
    for precision in ("single", "double"):
        base = statistics.median(times[("before", precision)])
        for name in arms:
            ts = times[(name, precision)]
            med = statistics.median(ts)
            rows.append(f"| {precision} | {name} | {min(ts):.3f} s | {med:.3f} s | {K_bytes / med / 1e9:.2f} GB/s | "
                        f"{med / base - 1:+.1%} |")
    lines = [
        f"Machine: {machine()}",
        "",
        f"n = {a.n}, d = {a.d}, K float32 in {info.n_blocks}² blocks of {info.block} "
        f"({K_bytes / 1e9:.2f} GB of upper blocks read per pass), 20 vectors, {a.rounds} interleaved rounds.",
        "",
        "| pass | reader | best | median | K read | median vs before |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        "Each check alone, one core: " + ", ".join(f"{k} {1 / v / 1e9:.1f} GB/s" for k, v in per_byte.items())
        + f" (over the {gram_bytes(a.n, info.block, 'float32') / 1e9:.2f} GB of a pass on {os.cpu_count()} cores: "
        + ", ".join(f"{k} {v * K_bytes / (os.cpu_count() or 1):.3f} s" for k, v in per_byte.items()) + ").",
        "",
        f"A K chunk with one flipped byte: {refused}.",
    ]
    print("\n".join(lines))
    update_section("integrity", "\n".join(lines))


if __name__ == "__main__":
    main()
