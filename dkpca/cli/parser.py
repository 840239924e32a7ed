"""The ``dkpca`` command's parser: subcommands, options, their types; defaults and choices from the API.

The options ``fit`` and ``plan`` share (:data:`FIT_OPTIONS`) are generated
from the fields of :class:`dkpca.request.FitOptions` -- name, default, flags,
help and choices held there as field metadata -- and added to both parsers,
so neither ``--help`` can drift from the other or from the Python API
(``max_passes=None`` meaning :data:`~dkpca.request.DEFAULT_MAX_PASSES`); the
choices are the registries (``KERNEL_NAMES``, ``SOLVERS``, ``GRAM_MODES``,
``DTYPES``).  Only the standard library and those light registries load here:
``dkpca --help`` answers without Dask, Zarr or scikit-learn.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from dataclasses import Field, dataclass, fields
from typing import Any, NoReturn

from ..request import FitOptions
from ..version import __version__
from .errors import error_line

__all__ = ["build_parser", "HelpFormatter", "Parser", "Option", "FIT_OPTIONS", "ARG_TYPES", "INPUT_HELP",
           "n_components_arg", "positive_int", "config_arg", "log_args", "LOG_LEVELS", "wants_progress"]


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
        # argparse reads a value starting with '-' as an option unless it looks like -2 or -0.5: a negative
        # number in exponent form (--coef0 -1e-3) is 'expected one argument', the value's own spelling unnamed
        missing = re.fullmatch(r"argument (--[\w-]+)(?:/-\w)?: expected one argument", message)
        if missing:
            message += f" (one starting with '-', e.g. -1e-3, is written {missing.group(1)}=-1e-3)"
        self.exit(2, error_line(f"{message} (see '{self.prog} --help')"))

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, but an unrecognised option points at the subcommand's help, where its options are listed
        (argparse finds it at the top and said ``see 'dkpca --help'``)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            self.exit(2, error_line(f"unrecognized arguments: {' '.join(extras)} "
                                    f"(see '{self.prog}{f' {command}' if command else ''} --help')"))
        return parsed


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
        from ..cluster import config

        try:
            return getattr(config, check)(text, *args)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


@dataclass(frozen=True)
class Option:
    """One option of ``dkpca fit`` and ``dkpca plan``: a :class:`~dkpca.request.FitOptions` field's flags and help.

    Made from the field (:meth:`of`), never declared here: the default is the
    field's (the Python API's), and so are the help, the flags and the choices.
    """

    name: str
    flags: tuple[str, ...]
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None

    @classmethod
    def of(cls, f: Field) -> Option:
        meta = f.metadata
        return cls(f.name, meta["flags"], meta["help"], default=f.default,
                   type=ARG_TYPES.get(f.name, meta["type"]), choices=meta["choices"], metavar=meta["metavar"])

    def add(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, dest=self.name, default=self.default, type=self.type,
                            choices=self.choices, metavar=self.metavar, help=self.help)


#: the command line's parsers of a text that is not a plain ``int`` / ``float`` / string
ARG_TYPES: dict[str, Callable[[str], Any]] = {"n_components": n_components_arg}

#: the options of ``dkpca fit`` and ``dkpca plan``, both: the FitOptions fields that have flags
FIT_OPTIONS = tuple(Option.of(f) for f in fields(FitOptions) if f.metadata["flags"])


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="dkpca", description="Distributed, out-of-core kernel PCA.",
                    epilog="'dkpca COMMAND --help' shows a command's options and their defaults.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    f = sub.add_parser("fit", help="fit kernel PCA on data (Zarr, .npy, HDF5, netCDF, Parquet, CSV); store the model",
                       description="Fit kernel PCA on INPUT; the Gram matrix and the model go to a Zarr store. "
                                   "Rerunning an interrupted fit resumes from the store.")
    f.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    for option in FIT_OPTIONS:
        option.add(f)
    # 0, not the API's None: a command line run twice gives the same fit
    f.add_argument("--random-state", type=int, default=0, help="seed of the solver's starting block")
    cluster_args(f)
    f.add_argument("--overwrite", action="store_true", help="replace a store holding another fit")
    f.add_argument("--no-progress", action="store_true", help="no progress bars")

    pl = sub.add_parser("plan", help="print sizes, memory, passes and a time estimate without computing K",
                        description="Print what 'dkpca fit' with the same options would do: the solver and Gram "
                                    "mode auto picks and why, sizes, memory, passes and a time estimate from a "
                                    "short measured sample. Nothing is written.")
    pl.add_argument("input", metavar="INPUT", help=INPUT_HELP)
    for option in FIT_OPTIONS:
        option.add(pl)
    cluster_args(pl, starts=False)
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
    cluster_args(t)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    v = sub.add_parser("verify", help="check every chunk of a store and say what a rerun would recompute",
                       description="Read every chunk of a store, verify its CRC-32C, and say per part (data, "
                                   "Gram matrix, model, checkpoint) what a rerun of the fit would recompute. "
                                   "Changes nothing. Exit status 0: intact; 1: damaged.")
    v.add_argument("store", metavar="STORE", help="the store (or 'dkpca transform' output) to check")

    d = sub.add_parser("demo", help="write sample data to Zarr and fit it on a local Dask cluster",
                       description="Write three noisy shells in 10-D to Zarr, start a local Dask cluster, fit an "
                                   "rbf kernel PCA and print the spectrum. Without --dir nothing is left behind.")
    d.add_argument("--dir", default=None,
                   help="keep the sample data, its store and an embedding plot here (default: a temporary directory, "
                        "removed when the demo ends)")
    d.add_argument("--overwrite", action="store_true",
                   help="replace an earlier demo's files in --dir (its data, store and plot)")
    d.add_argument("--n-samples", type=positive_int, default=12000, help="number of sample points")
    d.add_argument("--n-components", type=positive_int, default=8, help="number of components")
    d.add_argument("--workers", type=positive_int, default=None,
                   help="local worker processes (default: one per core)")
    f.add_argument("--json", action="store_true",
                   help="print the fitted model's summary as one JSON object on stdout (as 'dkpca info --json')")
    for p in (f, pl, i, t, v, d):
        log_args(p)
    return parser


#: the levels ``--log-level`` takes (the logging module's names)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_args(p: argparse.ArgumentParser) -> None:
    """How much goes to stderr: ``--quiet``, ``--verbose`` (repeatable) or ``--log-level``; one of them."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quiet", "-q", action="store_true",
                   help="only errors: no progress, plan, dashboard link or warnings")
    g.add_argument("--verbose", "-v", action="count", default=None,
                   help="more on stderr: -v adds the reason for each decision of a fit (DEBUG) (default: none)")
    g.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=None, metavar="LEVEL",
                   help="level of the dkpca logger's messages on stderr: " + ", ".join(LOG_LEVELS)
                        + " (default: INFO: the plan line, stages, passes, the dashboard link)")


