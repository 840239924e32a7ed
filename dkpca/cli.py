"""The ``dkpca`` command line: fit, plan, info, transform, demo.

Errors caused by the user's input exit with status 2 and one line on stderr
(``dkpca: error: ...``), never a traceback.  Log messages of the ``dkpca``
logger (the plan, the dashboard link) go to stderr at INFO level unless
``--quiet``, which leaves only errors; progress (a bar on a terminal, a line
per tenth of the work in a log) goes to stderr too; results go to stdout.

``dkpca --help`` must answer at once, so this module imports only the
standard library, numpy and the kernel and solver registries (for the
``choices`` of ``--kernel`` and ``--solver``) at import time; each command
imports the layers it runs (scikit-learn, Dask, distributed, Zarr) when it
runs, and the exception types of user errors are imported when an error is
being explained.  ``tests/test_cli.py`` checks this in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import logging
import math
import os
import select
import signal
import sys
import tempfile
import time
import warnings
from typing import Any, NoReturn

import numpy as np

from .kernels import KERNEL_NAMES
from .solvers import SOLVERS
from .version import __version__


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, except where there is nothing to show.

    A flag's default is off, and an option whose default is computed
    (``None`` in the parser) says in its own help what it defaults to.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action) or ""


class Parser(argparse.ArgumentParser):
    """argparse with dkpca's one error line (``dkpca: error: ...``, exit status 2) and defaults in ``--help``.

    argparse itself would print the usage and ``dkpca fit: error: ...``; every
    dkpca error, a usage error included, is one line with one prefix.
    Subcommand parsers are made by this class too (``add_subparsers`` uses
    the parent's class), so they inherit both.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, _error_line(f"{message} (see '{self.prog} --help')"))


#: what the input argument reads (the formats of dkpca.io.formats)
INPUT_HELP = ("data: a Zarr array or group (path or URL), a .npy file, an HDF5 dataset 'file.h5:/dataset', a netCDF "
              "or other xarray-readable variable 'file.nc:variable', or a Parquet or CSV file of numeric columns")


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


def positive_int(text: str) -> int:
    """A count that must be at least 1 (``demo --n-samples``, ``--workers``): refused by the parser, by name."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer (at least 1)")
    return value


def config_arg(check: str, *args: Any) -> Any:
    """An argparse type from a check in :mod:`dkpca.cluster.config` (``duration_seconds``, ``scheduler_address``),
    the rule the Python API and cluster files follow; imported only when the option is given (``dkpca --help``
    loads no Dask), its ``ValueError`` the parser's one line."""
    def convert(text: str) -> Any:
        from .cluster import config

        try:
            return getattr(config, check)(text, *args)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="rbf", choices=KERNEL_NAMES, help="kernel function (poly = polynomial)")
    p.add_argument("--gamma", type=float, default=None, help="kernel width (default: 1/n_features)")
    p.add_argument("--degree", type=int, default=3, help="degree of the poly kernel")
    p.add_argument("--coef0", type=float, default=1.0, help="offset of the poly and sigmoid kernels")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="dkpca", description="Distributed, out-of-core kernel PCA.",
                    epilog="'dkpca COMMAND --help' shows a command's options and their defaults.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fit", help="fit kernel PCA on data (Zarr, .npy, HDF5, netCDF, Parquet, CSV); store the model",
                       description="Fit kernel PCA on INPUT; the Gram matrix and the model go to a Zarr store. "
                                   "Rerunning an interrupted fit resumes from the store.")
    f.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    f.add_argument("--n-components", "-k", type=n_components_arg, default=2, metavar="K",
                   help="number of components, or a fraction of explained variance in (0, 1), e.g. 0.95")
    _kernel_args(f)
    f.add_argument("--solver", default="auto", choices=SOLVERS,
                   help="eigensolver; auto: dense for small n, else block Lanczos (randomized when its basis "
                        "would not fit in memory); nystrom (approximate) only on request")
    f.add_argument("--store", default=None, help="store path (default: INPUT.dkpca.zarr beside the input)")
    f.add_argument("--chunk-size", type=int, default=None, help="Gram block edge (default: about 4096, balanced)")
    f.add_argument("--dtype", default="auto", choices=["auto", "float32", "float64"],
                   help="precision of K; auto: float32 unless a sample of the data says it would lose the eigenvalues")
    f.add_argument("--gram", default="auto", choices=["auto", "store", "recompute", "memory"],
                   help="store K in Zarr, recompute its blocks every pass, hold it in memory, or auto: store "
                        "unless K does not fit on disk or recomputing is measured faster")
    f.add_argument("--tol", type=float, default=1e-6, help="stop when every residual is below tol x the largest "
                                                            "eigenvalue")
    f.add_argument("--max-passes", type=int, default=None, help="most passes over K (default: 60)")
    f.add_argument("--random-state", type=int, default=0, help="seed of the solver's starting block")
    _cluster_args(f)
    f.add_argument("--overwrite", action="store_true", help="replace a store holding another fit")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")

    pl = sub.add_parser("plan", help="print sizes, memory, passes and a time estimate without computing K",
                        description="Print what 'dkpca fit' with the same options would do: the solver and Gram "
                                    "mode auto picks and why, sizes, memory, passes and a time estimate from a "
                                    "short measured sample. Nothing is written.")
    pl.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    pl.add_argument("--n-components", "-k", type=n_components_arg, default=2, metavar="K",
                    help="as for fit: a number of components or a fraction such as 0.95")
    _kernel_args(pl)
    pl.add_argument("--solver", default="auto", choices=SOLVERS, help="eigensolver, as for fit")
    pl.add_argument("--store", default=None, help="store path, as for fit (default: INPUT.dkpca.zarr)")
    pl.add_argument("--chunk-size", type=int, default=None,
                    help="Gram block edge (default: about 4096, balanced; for a cluster, chosen so that the scheduler "
                         "takes under 5 %% of a pass)")
    pl.add_argument("--dtype", default="auto", choices=["auto", "float32", "float64"],
                    help="precision of K; auto: float32 unless a sample of the data says it would lose the eigenvalues")
    pl.add_argument("--gram", default="auto", choices=["auto", "store", "recompute", "memory"],
                    help="Gram mode, as for fit")
    pl.add_argument("--tol", type=float, default=1e-6, help="solver tolerance, as for fit")
    pl.add_argument("--max-passes", type=int, default=None, help="most passes over K (default: 60)")
    _cluster_args(pl, starts=False)
    pl.add_argument("--no-measure", action="store_true", help="sizes only, no timing sample")
    pl.add_argument("--fs-bandwidth", default=None, metavar="RATE",
                    help="assumed aggregate bandwidth of the store's filesystem, e.g. 100GB/s or bytes per second: "
                         "a pass takes at least K's bytes / RATE (default: the filesystem keeps up)")

    i = sub.add_parser("info", help="print a fitted model's spectrum and solver report",
                       description="Print a fitted model's spectrum, explained variance, kernel and solver report.")
    i.add_argument("store", metavar="STORE", help="store written by 'dkpca fit' (or an output of 'dkpca transform')")
    i.add_argument("--json", action="store_true", help="print the summary as one JSON object, for scripts")

    t = sub.add_parser("transform", help="project data with a fitted model into a new Zarr array",
                       description="Project INPUT with the model in STORE and write the projections to OUTPUT.")
    t.add_argument("store", metavar="STORE", help="store written by 'dkpca fit'")
    t.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    t.add_argument("output", metavar="OUTPUT",
                   help="new Zarr array for the projections (never the input, the store, or inside them)")
    t.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it is an earlier Zarr output")
    _cluster_args(t)

    v = sub.add_parser("verify", help="check every chunk of a store and say what a rerun would recompute",
                       description="Read every chunk of a store, verify its CRC-32C, and say per part (data, "
                                   "Gram matrix, model, checkpoint) what a rerun of the fit would recompute. "
                                   "Changes nothing. Exit status 0: intact; 1: damaged.")
    v.add_argument("store", metavar="STORE", help="the store (or 'dkpca transform' output) to check")

    d = sub.add_parser("demo", help="write sample data to Zarr and fit it on a local Dask cluster",
                       description="Write three noisy shells in 10-D to Zarr, start a local Dask cluster, fit an "
                                   "rbf kernel PCA and print the spectrum.")
    d.add_argument("--dir", default=None, help="where to write the sample data (default: a new temporary directory)")
    d.add_argument("--n-samples", type=positive_int, default=12000, help="number of sample points")
    d.add_argument("--n-components", type=positive_int, default=8, help="number of components")
    d.add_argument("--workers", type=positive_int, default=None,
                   help="local worker processes (default: one per core)")
    for p in (f, pl, i, t, d):
        p.add_argument("--quiet", "-q", action="store_true",
                       help="only errors: no progress, plan, dashboard link or warnings")
    return parser


