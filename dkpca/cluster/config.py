"""Cluster files are Dask configuration files; what they describe, without starting anything.

A cluster file has the format of ``~/.config/dask/*.yaml``: the back ends'
own sections (``jobqueue.slurm.*``, ``jobqueue.pbs.*``, ``kubernetes.*``,
``gateway.*``), ``distributed.*`` and ``scheduler-address``.  It is merged over
the user's and the site's Dask configuration while the cluster starts, and the
back end reads it through its own configuration mechanism (dask-jobqueue's
``config_name``, dask-kubernetes' and dask-gateway's config keys), so a site's
``jobqueue.yaml`` works with no dkpca file at all (``--cluster slurm``).  dkpca
does not validate the back ends' keys: they reject what they do not know.

dkpca's own keys, all optional, live under ``dkpca.cluster``::

    backend:  local | slurm | pbs | kubernetes | gateway | scheduler
              (default: the one back-end section the file has; local if none)
    local:    LocalCluster keyword arguments (n_workers, threads_per_worker, memory_limit, ...)
    scale:    keyword arguments of cluster.scale() (dask-jobqueue: jobs or n; others: n)
    adapt:    keyword arguments of cluster.adapt(), instead of scale
    workers:  workers to wait for before work starts (default 1)
    timeout:  how long to wait for them (default 10 minutes)

Their defaults are in ``dkpca/dkpca.yaml`` (:mod:`dkpca.config`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.config
import yaml
from dask.utils import parse_bytes, parse_timedelta

from ..config import defaults, sections, setting, to_seconds, unknown_settings

__all__ = ["BACKENDS", "ClusterConfigError", "ClusterError", "ClusterSpec", "backend_class", "cluster_spec",
           "cluster_target", "duration_seconds", "is_loopback", "is_scheduler_address", "k8s_quantity",
           "scheduler_address", "walltime_seconds", "worker_lifetime_args"]

BACKENDS = ("local", "slurm", "pbs", "kubernetes", "gateway", "scheduler")

#: back end -> (module, class, extra that installs it)
_CLASSES = {
    "slurm": ("dask_jobqueue", "SLURMCluster", "slurm"),
    "pbs": ("dask_jobqueue", "PBSCluster", "pbs"),
    "kubernetes": ("dask_kubernetes.operator", "KubeCluster", "kubernetes"),
    "gateway": ("dask_gateway", "Gateway", "gateway"),
}

#: the config section whose presence names a back end
_SECTIONS = {"slurm": "jobqueue.slurm", "pbs": "jobqueue.pbs", "kubernetes": "kubernetes", "gateway": "gateway",
             "scheduler": "scheduler-address"}



class ClusterConfigError(ValueError):
    """A cluster file (or dict) cannot be used; the message names the key and the fix."""


class ClusterError(RuntimeError):
    """A cluster could not be started or reached; the message says what the back end reported."""


def backend_class(backend: str) -> Any:
    """The cluster class of ``backend`` (its optional package imported on demand)."""
    module, attr, extra = _CLASSES[backend]
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ImportError(
            f"the {backend!r} cluster back end needs the '{module.split('.')[0].replace('_', '-')}' package, "
            f"which is not installed; install it with: pip install 'dkpca[{extra}]'"
        ) from exc


@dataclass(frozen=True)
class ClusterSpec:
    """A back end and the Dask configuration (a file's contents) to start it with."""

    backend: str
    config: dict = field(default_factory=dict)
    source: str = "<config>"

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The file's configuration merged over the current Dask configuration, for the ``with`` block.

        ``dask.config.update`` merges nested sections key by key (so a file
        setting ``jobqueue.slurm.queue`` keeps the site's other
        ``jobqueue.slurm`` keys) and writes a key in the spelling the existing
        config uses (``worker_extra_args`` and ``worker-extra-args`` are one key).
        """
        if self.backend in _CLASSES:
            # Import the back end first: its package registers its config defaults on import, and inside
            # the block those would be undone with the file's settings when the block ends.
            with contextlib.suppress(ImportError):
                backend_class(self.backend)
        if not self.config:
            yield
            return
        merged = dask.config.update(copy.deepcopy(dask.config.config), copy.deepcopy(self.config))
        top = {dask.config.canonical_name(k, merged) for k in self.config}
        with dask.config.set({k: merged[k] for k in top}):
            yield

    def get(self, key: str, default: Any = None) -> Any:
        """``dask.config.get(key)`` with this file applied."""
        with self.applied():
            return dask.config.get(key, default)

    def dkpca(self, key: str) -> Any:
        """A ``dkpca.cluster.<key>`` value (the file's, else the user's, else ``dkpca.yaml``'s), checked."""
        with self.applied():
            value = setting(f"dkpca.cluster.{key}")
        where = f"{self.source}: dkpca.cluster.{key}"
        if key in ("local", "scale", "adapt"):
            if value is None:
                return {}
            if not isinstance(value, Mapping):
                raise ClusterConfigError(f"{where} must be a mapping of keyword arguments; got {value!r}.")
            for name in ("n", "jobs", "minimum", "maximum", "minimum_jobs", "maximum_jobs"):  # counts
                if name in value and (isinstance(value[name], bool) or not isinstance(value[name], int)
                                      or value[name] < 0):
                    raise ClusterConfigError(f"{where}.{name} must be a whole number >= 0; got {value[name]!r}.")
            return dict(value)
        if key == "workers":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClusterConfigError(f"{where} must be a positive integer; got {value!r}.")
        if key == "timeout":
            return duration_seconds(value, where)
        return value


def duration_seconds(value: Any, where: str) -> float:
    """A positive duration in seconds: ``"600s"``, ``"10m"``, ``"1h"`` (one of dask's units) or a number of seconds.

    Raises
    ------
    ClusterConfigError
        Not a duration (dask's parser says ``KeyError`` for an unknown unit), or not above zero.
    """
    try:
        return to_seconds(value, where, units=True)
    except ValueError as exc:
        raise ClusterConfigError(str(exc)) from None


def is_scheduler_address(s: str) -> bool:
    """Whether ``s`` reads as a scheduler address (``tcp://host:port``, ``tls://...``, ``host:port``)."""
    return "://" in s or bool(re.fullmatch(r"[\w.\-]+:\d+", s))


#: what ``--scheduler`` accepts, for messages
SCHEDULER_FORMS = "tls://host:port, tcp://host:port or host:port"


def scheduler_address(text: str) -> str:
    """``text`` if it reads as a scheduler address; else ``ValueError`` saying what it is and what to give.

    A file is not an address: a scheduler's JSON file goes to ``--scheduler-file``
    and a cluster file to ``--cluster`` (read as either, it would start a
    local cluster from a scheduler's JSON, or fail on YAML it is not).
    """
    if os.path.isfile(text):
        raise ValueError(f"{text!r} is a file, not a scheduler address: give a running scheduler's JSON file "
                         f"with --scheduler-file, a cluster file with --cluster, or an address ({SCHEDULER_FORMS}).")
    if not is_scheduler_address(text):
        raise ValueError(f"{text!r} is neither a scheduler address nor a cluster file: give a running scheduler's "
                         f"address ({SCHEDULER_FORMS}), its JSON file with --scheduler-file, or a cluster file or "
                         f"back end ({', '.join(b for b in BACKENDS if b != 'scheduler')}) with --cluster.")
    return text


def _infer_backend(cfg: Mapping, source: str) -> str:
    explicit = dask.config.get("dkpca.cluster.backend", None, config=cfg)
    if explicit is not None:
        if explicit not in BACKENDS:
            raise ClusterConfigError(f"{source}: dkpca.cluster.backend must be one of {', '.join(BACKENDS)}; "
                                     f"got {explicit!r}.")
        return explicit
    found = [b for b, key in _SECTIONS.items() if dask.config.get(key, None, config=cfg) is not None]
    if len(found) > 1:
        raise ClusterConfigError(
            f"{source}: configures several back ends ({', '.join(found)}); name the one to start with "
            f"'dkpca: {{cluster: {{backend: {found[0]}}}}}'."
        )
    return found[0] if found else "local"


def load_file(path: str) -> dict:
    """A cluster file's contents (a mapping), with errors that name the file."""
    if os.path.isdir(path):
        raise ClusterConfigError(f"cluster file {path!r} is a directory; give the cluster file (YAML) itself "
                                 "(see cluster_configs/).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"cluster file {path!r} does not exist; give a file (see cluster_configs/), a "
                                f"back end ({', '.join(b for b in BACKENDS if b != 'scheduler')}) or a running "
                                f"scheduler's address ({SCHEDULER_FORMS}).")
    with open(path, encoding="utf-8") as f:
        try:
            cfg = yaml.safe_load(f)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:  # a binary file is not YAML either
            raise ClusterConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())}); a cluster file is a "
                                     "Dask configuration file (see cluster_configs/).") from None
    if cfg is None:
        return {}
    if isinstance(cfg, Mapping) and cfg.get("type") == "Scheduler" and isinstance(cfg.get("address"), str):
        raise ClusterConfigError(f"{path}: a running scheduler's file (its address {cfg['address']!r}), not a "
                                 "cluster file; pass it with --scheduler-file (scheduler_file=) to use that scheduler.")
    if not isinstance(cfg, Mapping):
        raise ClusterConfigError(f"{path}: a cluster file is a Dask configuration file, a mapping such as "
                                 f"'jobqueue: {{slurm: {{...}}}}'; got {type(cfg).__name__}.")
    return dict(cfg)