def cluster_args(p: argparse.ArgumentParser, starts: bool = True) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", type=config_arg("scheduler_address"), default=None, metavar="ADDR",
                   help="address of a running Dask scheduler, tcp://host:port or tls://host:port (default: none, "
                        "local threads)")
    g.add_argument("--scheduler-file", default=None, metavar="FILE",
                   help="JSON file of a running scheduler (dask scheduler --scheduler-file, dask-mpi) "
                        "(default: none)")
    g.add_argument("--cluster", type=config_arg("cluster_target"), default=None, metavar="NAME|FILE",
                   help=("local, slurm, pbs, kubernetes or gateway from your Dask configuration, or a cluster "
                         "file (a Dask config file, see cluster_configs/): " +
                         ("start it, run, shut it down" if starts else "size the workers, starting nothing") +
                         " (default: none)"))
    if starts:
        p.add_argument("--cluster-timeout", type=config_arg("duration_seconds", "a timeout"), default=None,
                       metavar="DURATION",
                       help="how long to wait for workers, e.g. 600s or 1h (default: Dask setting "
                            "dkpca.cluster.timeout, 10 minutes)")


def wants_progress(a: argparse.Namespace) -> bool:
    """Progress is part of the log, at INFO: shown where the command's log level (main sets it) shows INFO,
    unless ``--no-progress``."""
    return logging.getLogger("dkpca").getEffectiveLevel() <= logging.INFO and not getattr(a, "no_progress", False)