def _cluster_args(p: argparse.ArgumentParser, starts: bool = True) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", type=config_arg("scheduler_address"), default=None, metavar="ADDR",
                   help="address of a running Dask scheduler, tcp://host:port or tls://host:port (default: none, "
                        "local threads)")
    g.add_argument("--scheduler-file", default=None, metavar="FILE",
                   help="JSON file of a running scheduler (dask scheduler --scheduler-file, dask-mpi) "
                        "(default: none)")
    g.add_argument("--cluster", default=None, metavar="NAME|FILE",
                   help=("local, slurm, pbs, kubernetes or gateway from your Dask configuration, or a cluster "
                         "file (a Dask config file, see cluster_configs/): " +
                         ("start it, run, shut it down" if starts else "size the workers, starting nothing") +
                         " (default: none)"))
    if starts:
        p.add_argument("--cluster-timeout", type=config_arg("duration_seconds", "a timeout"), default=None,
                       metavar="DURATION",
                       help="how long to wait for workers, e.g. 600s or 1h (default: Dask setting "
                            "dkpca.cluster.timeout, 10 minutes)")


@contextlib.contextmanager
def _client(a: argparse.Namespace, memory_per_worker: int | None = None):
    from .cluster import connected

    target = getattr(a, "cluster", None) or getattr(a, "scheduler", None)
    with connected(target, scheduler_file=getattr(a, "scheduler_file", None),
                   timeout=getattr(a, "cluster_timeout", None), memory_per_worker=memory_per_worker) as client:
        yield client