def cluster_target(text: str) -> str:
    """A ``--cluster`` value, refused empty: an unset shell variable (``--cluster "$CLUSTER"``) would otherwise
    mean this machine's threads, without a word."""
    if not text.strip():
        raise ClusterConfigError("--cluster is empty (an unset variable?); name a back end "
                                 f"({', '.join(b for b in BACKENDS if b != 'scheduler')}) or a cluster file.")
    return text


def cluster_spec(target: str | os.PathLike | Mapping | ClusterSpec) -> ClusterSpec:
    """The :class:`ClusterSpec` of a back-end name, a cluster file or a configuration mapping.

    Raises
    ------
    FileNotFoundError
        ``target`` is neither a back end nor an existing file.
    ClusterConfigError
        The file is not a YAML mapping, or names no single back end.
    """
    if isinstance(target, ClusterSpec):
        return target
    if isinstance(target, Mapping):
        cfg, source = dict(target), "<config>"
    else:
        source = os.fspath(target)
        if source in BACKENDS and source != "scheduler" and not os.path.isfile(source):
            return ClusterSpec(source, {}, source)
        cfg = load_file(source)
    _refuse_scalars(cfg, source)
    _refuse_unknown(cfg, source)
    return ClusterSpec(_infer_backend(cfg, source), cfg, source)


