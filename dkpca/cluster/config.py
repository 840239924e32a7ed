"""Start or connect to a Dask cluster from a YAML file or a scheduler address.

``connect("cluster_configs/slurm.yaml")`` or ``connect("tcp://host:8786")``
returns a :class:`distributed.Client` that every dkpca computation then uses
(``dkpca.execution`` picks up the active client).  A config file names one
back end and its settings::

    backend: local | slurm | pbs | kubernetes | gateway | scheduler
    cluster:  {...}            # keyword arguments of the back end's cluster class
    scale:    {jobs: 4}        # or {workers: 8}; or adapt: {minimum: 1, maximum: 10}
    address:  tls://host:8786  # backend: scheduler only
    security: {...}            # distributed.security.Security arguments (TLS)
    gateway:  {address: ...}   # backend: gateway only
    cluster_options: {...}     # backend: gateway only
    client:   {timeout: 60s, wait_for_workers: 2}

Everything is validated before anything starts (:func:`load_config`), with a
message naming the file, the key and the fix.  Back-end packages are optional
extras (``pip install 'dkpca[slurm]'``); a missing one is reported with the
extra to install.

Safety defaults: the Dask dashboard has no authentication, so a dashboard
bound to every interface (``":8787"``, ``"0.0.0.0:..."``) is refused in local
configs; job-queue configs with a walltime should retire workers before the
batch system kills them (``worker_extra_args: ["--lifetime", ...,
"--lifetime-stagger", ...]``), which is checked against the walltime.

``start_local`` is the embedded default used by ``dkpca demo``: a
``LocalCluster`` of single-threaded worker processes with the dashboard bound
to 127.0.0.1 only.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml
from dask.utils import parse_bytes, parse_timedelta
from distributed import LocalCluster, Nanny

__all__ = ["BACKENDS", "ClusterConfigError", "backend_class", "is_loopback", "load_config", "validate_config"]

logger = logging.getLogger("dkpca")

BACKENDS = ("local", "slurm", "pbs", "kubernetes", "gateway", "scheduler")

#: back end -> (module, attribute, extra that installs it)
_CLASSES = {
    "slurm": ("dask_jobqueue", "SLURMCluster", "slurm"),
    "pbs": ("dask_jobqueue", "PBSCluster", "pbs"),
    "kubernetes": ("dask_kubernetes.operator", "KubeCluster", "kubernetes"),
    "gateway": ("dask_gateway", "Gateway", "gateway"),
}

_TOP_KEYS = {
    "backend", "description", "cluster", "scale", "adapt", "address", "security", "gateway",
    "cluster_options", "client",
}
_SECURITY_KEYS = {
    "require_encryption", "tls_ca_file", "tls_client_cert", "tls_client_key", "tls_scheduler_cert",
    "tls_scheduler_key", "tls_worker_cert", "tls_worker_key", "tls_min_version", "tls_max_version",
    "tls_ciphers", "extra_conn_args", "temporary",
}
_CLIENT_KEYS = {"timeout", "wait_for_workers", "wait_timeout"}
_GATEWAY_KEYS = {"address", "proxy_address", "public_address", "auth"}
_KUBE_KEYS = {
    "name", "namespace", "image", "n_workers", "resources", "env", "worker_command", "port_forward_cluster_ip",
    "create_mode", "shutdown_on_close", "resource_timeout", "scheduler_service_type", "custom_cluster_spec",
    "scheduler_forward_port", "jupyter", "idle_timeout", "quiet",
}
_JOBQUEUE_KEYS = {  # dask-jobqueue 0.9 (used when it is not installed to check against)
    "cores", "memory", "processes", "nanny", "protocol", "security", "interface", "death_timeout",
    "local_directory", "worker_command", "worker_extra_args", "job_extra_directives", "job_script_prologue",
    "job_directives_skip", "log_directory", "shebang", "python", "job_name", "queue", "project", "account",
    "walltime", "job_cpu", "job_mem", "resource_spec", "n_workers", "shared_temp_directory", "silence_logs",
    "name", "dashboard_address", "host", "scheduler_options", "scheduler_cls", "config_name",
}


class ClusterConfigError(ValueError):
    """A cluster config file (or dict) is malformed; the message names key and fix."""


def _missing_extra(backend: str) -> ImportError:
    module, _, extra = _CLASSES[backend]
    return ImportError(
        f"the {backend!r} cluster back end needs the '{module.split('.')[0].replace('_', '-')}' package, "
        f"which is not installed; install it with: pip install 'dkpca[{extra}]'"
    )


def backend_class(backend: str) -> Any:
    """The cluster class of ``backend`` (its optional package imported on demand)."""
    module, attr, _ = _CLASSES[backend]
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise _missing_extra(backend) from exc


# -- validation -------------------------------------------------------------
def is_loopback(address: Any) -> bool:
    if address is None or address is False:
        return True  # no dashboard at all
    host = str(address).split("://")[-1]
    host = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:host.index("]")]
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _walltime_seconds(value: Any, where: str) -> float:
    """SLURM/PBS walltime ``[D-]HH:MM:SS`` / ``MM:SS`` / minutes -> seconds."""
    s = str(value).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        raise ClusterConfigError(f"{where}: walltime {value!r} is not [D-]HH:MM:SS; write e.g. '04:00:00'.")
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if len(parts) == 1:  # plain minutes
        secs = parts[0] * 60
    elif len(parts) == 2:  # MM:SS
        secs = parts[0] * 60 + parts[1]
    else:
        secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return secs + int(days or 0) * 86400


def _pos_int(cfg: Mapping, key: str, where: str, required: bool = False, minimum: int = 1) -> None:
    if key not in cfg:
        if required:
            raise ClusterConfigError(f"{where}: '{key}' is required (a positive integer).")
        return
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ClusterConfigError(f"{where}: '{key}' must be an integer >= {minimum}; got {v!r}.")


def _bytes(cfg: Mapping, key: str, where: str, required: bool = False) -> None:
    if key not in cfg:
        if required:
            raise ClusterConfigError(f"{where}: '{key}' is required (e.g. '16GiB').")
        return
    v = cfg[key]
    if v in (None, "auto") and key == "memory_limit":
        return
    try:
        parse_bytes(v)
    except (ValueError, TypeError):
        raise ClusterConfigError(f"{where}: '{key}' = {v!r} is not a size; write e.g. '16GiB'.") from None


def _str_list(cfg: Mapping, key: str, where: str) -> list[str]:
    v = cfg.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) for x in v):
        raise ClusterConfigError(f"{where}: '{key}' must be a list of strings; got {v!r}.")
    return [str(x) for x in v]


def _mapping(cfg: Mapping, key: str, where: str) -> dict:
    v = cfg.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ClusterConfigError(f"{where}: '{key}' must be a mapping (key: value lines); got {v!r}.")
    return dict(v)


def _unknown(keys, allowed, where: str, what: str) -> None:
    bad = sorted(set(keys) - set(allowed))
    if bad:
        raise ClusterConfigError(
            f"{where}: unknown {what} {', '.join(map(repr, bad))}; allowed: {', '.join(sorted(allowed))}."
        )


def _local_keys() -> set[str]:
    keys = set(inspect.signature(LocalCluster.__init__).parameters) | set(inspect.signature(Nanny.__init__).parameters)
    return keys - {"self", "kwargs", "loop", "asynchronous", "scheduler_ip", "scheduler_port", "scheduler_file"}


def _jobqueue_keys(backend: str) -> set[str]:
    """Options of the installed dask-jobqueue class (static list when absent)."""
    try:
        from dask_jobqueue.core import Job, JobQueueCluster

        job = backend_class(backend).job_cls
    except ImportError:
        return _JOBQUEUE_KEYS
    keys = set()
    for f in (Job.__init__, job.__init__, JobQueueCluster.__init__):
        keys |= set(inspect.signature(f).parameters)
    return keys - {"self", "scheduler", "job_cls", "loop", "asynchronous", "base_class_kwargs", "job_kwargs"}


def _check_dashboard(value: Any, where: str) -> None:
    if not is_loopback(value):
        raise ClusterConfigError(
            f"{where}: dashboard_address {value!r} exposes the unauthenticated Dask dashboard on every "
            "interface; bind it to the loopback interface, e.g. '127.0.0.1:8787' (reach it through an "
            "SSH tunnel), or set it to null to disable it."
        )


def _check_jobqueue(c: dict, backend: str, where: str) -> None:
    _unknown(c, _jobqueue_keys(backend), where, "option")
    _pos_int(c, "cores", where, required=True)
    _bytes(c, "memory", where, required=True)
    _pos_int(c, "processes", where)
    if c.get("processes", 1) > c["cores"]:
        raise ClusterConfigError(
            f"{where}: processes={c['processes']} exceeds cores={c['cores']}; each worker process needs a core."
        )
    for key in ("job_extra_directives", "job_script_prologue", "job_directives_skip"):
        _str_list(c, key, where)
    args = _str_list(c, "worker_extra_args", where)
    if "local_directory" in c and not isinstance(c["local_directory"], str):
        raise ClusterConfigError(f"{where}: 'local_directory' must be a path string (e.g. '$TMPDIR').")
    opts = _mapping(c, "scheduler_options", where)
    if "dashboard_address" in opts:
        _check_dashboard(opts["dashboard_address"], f"{where}.scheduler_options")
    if "walltime" not in c:
        return
    wall = _walltime_seconds(c["walltime"], where)
    life = stagger = 0.0
    for flag in ("--lifetime", "--lifetime-stagger"):
        if flag in args:
            i = args.index(flag)
            if i + 1 >= len(args):
                raise ClusterConfigError(f"{where}: worker_extra_args has {flag} without a value.")
            try:
                secs = parse_timedelta(args[i + 1])
            except (ValueError, KeyError):
                raise ClusterConfigError(
                    f"{where}: {flag} {args[i + 1]!r} is not a duration; write one unit, e.g. '230m' or '3h' "
                    "(dask does not understand compound forms like '3h50m')."
                ) from None
            if flag == "--lifetime":
                life = secs
            else:
                stagger = secs
    if not life:
        logger.warning(
            "%s: walltime %s without a worker '--lifetime': the batch system will kill workers "
            "mid-task at the walltime; add worker_extra_args: ['--lifetime', '<walltime minus 10 min, e.g. 230m>', "
            "'--lifetime-stagger', '4m']", where, c["walltime"])
    elif life + stagger >= wall:
        raise ClusterConfigError(
            f"{where}: worker --lifetime {life:.0f}s + --lifetime-stagger {stagger:.0f}s is not shorter than "
            f"the walltime {c['walltime']} ({wall:.0f}s): workers would be killed before retiring; "
            "shorten --lifetime (e.g. walltime minus 10 minutes)."
        )


def validate_config(cfg: Any, source: str = "<config>") -> dict:
    """Check a cluster config (parsed YAML) and return it as a plain dict.

    Raises
    ------
    ClusterConfigError
        Anything wrong: the message names ``source``, the key and the fix.
    """
    if not isinstance(cfg, Mapping):
        raise ClusterConfigError(f"{source}: a cluster config must be a mapping with a 'backend' key; got {cfg!r}.")
    cfg = dict(cfg)
    _unknown(cfg, _TOP_KEYS, source, "top-level key")
    backend = cfg.get("backend")
    if backend not in BACKENDS:
        raise ClusterConfigError(f"{source}: 'backend' must be one of {', '.join(BACKENDS)}; got {backend!r}.")
    c = _mapping(cfg, "cluster", source)
    where = f"{source}: cluster"
    if backend == "local":
        _unknown(c, _local_keys(), where, "LocalCluster option")
        _pos_int(c, "n_workers", where)
        _pos_int(c, "threads_per_worker", where)
        _bytes(c, "memory_limit", where)
        _check_dashboard(c.get("dashboard_address", "127.0.0.1:0"), where)
        if "host" in c and not is_loopback(c["host"]):
            logger.warning("%s: host %r makes the local scheduler reachable from the network", where, c["host"])
    elif backend in ("slurm", "pbs"):
        _check_jobqueue(c, backend, where)
    elif backend == "kubernetes":
        _unknown(c, _KUBE_KEYS, where, "KubeCluster option")
        for key in ("name", "image", "namespace"):
            if key in c and not isinstance(c[key], str):
                raise ClusterConfigError(f"{where}: '{key}' must be a string; got {c[key]!r}.")
        _pos_int(c, "n_workers", where, minimum=0)
        _mapping(c, "resources", where)
        _mapping(c, "env", where)
    elif backend == "gateway":
        if c:
            raise ClusterConfigError(f"{source}: backend 'gateway' takes 'gateway:' and 'cluster_options:', "
                                     "not 'cluster:'.")
        g = _mapping(cfg, "gateway", source)
        _unknown(g, _GATEWAY_KEYS, f"{source}: gateway", "option")
        if not isinstance(g.get("address"), str):
            raise ClusterConfigError(f"{source}: gateway.address (the gateway's URL) is required.")
        _mapping(cfg, "cluster_options", source)
    if backend == "scheduler":
        addr = cfg.get("address")
        if not isinstance(addr, str) or "://" not in addr:
            raise ClusterConfigError(
                f"{source}: backend 'scheduler' needs 'address: tcp://host:port' (or tls://...); got {addr!r}."
            )
        if c:
            raise ClusterConfigError(f"{source}: backend 'scheduler' connects to a running scheduler; "
                                     "remove the 'cluster:' section.")
    elif "address" in cfg:
        raise ClusterConfigError(f"{source}: 'address' is only for backend 'scheduler'.")
    if backend != "gateway":
        for key in ("gateway", "cluster_options"):
            if key in cfg:
                raise ClusterConfigError(f"{source}: '{key}' is only for backend 'gateway'.")
    sec = _mapping(cfg, "security", source)
    _unknown(sec, _SECURITY_KEYS, f"{source}: security", "option")
    if sec.get("temporary") and backend != "local":
        raise ClusterConfigError(f"{source}: security.temporary (self-signed, in-memory certificates) works "
                                 "only with backend 'local'; give tls_* files for other back ends.")
    if sec.get("require_encryption") and backend == "scheduler" and not cfg["address"].startswith("tls://"):
        raise ClusterConfigError(f"{source}: security.require_encryption needs a tls:// address; "
                                 f"got {cfg['address']!r}.")
    if "scale" in cfg and "adapt" in cfg:
        raise ClusterConfigError(f"{source}: give either 'scale' or 'adapt', not both.")
    scale = _mapping(cfg, "scale", source)
    _unknown(scale, {"jobs", "workers", "n", "cores", "memory"}, f"{source}: scale", "option")
    for key in ("jobs", "workers", "n"):
        _pos_int(scale, key, f"{source}: scale", minimum=0)
    adapt = _mapping(cfg, "adapt", source)
    _unknown(adapt, {"minimum", "maximum", "minimum_jobs", "maximum_jobs", "minimum_cores", "maximum_cores",
                     "minimum_memory", "maximum_memory", "wait_count", "interval"}, f"{source}: adapt", "option")
    if (scale or adapt) and backend == "scheduler":
        raise ClusterConfigError(f"{source}: 'scale'/'adapt' do not apply to a running scheduler.")
    cl = _mapping(cfg, "client", source)
    _unknown(cl, _CLIENT_KEYS, f"{source}: client", "option")
    _pos_int(cl, "wait_for_workers", f"{source}: client", minimum=0)
    return cfg


def load_config(path: str | os.PathLike) -> dict:
    """Read and validate a cluster config YAML file.

    Raises
    ------
    FileNotFoundError
        No such file.
    ClusterConfigError
        Not YAML, or not a valid config (message names the key and the fix).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"cluster config {path!r} does not exist; see cluster_configs/ for examples.")
    with open(path) as f:
        try:
            cfg = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ClusterConfigError(f"{path}: not valid YAML ({exc}).") from None
    return validate_config(cfg, source=path)