def _progress(a: argparse.Namespace) -> bool:
    return not getattr(a, "quiet", False) and not getattr(a, "no_progress", False)


def cmd_fit(a: argparse.Namespace) -> int:
    from .pipeline import fit
    from .planning import plan

    need = None
    if a.cluster:  # refused before anything starts when a Gram block task cannot fit in a worker
        need = plan(a.input, n_components=a.n_components, kernel=a.kernel, gamma=a.gamma, degree=a.degree,
                    coef0=a.coef0, solver=a.solver, store=a.store, chunk_size=a.chunk_size, dtype=a.dtype,
                    tol=a.tol, max_passes=a.max_passes, gram=a.gram, cluster=a.cluster, measure=False,
                    cluster_block=False).memory_per_worker  # fit's own block, not the one plan recommends
    with _client(a, need):
        model = fit(
            a.input, n_components=a.n_components, kernel=a.kernel, gamma=a.gamma, degree=a.degree,
            coef0=a.coef0, solver=a.solver, store=a.store, chunk_size=a.chunk_size, dtype=a.dtype,
            tol=a.tol, max_passes=a.max_passes, random_state=a.random_state, overwrite=a.overwrite,
            gram=a.gram, progress=_progress(a),
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
    from .planning import plan

    # a running scheduler is asked for its workers; a cluster is sized from its configuration, not started
    with _client(a) if (a.scheduler or a.scheduler_file) else contextlib.nullcontext() as client:
        p = plan(a.input, n_components=a.n_components, kernel=a.kernel, gamma=a.gamma, degree=a.degree,
                 coef0=a.coef0, solver=a.solver, store=a.store, chunk_size=a.chunk_size, dtype=a.dtype,
                 tol=a.tol, max_passes=a.max_passes, gram=a.gram, cluster=client or a.cluster,
                 measure=not a.no_measure, fs_bandwidth=a.fs_bandwidth)
    print(p)
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    from .model import load
    from .storage.outputs import describe, output_facts

    if (facts := output_facts(a.store)) is not None:  # a transform output: what made it, and whether complete
        print(json.dumps(_json_safe(facts), indent=2, allow_nan=False) if a.json else describe(facts))
        return 0
    model = load(a.store)
    print(json.dumps(model_facts(model), indent=2, allow_nan=False) if a.json else model.summary())
    return 0


def model_facts(model: Any) -> dict[str, Any]:
    """What ``dkpca info`` prints, as JSON-safe data (``dkpca info --json``).

    Non-finite numbers in the report become ``null``: JSON has no NaN, and
    strict parsers reject Python's ``NaN`` extension.
    """
    ratio = np.asarray(model.explained_variance_ratio_, dtype=float)
    facts = {
        "dkpca_version": __version__,
        "store": model.store,
        "n_samples": model.n_samples,
        "n_features": model.n_features,
        "n_components": model.n_components,
        "kernel": model.kernel.to_dict(),
        "eigenvalues": np.asarray(model.eigenvalues_, dtype=float).tolist(),
        "explained_variance_ratio": ratio.tolist(),
        "cumulative_explained_variance_ratio": np.cumsum(ratio).tolist(),
        "trace": float(model.trace_),
        "report": model.report,
    }
    return _json_safe(facts)


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


def cmd_verify(a: argparse.Namespace) -> int:
    from .model import load
    from .sparse import load_sparse
    from .storage import verify_store
    from .storage.outputs import verify_output

    if (found := verify_output(a.store)) is not None:  # a transform output: every chunk, and complete?
        print(f"{'ok ' if found.ok else 'BAD'}  {found.text}")
        print(f"transform output {a.store}: " + ("intact" if found.ok else "not usable (see above)"))
        return 0 if found.ok else 1
    findings = verify_store(a.store)
    for i, f in enumerate(findings):
        if f.part in ("model", "sparse_model") and f.ok and "verified" in f.text:
            try:  # the chunks are sound; is the content a valid model (every attribute checked)?
                load(a.store) if f.part == "model" else load_sparse(a.store)
            except ValueError as exc:
                findings[i] = dataclasses.replace(f, ok=False, text=f"{f.part}: {exc}")
    for f in findings:
        print(f"{'ok ' if f.ok else 'BAD'}  {f.text}")
    damaged = [f.part for f in findings if not f.ok]
    print(f"store {a.store}: " + (f"damaged ({', '.join(damaged)})" if damaged else "intact"))
    return 1 if damaged else 0


def cmd_transform(a: argparse.Namespace) -> int:
    from .io import as_dask, input_path, scan
    from .model import load
    from .storage import absolute, check_output
    from .storage.outputs import model_digest, output_state, prepare_output

    # Refused before anything is read or written: an output that is, contains
    # or lies inside the input (its file, for 'file.h5:/X') or the store, and
    # one holding anything but a transform output dkpca wrote (--overwrite or not).
    source = input_path(a.input)
    output = check_output(a.output, {"input": source, "store": a.store})
    output_state(output, a.output)
    model = load(a.store)
    with _client(a):
        X = as_dask(a.input, min_samples=1, purpose="transform")  # its row chunks are the output's
        Z = model.transform(X)  # lazy; checks the features first
        # what the output records of its origin, so that only the same command resumes it: the model's content
        # and the input's fingerprint (one read of the input, which also finds non-finite rows before any write)
        origin = {"store": model.store,
                  "model": model_digest([model.eigenvalues_, model.eigenvectors_, model.row_means_],
                                        {"kernel": model.kernel.to_dict(), "grand_mean": model.grand_mean_,
                                         "n_features": model.n_features}),
                  "input": {"path": absolute(source), "fingerprint": scan(X).to_dict()}}
        out = prepare_output(output, a.output, origin, Z.shape, (X.chunks[0][0], Z.shape[1]), a.overwrite)
        out.write(Z, progress=_progress(a))  # nothing left to write: only marked complete, if it was not yet
    if not out.todo:
        print(f"{a.output} is already complete: {Z.shape[0]} x {Z.shape[1]} projections by the same model of the "
              "same input; nothing to do")
        return 0
    kept = f" (resumed: {out.kept} of {out.total} chunks were already written)" if out.kept else ""
    print(f"wrote {Z.shape[0]} x {Z.shape[1]} projections to {a.output}{kept}")
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
    import zarr

    from .cluster import connected
    from .pipeline import fit
    from .plot import new_figure, save_figure
    from .storage import checksum_codecs

    workdir = a.dir or tempfile.mkdtemp(prefix="dkpca-demo-")
    os.makedirs(workdir, exist_ok=True)
    data = os.path.join(workdir, "shells.zarr")
    X, shell = make_demo_data(a.n_samples, return_labels=True)
    zarr.create_array(data, data=X, chunks=(4096, X.shape[1]), overwrite=True, compressors=checksum_codecs())
    print(f"sample data: {X.shape[0]} x {X.shape[1]} (three noisy shells) written to {data}")
    local = {"n_workers": a.workers} if a.workers else {}
    # the cluster's one log line names the workers and the dashboard
    with connected({"dkpca": {"cluster": {"backend": "local", "local": local}}}):
        t = time.perf_counter()
        model = fit(data, n_components=a.n_components, kernel="rbf", gamma=0.5, overwrite=True,
                    random_state=0, progress=_progress(a))
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


def _error_line(message: str) -> str:
    """The one ``dkpca: error:`` line (a message never spans lines)."""
    return "dkpca: error: " + " ".join(message.split()) + "\n"


def _error(message: str) -> int:
    """Print the one error line; exit status 2."""
    sys.stderr.write(_error_line(message))
    return 2


def explain(exc: BaseException) -> str | None:
    """The one-line message for an error the user caused and can fix; None for a bug (keep the traceback)."""
    # imported only once an error happened: importing them costs ``dkpca --help`` seconds
    from distributed.scheduler import KilledWorker

    from .cluster import ClusterError
    from .execution import LostComputationError
    from .storage import InsufficientDiskSpace, StoreLockedError

    if isinstance(exc, (ValueError, FileNotFoundError, FileExistsError, InsufficientDiskSpace, StoreLockedError,
                        NotADirectoryError, ImportError, ClusterError, LostComputationError)):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in _USER_ERRNOS:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}: {_USER_ERRNOS[exc.errno]}"
    if isinstance(exc, KilledWorker):
        return (f"a task kept killing its worker ({exc}); it probably ran out of memory: use a smaller "
                "--chunk-size or give the workers more memory, then rerun (finished blocks are kept)")
    return None