def _refuse_scalars(cfg: Mapping, source: str) -> None:
    """``dkpca: 5`` or ``dkpca: {cluster: 5}`` where sections are mappings: refused by name (Dask's lookups of
    the keys beneath failed with "'int' object is not subscriptable")."""
    for where, value, _ in sections(dict(cfg)):
        if value is not None and not isinstance(value, Mapping):
            raise ClusterConfigError(f"{source}: {where} must be a mapping, e.g. 'dkpca: {{cluster: {{backend: "
                                     f"slurm}}}}'; got {value!r}.")


def _refuse_unknown(cfg: Mapping, source: str) -> None:
    """A ``dkpca`` or ``dkpca.cluster`` key that dkpca does not know (a typo, ``wokers: 4``) would be ignored:
    refused by name (in the user's own configuration it is warned of, :func:`dkpca.config.check_settings`)."""
    if unknown := unknown_settings(dict(cfg)):
        section = defaults()["dkpca"]
        known = section["cluster"] if unknown[0].startswith("dkpca.cluster.") else section
        raise ClusterConfigError(f"{source}: {unknown[0]} is not a dkpca setting (known: "
                                 f"{', '.join(sorted(known))}); correct its spelling or remove it.")


def is_loopback(address: Any) -> bool:
    """Whether ``address`` (host, host:port or URL) is on the loopback interface."""
    host = str(address).split("://")[-1]
    host = host[1:host.index("]")] if host.startswith("[") else host.rsplit(":", 1)[0] if ":" in host else host
    return host in ("localhost", "::1") or host.startswith("127.")


