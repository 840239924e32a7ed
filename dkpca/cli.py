"""The ``dkpca`` command line: fit, plan, info, transform, demo.

Errors caused by the user's input exit with status 2 and one line on stderr
(``dkpca: error: ...``), never a traceback.  Log messages of the ``dkpca``
logger (the plan, the dashboard link) go to stderr at INFO level unless
``--quiet``; results and progress go to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import sys
import tempfile
import time
from typing import Any

import dask.array as da
import numpy as np
import zarr
from distributed.scheduler import KilledWorker

from .cluster import connected, start_local
from .execution import compute
from .io import as_dask
from .model import load
from .pipeline import fit
from .planning import plan
from .plot import new_figure, save_figure
from .storage import InsufficientDiskSpace, StoreLockedError, check_output

USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, InsufficientDiskSpace, StoreLockedError,
               NotADirectoryError, ImportError)


def _kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="rbf", help="rbf, laplacian, poly, linear, sigmoid, cosine (default rbf)")
    p.add_argument("--gamma", type=float, default=None, help="kernel width; default 1/n_features")
    p.add_argument("--degree", type=int, default=3, help="poly degree (default 3)")
    p.add_argument("--coef0", type=float, default=1.0, help="poly/sigmoid offset (default 1)")


def n_components_arg(text: str) -> int | float:
    """``-k``: an integer (a number of components) or a decimal fraction of explained variance (``0.95``).

    Only the syntax is checked here; the range is checked, with the API's
    message, by :func:`dkpca.request.check_n_components`.
    """
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an integer (a number of components) nor a fraction of explained variance "
            "such as 0.95") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dkpca", description="Distributed, out-of-core kernel PCA.")
    sub = parser.add_subparsers(dest="command", required=True)

    f = sub.add_parser("fit", help="fit kernel PCA on a Zarr array and store the model")
    f.add_argument("input", help="Zarr array (or group with array 'X'), path or URL")
    f.add_argument("--n-components", "-k", type=n_components_arg, default=2,
                   help="number of components, or a fraction of explained variance in (0, 1), e.g. 0.95 "
                        "(default 2)")
    _kernel_args(f)
    f.add_argument("--solver", default="auto", help="auto, dense, randomized, lanczos, nystrom")
    f.add_argument("--store", default=None, help="store path (default <input>.dkpca.zarr)")
    f.add_argument("--chunk-size", type=int, default=None, help="Gram block edge (default ~4096)")
    f.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    f.add_argument("--gram", default="auto", choices=["auto", "store", "recompute"],
                   help="store K in Zarr, recompute blocks every pass, or auto (default: as dkpca.fit, "
                        "store unless K does not fit on disk or recomputing is measured faster)")
    f.add_argument("--tol", type=float, default=1e-6)
    f.add_argument("--max-passes", type=int, default=None)
    f.add_argument("--random-state", type=int, default=0)
    _cluster_args(f)
    f.add_argument("--overwrite", action="store_true", help="replace a store holding another fit")
    f.add_argument("--no-progress", action="store_true")

    pl = sub.add_parser("plan", help="print sizes, memory, passes and a time estimate without computing K")
    pl.add_argument("input", help="Zarr array (or group with array 'X'), path or URL")
    pl.add_argument("--n-components", "-k", type=n_components_arg, default=2,
                    help="as for fit: a number of components or a fraction such as 0.95 (default 2)")
    _kernel_args(pl)
    pl.add_argument("--solver", default="auto")
    pl.add_argument("--store", default=None)
    pl.add_argument("--chunk-size", type=int, default=None)
    pl.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    pl.add_argument("--gram", default="auto", choices=["auto", "store", "recompute"],
                    help="as for fit (default auto)")
    pl.add_argument("--tol", type=float, default=1e-6)
    pl.add_argument("--max-passes", type=int, default=None)
    pl.add_argument("--cluster", default=None, metavar="FILE",
                    help="size workers from a cluster config (nothing is started)")
    pl.add_argument("--no-measure", action="store_true", help="sizes only, no timing sample")

    i = sub.add_parser("info", help="print a fitted model's spectrum and solver report")
    i.add_argument("store")

    t = sub.add_parser("transform", help="project a Zarr array with a fitted model into a new Zarr array")
    t.add_argument("store")
    t.add_argument("input")
    t.add_argument("output", help="new Zarr array for the projections (never the input, the store, or inside them)")
    t.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it is an earlier Zarr output")
    _cluster_args(t)

    d = sub.add_parser("demo", help="write sample data to Zarr and fit it on a local Dask cluster")
    d.add_argument("--dir", default=None, help="where to write the sample data (default: a temp dir)")
    d.add_argument("--n-samples", type=int, default=12000)
    d.add_argument("--n-components", type=int, default=8)
    d.add_argument("--workers", type=int, default=None, help="local worker processes (default: cores)")
    for p in (f, pl, i, t, d):
        p.add_argument("--quiet", "-q", action="store_true", help="no log messages (plan, dashboard link)")
    return parser


def _cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="address of a running Dask scheduler (tcp://host:port)")
    g.add_argument("--cluster", default=None, metavar="FILE",
                   help="cluster config YAML (see cluster_configs/): start it, fit, shut it down")


@contextlib.contextmanager
def _client(a: argparse.Namespace):
    target = getattr(a, "cluster", None) or getattr(a, "scheduler", None)
    with connected(target) as client:
        yield client


def cmd_fit(a: argparse.Namespace) -> int:
    with _client(a):
        model = fit(
            a.input, n_components=a.n_components, kernel=a.kernel, gamma=a.gamma, degree=a.degree,
            coef0=a.coef0, solver=a.solver, store=a.store, chunk_size=a.chunk_size, dtype=a.dtype,
            tol=a.tol, max_passes=a.max_passes, random_state=a.random_state, overwrite=a.overwrite,
            gram=a.gram, progress=not a.no_progress,
        )
    g = model.report.get("gram", {})
    if g.get("mode") == "store":
        print(f"Gram blocks: {g.get('computed_blocks')} computed, {g.get('reused_blocks')} reused from the store")
    resumed = (model.report.get("solver_info") or {}).get("resumed_at_pass")
    if resumed:
        print(f"Solver: resumed at pass {resumed} from the checkpoint in the store "
              f"({model.report.get('passes')} passes in all)")
    print(model.summary())
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    p = plan(a.input, n_components=a.n_components, kernel=a.kernel, gamma=a.gamma, degree=a.degree,
             coef0=a.coef0, solver=a.solver, store=a.store, chunk_size=a.chunk_size, dtype=a.dtype,
             tol=a.tol, max_passes=a.max_passes, gram=a.gram, cluster=a.cluster, measure=not a.no_measure)
    print(p)
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    print(load(a.store).summary())
    return 0


def cmd_transform(a: argparse.Namespace) -> int:
    # Refused before anything is read or written: an output that is, contains
    # or lies inside the input or the store; an existing output without --overwrite.
    output = check_output(a.output, {"input": a.input, "store": a.store}, a.overwrite)
    model = load(a.store)
    with _client(a):
        Z = model.transform(as_dask(a.input, min_samples=1, purpose="transform"))
        compute(da.to_zarr(Z, output, overwrite=a.overwrite, compute=False))
    print(f"wrote {Z.shape[0]} x {Z.shape[1]} projections to {a.output}")
    return 0


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


def cmd_demo(a: argparse.Namespace) -> int:
    workdir = a.dir or tempfile.mkdtemp(prefix="dkpca-demo-")
    os.makedirs(workdir, exist_ok=True)
    data = os.path.join(workdir, "shells.zarr")
    X, shell = make_demo_data(a.n_samples, return_labels=True)
    zarr.create_array(data, data=X, chunks=(4096, X.shape[1]), overwrite=True)
    print(f"sample data: {X.shape[0]} x {X.shape[1]} (three noisy shells) written to {data}")
    with start_local(n_workers=a.workers) as client:
        print(f"local Dask cluster: {len(client.nthreads())} workers, dashboard {client.dashboard_link}")
        t = time.perf_counter()
        model = fit(data, n_components=a.n_components, kernel="rbf", gamma=0.5, overwrite=True,
                    random_state=0, progress=True)
        elapsed = time.perf_counter() - t
    print(model.summary())
    print(f"fit took {elapsed:.2f}s; model and Gram matrix stored in {model.store}")
    q = min(2, model.n_components)
    kpca, raw = held_out_centroid_accuracy(model.embedding_[:, :q], shell), held_out_centroid_accuracy(X, shell)
    print(f"shells told apart: nearest-centroid accuracy {kpca:.1%} in kernel PCA components 1-{q} vs {raw:.1%} in "
          "the raw 10-D input (chance 33%; centroids fitted on half the points, scored on the other half)")
    try:
        fig = new_figure((6.4, 5.0))
    except ImportError:
        print("no plot written: matplotlib is not installed (pip install 'dkpca[plot]')")
    else:
        model.plot_embedding(c=shell, label="shell radius", ax=fig.add_subplot())
        print(f"embedding plot: {save_figure(fig, os.path.join(workdir, 'shells_embedding.png'))}")
    print(f"inspect it later with: dkpca info {model.store}")
    return 0


#: system errors a user causes and can fix, with what to do
_USER_ERRNOS = {
    errno.ENOSPC: "the filesystem is full; free space or choose a store on a larger filesystem (--store), then "
                  "rerun to resume",
    errno.EDQUOT: "the disk quota is exceeded; free space or choose another store (--store), then rerun to resume",
    errno.EACCES: "permission denied; choose a path you may write to",
    errno.EPERM: "operation not permitted; choose a path you may write to",
    errno.EROFS: "the filesystem is read-only; choose a writable store or output path",
}


def _error(message: str) -> int:
    """The one ``dkpca: error:`` line (a message never spans lines), exit status 2."""
    print("dkpca: error: " + " ".join(message.split()), file=sys.stderr)
    return 2


COMMANDS = {"fit": cmd_fit, "plan": cmd_plan, "info": cmd_info, "transform": cmd_transform, "demo": cmd_demo}


def _setup_logging(quiet: bool) -> None:
    """dkpca's INFO messages (plan, dashboard link) on stderr for the CLI."""
    log = logging.getLogger("dkpca")
    if quiet:
        log.setLevel(logging.WARNING)
        return
    if not any(getattr(h, "_dkpca_cli", False) for h in log.handlers):
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("dkpca: %(message)s"))
        h._dkpca_cli = True
        log.addHandler(h)
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    log = logging.getLogger("dkpca")
    old_level = log.level
    _setup_logging(getattr(a, "quiet", False))
    try:
        return COMMANDS[a.command](a)
    except USER_ERRORS as exc:
        return _error(str(exc))
    except OSError as exc:
        if exc.errno not in _USER_ERRNOS:
            raise  # a genuine bug or an unexpected system failure: keep the traceback
        where = f" ({exc.filename})" if exc.filename else ""
        return _error(f"{exc.strerror or exc}{where}: {_USER_ERRNOS[exc.errno]}")
    except KilledWorker as exc:
        return _error(f"a task kept killing its worker ({exc}); it probably ran out of memory: use a smaller "
                      "--chunk-size or give the workers more memory, then rerun (finished blocks are kept)")
    except KeyboardInterrupt:
        print("dkpca: interrupted; rerun the same command to resume from the store", file=sys.stderr)
        return 130
    finally:
        log.setLevel(old_level)


def _entry() -> Any:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