COMMANDS = {"fit": cmd_fit, "plan": cmd_plan, "info": cmd_info, "transform": cmd_transform, "verify": cmd_verify,
            "demo": cmd_demo}


def _setup_logging(quiet: bool) -> logging.Handler | None:
    """dkpca's INFO messages (plan, dashboard link, passes) on stderr for the CLI; only errors when quiet.

    Returns the handler added, which :func:`main` removes when the command
    ends: a handler left behind would hold this call's ``sys.stderr``, which a
    caller of ``main`` (a test's capture, a notebook) may have closed since.
    """
    log = logging.getLogger("dkpca")
    if quiet:
        log.setLevel(logging.ERROR)
        return None
    log.setLevel(logging.INFO)
    if any(getattr(h, "_dkpca_cli", False) for h in log.handlers):
        return None  # main() called from within a command (nested): its caller's handler speaks
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("dkpca: %(message)s"))
    h._dkpca_cli = True
    log.addHandler(h)
    return h


#: what the line after Ctrl-C says per command: only what a rerun really does
_INTERRUPTED = {
    "fit": "; rerun the same command to resume from the store",
    "transform": "; rerun the same command to finish {a.output} (chunks already written are kept; until then "
                 "it is marked incomplete)",
    "demo": "; rerun the demo to start it again",
}


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is not a file
        return True  # the BrokenPipeError itself is the best evidence left