# -- batch walltimes ----------------------------------------------------------
def walltime_seconds(value: Any, where: str, plain: float = 60.0) -> float:
    """A batch walltime in seconds.

    SLURM's forms: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``; PBS's ``HH:MM:SS`` or plain seconds.  ``plain`` is the
    unit of a bare number (SLURM: minutes, PBS: seconds).
    """
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", str(value).strip())
    if not m:
        raise ClusterConfigError(f"{where}: walltime {value!r} is not [D-]HH:MM:SS; write e.g. '04:00:00'.")
    days, *rest = m.groups()
    parts = [int(x) for x in rest if x is not None]
    if days:  # after "D-" the first field is hours
        units = (3600, 60, 1)
    else:
        units = {1: (plain,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
    return sum(p * u for p, u in zip(parts, units[:len(parts)], strict=True)) + 86400 * int(days or 0)


def worker_lifetime_args(args: list, walltime: Any, where: str, plain: float = 60.0) -> list[str]:
    """``worker_extra_args`` with a ``--lifetime`` that retires workers before the walltime kills them.

    Without a walltime the arguments are returned as they are.  Without a
    ``--lifetime`` one is added: the walltime less a margin (10 % of it,
    between 1 and 10 minutes), staggered over half that margin so that the
    workers do not all leave at once.  A ``--lifetime`` (plus stagger) that
    does not end before the walltime is refused.
    """
    args = [str(a) for a in (args or [])]
    if walltime is None:
        return args
    wall = walltime_seconds(walltime, where, plain)
    given = {}
    for flag in ("--lifetime", "--lifetime-stagger"):
        if flag in args:
            i = args.index(flag)
            try:
                given[flag] = parse_timedelta(args[i + 1])
            except (IndexError, ValueError, KeyError):
                raise ClusterConfigError(f"{where}: worker-extra-args has {flag} without a duration (write one "
                                         "unit, e.g. '230m'; dask does not read '3h50m').") from None
    if "--lifetime" not in given:
        margin = min(600.0, max(60.0, 0.1 * wall))
        stagger = given.get("--lifetime-stagger", margin / 2)
        lifetime = wall - margin - stagger
        if lifetime <= 0:
            raise ClusterConfigError(f"{where}: walltime {walltime} is too short for workers to retire before it "
                                     "ends; ask for a longer walltime.")
        args += ["--lifetime", f"{int(lifetime)}s"]
        if "--lifetime-stagger" not in given:
            args += ["--lifetime-stagger", f"{int(stagger)}s"]
        return args
    if given["--lifetime"] + given.get("--lifetime-stagger", 0.0) >= wall:
        raise ClusterConfigError(
            f"{where}: worker --lifetime {given['--lifetime']:.0f}s + --lifetime-stagger "
            f"{given.get('--lifetime-stagger', 0.0):.0f}s does not end before the walltime {walltime} ({wall:.0f}s): "
            "the batch system would kill workers mid-task; shorten --lifetime or leave it out (dkpca then sets one)."
        )
    return args


# -- sizes --------------------------------------------------------------------
_K8S_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
               "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "m": 1e-3, "": 1}


def k8s_quantity(value: Any) -> float:
    """A Kubernetes resource quantity (``8Gi``, ``500m``, ``2``, ``1e9``) as a number."""
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][-+]?\d+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|)\s*", str(value))
    if not m:
        raise ClusterConfigError(f"kubernetes.resources: {value!r} is not a Kubernetes quantity such as '8Gi' or "
                                 "'500m'.")
    return float(m.group(1)) * _K8S_SUFFIX[m.group(2)]


def jobs_for(scale: Mapping, adapt: Mapping, processes: int) -> int:
    """Jobs to submit at the start for a dask-jobqueue cluster."""
    if adapt:
        if adapt.get("minimum_jobs"):
            return int(adapt["minimum_jobs"])
        return max(1, math.ceil(int(adapt.get("minimum", 1) or 1) / processes))
    if scale.get("jobs"):
        return int(scale["jobs"])
    if scale.get("n"):
        return math.ceil(int(scale["n"]) / processes)
    return 1


def memory_bytes(value: Any) -> int | None:
    """``"16GiB"`` or a number of bytes; None for None/"auto"."""
    if value in (None, "auto"):
        return None
    return int(parse_bytes(value)) if isinstance(value, str) else int(value)
