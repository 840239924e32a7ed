"""``dkpca demo``: the Quick-start job -- sample data, a local Dask cluster, a real fit, what it found.

Its helpers are public for the tests and benchmarks that reuse the sample
data (:func:`make_demo_data`) and its measure of separation
(:func:`held_out_centroid_accuracy`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np

from .parser import wants_progress

__all__ = ["cmd_demo", "make_demo_data", "held_out_centroid_accuracy", "DEMO_FILES"]


def make_demo_data(n: int, seed: int = 0, return_labels: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Three noisy concentric shells in 10-D: linearly inseparable, kernel-separable.

    ``return_labels=True`` also returns each point's shell (its radius: 1, 2 or 3).
    """
    rng = np.random.default_rng(seed)
    d = 10
    radius = rng.choice([1, 2, 3], size=n)
    direction = rng.standard_normal((n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    X = (direction * radius[:, None] + 0.1 * rng.standard_normal((n, d))).astype(np.float32)
    return (X, radius) if return_labels else X


def held_out_centroid_accuracy(Z: np.ndarray, labels: np.ndarray) -> float:
    """How well ``labels`` separate in ``Z``: nearest-centroid accuracy on held-out points.

    Centroids are fitted on the even rows and scored on the odd ones; the
    demo's rows are in random order, so this is a random half split and the
    score is on points the centroids never saw.
    """
    from sklearn.neighbors import NearestCentroid  # here: `dkpca --help` does not import scikit-learn

    return float(NearestCentroid().fit(Z[::2], labels[::2]).score(Z[1::2], labels[1::2]))


#: what the demo writes into ``--dir``: its sample data, the store of its fit, its plot (and nothing else there)
DEMO_FILES = ("shells.zarr", "shells.dkpca.zarr", "shells_embedding.png")


def cmd_demo(a: argparse.Namespace) -> int:
    """The Quick-start job: sample data, a local cluster, a fit.  It leaves nothing behind unless ``--dir``.

    Without ``--dir`` everything (data, K -- 369 MB at the default size --, the
    model, the workers' scratch space) lives in one temporary directory removed
    at the end, even after an error or Ctrl-C, and the demo says so and how much
    it was.  With ``--dir`` the data, the store and the embedding plot stay
    there (:data:`DEMO_FILES`; where they exist already the demo refuses before
    any work, unless ``--overwrite``) and the demo says how large they are; the
    workers' scratch space is still temporary.
    """
    from ..signals import holding_interrupts

    _check_demo(a)
    fig = _demo_figure() if a.dir else None  # matplotlib and its backend setting: refused before any work
    scratch = tempfile.TemporaryDirectory(prefix="dkpca-demo-", ignore_cleanup_errors=True)
    try:
        workdir = os.path.abspath(a.dir) if a.dir else scratch.name
        os.makedirs(workdir, exist_ok=True)
        model = _demo_fit(a, workdir, scratch.name, fig)
        size = sum(_tree_bytes(os.path.join(workdir, f)) for f in DEMO_FILES) if a.dir else _tree_bytes(workdir)
    finally:
        with holding_interrupts():  # removed whole, and said so only then (a Ctrl-C meanwhile: held till done)
            scratch.cleanup()
    if a.dir:
        print(f"kept in {workdir}: {_megabytes(size)} (sample data, Gram matrix and model{', plot' * (fig is not None)}"
              f"); inspect it with: dkpca info {model.store}")
    else:
        print(f"removed {workdir} ({_megabytes(size)}: sample data, Gram matrix, model); to keep them and an "
              "embedding plot, run: dkpca demo --dir DIR")
    return 0


def _check_demo(a: argparse.Namespace) -> None:
    """The demo's options against each other and ``--dir``'s contents, before any data is written."""
    if a.n_samples < 2:
        raise ValueError(f"--n-samples {a.n_samples} is too few: kernel PCA needs at least 2 points.")
    if a.n_components > a.n_samples:
        raise ValueError(f"--n-components {a.n_components} is more than --n-samples {a.n_samples}; ask for at most "
                         "as many components as points.")
    if not a.dir:
        return
    if os.path.exists(a.dir) and not os.path.isdir(a.dir):
        raise NotADirectoryError(f"--dir {a.dir} is a file, not a directory; name a directory (it is created "
                                 "if missing).")
    there = [f for f in DEMO_FILES if os.path.lexists(os.path.join(a.dir, f))]
    if there and not a.overwrite:
        raise FileExistsError(f"--dir {a.dir} already holds {', '.join(there)}; pass --overwrite to replace "
                              "them (an earlier demo's), or name another directory.")
    # --overwrite replaces an earlier demo's files, nothing else by those names: the sample data a Zarr array (its
    # replacement deletes the directory's contents), the plot a file (matplotlib cannot write over a directory)
    other = [f for f in there if not os.path.isfile(os.path.join(a.dir, f, "zarr.json") if f.endswith(".zarr")
                                                    else os.path.join(a.dir, f))]
    if other:
        raise FileExistsError(f"--dir {a.dir} holds {', '.join(other)}, not what an earlier demo wrote there (a Zarr "
                              "store for .zarr, a file for the plot); --overwrite replaces only a demo's own: move "
                              "it, or name another directory.")


def _demo_fit(a: argparse.Namespace, workdir: str, scratch: str, fig: Any) -> Any:
    """Write the sample data into ``workdir``, fit it on a local cluster whose workers use ``scratch``; report."""
    import zarr

    from ..cluster import check_distributed_settings, connected
    from ..pipeline import fit
    from ..storage import checksum_codecs

    check_distributed_settings()  # a setting the cluster would fail on: said before any file is written
    data = os.path.join(workdir, DEMO_FILES[0])
    X, shell = make_demo_data(a.n_samples, return_labels=True)
    # replaces an earlier demo's data only: _check_demo refused it without --overwrite (in scratch: nothing there)
    zarr.create_array(data, data=X, chunks=(4096, X.shape[1]), overwrite=True, compressors=checksum_codecs())
    print(f"sample data: {X.shape[0]} x {X.shape[1]} (three noisy shells) written to {data}")
    local = {"n_workers": a.workers} if a.workers else {}
    # the scheduler's and workers' scratch space (dask-scratch-space: lock files, spilled data) goes with the
    # demo's temporary directory, not into the system's; the cluster's one log line names the dashboard
    with connected({"dkpca": {"cluster": {"backend": "local", "local": local}}, "temporary-directory": scratch}):
        t = time.perf_counter()
        model = fit(data, n_components=a.n_components, kernel="rbf", gamma=0.5, store=os.path.join(
                    workdir, DEMO_FILES[1]), overwrite=bool(a.overwrite), random_state=0, progress=wants_progress(a))
        elapsed = time.perf_counter() - t
    print(model.summary())
    print(f"fit took {elapsed:.2f}s")
    q = min(2, model.n_components)
    kpca, raw = held_out_centroid_accuracy(model.embedding_[:, :q], shell), held_out_centroid_accuracy(X, shell)
    print(f"shells told apart: nearest-centroid accuracy {kpca:.1%} in kernel PCA components 1-{q} vs {raw:.1%} in "
          "the raw 10-D input (chance 33%; centroids fitted on half the points, scored on the other half)")
    if fig is not None:  # a plot is only worth writing where it is kept (--dir)
        from ..plot import save_figure

        model.plot_embedding(c=shell, label="shell radius", ax=fig.add_subplot())
        print(f"embedding plot: {save_figure(fig, os.path.join(workdir, DEMO_FILES[2]))}")
    return model


def _demo_figure() -> Any:
    """The plot's figure, made before the fit (a broken matplotlib setting is refused before any work); None
    where matplotlib is not installed, said then."""
    from ..plot import new_figure

    try:
        return new_figure((6.4, 5.0))
    except ImportError:
        print("no plot will be written: matplotlib is not installed (pip install 'dkpca[plot]')")
        return None


def _tree_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (what the demo leaves, or removed; a file: its own; missing: 0)."""
    if os.path.isfile(path) and not os.path.islink(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
               if not os.path.islink(os.path.join(root, f)))


def _megabytes(n: int) -> str:
    """As ``du -sh`` counts: MiB (KiB below one)."""
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"