def _reader_gone() -> int:
    """Exit quietly when the reader of stdout went away, as ``head`` expects of a writer.

    Python's advice (``signal`` docs, "Note on SIGPIPE"): stdout to devnull, so
    the last flush at exit cannot fail again.  The status is a SIGPIPE death's,
    as a C tool's (141, what ``set -o pipefail`` reports of ``yes | head -1``):
    not 1, ``dkpca verify``'s "damaged", nor 2, a user error.
    """
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + getattr(signal, "SIGPIPE", 13)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    log, dist = logging.getLogger("dkpca"), logging.getLogger("distributed")
    old_level, old_dist = log.level, dist.level
    quiet = getattr(a, "quiet", False)
    handler = _setup_logging(quiet)
    if quiet:  # e.g. distributed's "port in use" notices
        dist.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            status = COMMANDS[a.command](a)
            sys.stdout.flush()  # a reader that went away ('dkpca info STORE | head -1') is found here, not at exit
            return status
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe (a socket): not the reader of our output
        return _reader_gone()
    except Exception as exc:
        message = explain(exc)
        if message is None:
            raise  # a genuine bug or an unexpected system failure: keep the traceback
        return _error(message)
    except KeyboardInterrupt:
        print(f"dkpca: interrupted{_INTERRUPTED.get(a.command, '').format(a=a)}", file=sys.stderr)
        return 130
    finally:
        log.setLevel(old_level)
        dist.setLevel(old_dist)
        if handler is not None:
            log.removeHandler(handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
