"""Clusters: Dask configuration files, starting and reaching schedulers, TLS, failing fast.

Batch systems are faked by small ``sbatch``/``scancel`` (``qsub``/``qdel``)
programs put first on PATH: they record the job script dkpca submits and, in
"run" mode, run it as a detached process group (so the workers really start,
reading their TLS credentials from the files the script names), or reject it,
or accept it and never start it.  ``scancel`` kills the job's process group
and records its id, so a test can see that nothing is left running.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import socket
import subprocess
import sys
import time

import dask
import dask_jobqueue  # noqa: F401 - registers jobqueue's config defaults before tests set jobqueue keys
import numpy as np
import psutil
import pytest
import yaml
from distributed import Client, LocalCluster
from distributed.security import Security
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import cluster as dc
from dkpca.cluster.config import k8s_quantity, walltime_seconds, worker_lifetime_args
from dkpca.cluster.resources import LOCAL_HOUSEKEEPING, LOCAL_MALLOC, local_housekeeping, sizing_job

from .conftest import ROOT, dkpca_cmd, gram_writers, make_data, reference_eigh, write_data, written_block

CONFIGS = os.path.join(ROOT, "cluster_configs")

FAKE_SUBMIT = r'''#!{python}
import json, os, re, stat, subprocess, sys, time
log, mode = os.environ["FAKE_BATCH_LOG"], os.environ.get("FAKE_BATCH_MODE", "run")
if mode == "hang":  # the batch system does not answer (slurmctld down: sbatch retries)
    open(os.path.join(log, "submit.pid"), "w").write(str(os.getpid()))
    time.sleep(3600)
if mode == "reject":
    print("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
          file=sys.stderr)
    sys.exit(1)
n = len([f for f in os.listdir(log) if f.endswith(".sh")])
text = open(sys.argv[-1]).read()
path = os.path.join(log, f"job{{n}}.sh")
open(path, "w").write(text)
files = re.findall(r"--tls-(?:ca-file|cert|key) (\S+)", text)
modes = {{f: oct(stat.S_IMODE(os.stat(f).st_mode)) for f in files + [os.path.dirname(f) for f in files]}}
json.dump(modes, open(os.path.join(log, f"job{{n}}.modes.json"), "w"))
if mode == "run":
    out = open(os.path.join(log, f"job{{n}}.log"), "w")
    job = subprocess.Popen(["bash", path], start_new_session=True, stdout=out, stderr=subprocess.STDOUT).pid
else:  # "queue": accepted, never starts
    job = 4242 + n
print(f"Submitted batch job {{job}}")
'''

FAKE_CANCEL = r'''#!{python}
import os, signal, sys
with open(os.path.join(os.environ["FAKE_BATCH_LOG"], "cancelled"), "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
for job in sys.argv[1:]:
    try:
        os.killpg(int(job.split(".")[0]), signal.SIGTERM)
    except (ProcessLookupError, PermissionError, ValueError):
        pass
'''


def fake_batch(tmp_path, submit="sbatch", cancel="scancel", mode="run") -> dict:
    """A fake batch system first on PATH; returns the environment that uses it."""
    bindir, log = tmp_path / "fakebin", tmp_path / "batchlog"
    bindir.mkdir()
    log.mkdir()
    for name, text in ((submit, FAKE_SUBMIT), (cancel, FAKE_CANCEL)):
        p = bindir / name
        p.write_text(text.format(python=sys.executable))
        p.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "FAKE_BATCH_LOG": str(log), "FAKE_BATCH_MODE": mode}


def cancelled(env: dict) -> list[str]:
    path = os.path.join(env["FAKE_BATCH_LOG"], "cancelled")
    return open(path).read().split() if os.path.exists(path) else []


def write_config(path, cfg: dict) -> str:
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def slurm_test_config(tmp_path, **dkpca_keys) -> dict:
    """A SLURM cluster file whose jobs can run on this machine (the fake sbatch runs them)."""
    return {"jobqueue": {"slurm": {
        "cores": 2, "processes": 2, "memory": "2GiB", "walltime": "00:30:00", "job-script-prologue": [],
        "local-directory": str(tmp_path / "scratch"), "log-directory": str(tmp_path / "joblogs"),
        "scheduler-options": {"host": "127.0.0.1"}}},
        "dkpca": {"cluster": {"scale": {"jobs": 1}, "workers": 2, **dkpca_keys}}}


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dkpca: error: "), proc.stderr
    return lines[0]


def run_cli(*args, env=None, timeout=180):
    return subprocess.run(dkpca_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


# -- cluster files are Dask configuration ---------------------------------------------
@pytest.mark.parametrize("name, backend, workers, threads, memory", [
    ("slurm.yaml", "slurm", 16, 1, 8 * 2**30),      # 4 jobs x 4 processes, 32 GiB / 4
    ("pbs.yaml", "pbs", 64, 1, 8 * 2**30),          # up to 8 jobs (adapt) x 8 processes
    ("local.yaml", "local", 2, 1, 4 * 2**30),
    ("kubernetes.yaml", "kubernetes", 8, 2, 8 * 2**30),  # 8Gi is 8 GiB (never "8GiBB")
    ("gateway.yaml", "gateway", 10, 2, 8 * 2**30),  # worker_memory in GiB
    ("tls.yaml", "scheduler", None, None, None),    # a running scheduler says itself
])
def test_example_names_its_backend_and_sizes(name, backend, workers, threads, memory):
    spec = dc.cluster_spec(os.path.join(CONFIGS, name))
    assert spec.backend == backend
    assert dc.worker_resources(spec) == {"workers": workers, "threads_per_worker": threads,
                                         "memory_per_worker": memory}


def test_site_jobqueue_config_needs_no_dkpca_file():
    site = {"jobqueue.slurm.cores": 8, "jobqueue.slurm.processes": 2, "jobqueue.slurm.memory": "16GiB"}
    with dask.config.set(site):
        res = dc.worker_resources(dc.cluster_spec("slurm"))
    assert res == {"workers": 2, "threads_per_worker": 4, "memory_per_worker": 8 * 2**30}


def test_file_is_merged_over_the_site_config(tmp_path):
    path = write_config(tmp_path / "c.yaml", {"jobqueue": {"slurm": {"memory": "64GiB"}}})
    with dask.config.set({"jobqueue.slurm.queue": "site-queue", "jobqueue.slurm.cores": 4}):
        spec = dc.cluster_spec(path)
        assert spec.get("jobqueue.slurm.memory") == "64GiB" and spec.get("jobqueue.slurm.queue") == "site-queue"
    assert dask.config.get("jobqueue.slurm.memory") != "64GiB"  # applied only while in use


def test_underscore_and_hyphen_keys_are_one_key(tmp_path):
    path = write_config(tmp_path / "c.yaml", {"jobqueue": {"slurm": {"worker_extra_args": ["--resources", "a=1"]}}})
    with dask.config.set({"jobqueue.slurm.worker-extra-args": ["--site"]}):
        assert dc.cluster_spec(path).get("jobqueue.slurm.worker-extra-args") == ["--resources", "a=1"]


def test_backend_options_pass_through_to_the_backend(tmp_path):
    # dkpca keeps no list of dask-jobqueue's keys: the back end reads them (and rejects bad values)
    path = write_config(tmp_path / "c.yaml", {"jobqueue": {"slurm": {"cores": 2, "memory": "4GiB",
                                                                   "job-cpu": 7, "job-mem": "5GB"}}})
    script = sizing_job(dc.cluster_spec(path)).job_script()
    assert "#SBATCH --cpus-per-task=7" in script and "#SBATCH --mem=5G" in script


def test_two_backends_in_one_file_need_a_choice(tmp_path):
    cfg = {"jobqueue": {"slurm": {"cores": 1}}, "kubernetes": {"image": "x"}}
    with pytest.raises(dc.ClusterConfigError, match="backend: slurm"):
        dc.cluster_spec(write_config(tmp_path / "c.yaml", cfg))
    cfg["dkpca"] = {"cluster": {"backend": "kubernetes"}}
    assert dc.cluster_spec(write_config(tmp_path / "c.yaml", cfg)).backend == "kubernetes"


@pytest.mark.parametrize("text, message", [
    ("jobqueue: [slurm\n", "not valid YAML"),
    ("- a\n- b\n", "a Dask configuration file"),
    ("dkpca: {cluster: {backend: lsf}}\n", "must be one of"),
    ("dkpca: {cluster: {timeout: soon}}\n", "dkpca.cluster.timeout must be a duration"),
    ("dkpca: {cluster: {workers: 0}}\n", "dkpca.cluster.workers must be a positive integer"),
    ("dkpca: {cluster: {scale: 4}}\n", "dkpca.cluster.scale must be a mapping"),
])
def test_bad_file_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(dc.ClusterConfigError, match=message):
        spec = dc.cluster_spec(path)
        for key in ("timeout", "workers", "scale"):
            spec.dkpca(key)


def test_missing_file_names_the_choices():
    with pytest.raises(FileNotFoundError, match="local, slurm, pbs, kubernetes, gateway"):
        dc.cluster_spec("no-such.yaml")


@pytest.mark.parametrize("value, expected", [("8Gi", 8 * 2**30), ("16Gi", 16 * 2**30), ("500m", 0.5),
                                             ("8G", 8e9), ("2", 2.0), ("1e3", 1000.0), ("512Mi", 2**29)])
def test_kubernetes_quantities(value, expected):
    assert k8s_quantity(value) == expected


@pytest.mark.parametrize("value, plain, seconds", [
    ("04:00:00", 60, 14400), ("30", 60, 1800), ("30:15", 60, 1815), ("1-02", 60, 93600),
    ("1-02:30", 60, 95400), ("1-00:00:10", 60, 86410), ("3600", 1, 3600)])
def test_walltime_forms(value, plain, seconds):
    assert walltime_seconds(value, "x", plain) == seconds


def test_lifetime_is_added_under_the_walltime():
    # 4 h: a 10 min margin, staggered over 5 min -> workers retire between 3h45 and 3h50
    assert worker_lifetime_args(["--resources", "a=1"], "04:00:00", "x") == [
        "--resources", "a=1", "--lifetime", "13500s", "--lifetime-stagger", "300s"]


def test_lifetime_past_the_walltime_is_refused():
    with pytest.raises(dc.ClusterConfigError, match="does not end before the walltime"):
        worker_lifetime_args(["--lifetime", "60m", "--lifetime-stagger", "5m"], "01:00:00", "slurm.yaml")


@pytest.mark.parametrize("backend, module, extra", [
    ("slurm", "dask_jobqueue", "slurm"), ("pbs", "dask_jobqueue", "pbs"),
    ("kubernetes", "dask_kubernetes", "kubernetes"), ("gateway", "dask_gateway", "gateway"),
])
def test_missing_backend_names_the_extra(monkeypatch, backend, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules makes the import fail
    monkeypatch.setitem(sys.modules, module + ".operator", None)
    with pytest.raises(ImportError, match=rf"pip install 'dkpca\[{extra}\]'"):
        dc.backend_class(backend)


def test_kubernetes_example_installs_nothing_by_name():
    text = open(os.path.join(CONFIGS, "kubernetes.yaml")).read()
    assert "EXTRA_PIP_PACKAGES" not in text and "pip install dkpca" not in text
    assert "pip wheel --no-deps -w dist ." in text  # the image is built from this repository


# -- the job scripts dkpca submits ---------------------------------------------------
def submitted(env: dict) -> tuple[str, dict]:
    log = env["FAKE_BATCH_LOG"]
    return open(os.path.join(log, "job0.sh")).read(), json.load(open(os.path.join(log, "job0.modes.json")))


@pytest.mark.parametrize("name, submit, cancel, needles", [
    ("slurm.yaml", "sbatch", "scancel", ["#SBATCH -t 04:00:00", "#SBATCH --exclusive", "#SBATCH -A my_project",
                                         "--nworkers 4", "--nthreads 1", "--local-directory $TMPDIR",
                                         "--lifetime 13500s", "--lifetime-stagger 300s", "module load python"]),
    ("pbs.yaml", "qsub", "qdel", ["#PBS -l walltime=02:00:00", "#PBS -l place=excl", "#PBS -A my_project",
                                  "--nworkers 8", "--lifetime 6300s", "--local-directory $TMPDIR"]),
])
def test_example_job_script(tmp_path, monkeypatch, name, submit, cancel, needles):
    env = fake_batch(tmp_path, submit, cancel, mode="queue")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)  # the credentials go into the submission directory
    with pytest.raises(dc.ClusterError, match="did not arrive within 1s"):
        dc.connect(os.path.join(CONFIGS, name), timeout=1)
    script, modes = submitted(env)
    for needle in needles:
        assert needle in script, f"{needle!r} missing from the {name} job script:\n{script}"
    assert " tls://" in script and "--tls-ca-file" in script and "-----BEGIN" not in script
    if submit == "qsub":  # PBS starts in $HOME: the script goes back to the submission directory first
        assert script.index("cd $PBS_O_WORKDIR") < script.index("-m distributed.cli.dask_worker")
    # the credentials: a 0700 directory of 0600 files, read by the job, gone once the cluster closed
    assert sorted(set(modes.values())) == ["0o600", "0o700"] and len(modes) == 3
    assert not any(os.path.exists(p) for p in modes)
    assert cancelled(env)  # the queued job was cancelled: nothing left waiting


# -- failing fast, in one line, leaving nothing running -------------------------------
def test_missing_sbatch_is_one_error_line(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(60))
    t = time.monotonic()
    proc = run_cli("fit", data, "--cluster", os.path.join(CONFIGS, "slurm.yaml"),
                   env={"PATH": os.path.dirname(sys.executable)}, timeout=120)
    assert "sbatch is not on PATH" in one_error_line(proc) and time.monotonic() - t < 60


@pytest.mark.parametrize("backend", ["slurm", "pbs"])
def test_a_batch_back_end_without_its_job_size_names_the_settings(tmp_path, backend):
    """Without jobqueue.<backend>.cores and memory, dask-jobqueue's message was Python advice
    ("cluster = SLURMCluster(cores=8, memory='24GB')"), before sbatch was even looked for."""
    data = write_data(tmp_path / "d.zarr", make_data(60))
    os.makedirs(tmp_path / "no-config")
    env = {"DASK_CONFIG": str(tmp_path / "no-config")}
    for command in ("fit", "plan"):
        line = one_error_line(run_cli(command, data, "--cluster", backend, env=env))
        assert f"needs jobqueue.{backend}.cores and jobqueue.{backend}.memory" in line, line


def test_rejected_job_is_one_error_line(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(60))
    env = fake_batch(tmp_path, mode="reject")
    cfg = write_config(tmp_path / "c.yaml", slurm_test_config(tmp_path))
    line = one_error_line(run_cli("fit", data, "--cluster", cfg, env=env))
    assert "rejected" in line and "Invalid account" in line


def test_a_batch_system_that_does_not_answer_is_one_error_line(tmp_path):
    """Before: a submission that never returned (slurmctld down) held the fit for ever (still waiting after 60 s
    with a 5 s cluster timeout).  Now the cluster timeout bounds it, the submission is killed (no job submitted
    after the fit gave up) and nothing is left: no store, no process."""
    data = write_data(tmp_path / "d.zarr", make_data(60))
    env = fake_batch(tmp_path, mode="hang")
    cfg = write_config(tmp_path / "c.yaml", slurm_test_config(tmp_path))
    store = tmp_path / "s.dkpca.zarr"
    t = time.monotonic()
    proc = run_cli("fit", data, "--store", str(store), "--cluster", cfg, "--cluster-timeout", "3s", env=env)
    line = one_error_line(proc)
    assert "did not answer the slurm job submission (sbatch) within 3s" in line, line
    assert time.monotonic() - t < 60 and not store.exists()
    submit = int((tmp_path / "batchlog" / "submit.pid").read_text())
    assert not psutil.pid_exists(submit) and cancelled(env) == []


def test_workers_not_arriving_is_one_error_line_and_cancels_the_job(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(60))
    env = fake_batch(tmp_path, mode="queue")
    cfg = write_config(tmp_path / "c.yaml", slurm_test_config(tmp_path))
    line = one_error_line(run_cli("fit", data, "--cluster", cfg, "--cluster-timeout", "2s", env=env))
    assert "did not arrive within 2s" in line
    assert cancelled(env) == ["4242"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_one_error_line(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(60))
    t = time.monotonic()
    proc = run_cli("fit", data, "--scheduler", f"tcp://127.0.0.1:{free_port()}",
                   env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert "could not reach the Dask scheduler" in one_error_line(proc) and time.monotonic() - t < 60


def test_missing_kubectl_fails_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(dc.ClusterError, match="kubectl is not on PATH"):
        dc.connect(os.path.join(CONFIGS, "kubernetes.yaml"))


def test_worker_memory_below_the_plan_is_refused_before_starting(tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(3000))
    cfg = write_config(tmp_path / "c.yaml", {"dkpca": {"cluster": {"local": {"n_workers": 1,
                                                                              "memory_limit": "32MiB"}}}})
    proc = run_cli("fit", data, "--chunk-size", "3000", "--cluster", cfg)
    line = one_error_line(proc)  # one line: no cluster was started, so no dashboard was announced
    assert "worker would have 32.00 MiB" in line and "smaller chunk size" in line


def test_missing_scheduler_file_is_an_error(tmp_path):
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(FileNotFoundError, match="scheduler file .* does not exist"):
        dc.connect(scheduler_file=tmp_path / "scheduler.json")


# -- secure by default ------------------------------------------------------------
def test_local_scheduler_accepts_only_this_run(tmp_path):
    with dc.connected({"dkpca": {"cluster": {"local": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"}}}}) as c:
        address = c.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert c.dashboard_link.startswith("http://127.0.0.1:")
        with pytest.raises((OSError, TimeoutError)):  # another process's own credentials
            Client(address, security=Security.temporary(), timeout=5, set_as_default=False)
        with pytest.raises((OSError, TimeoutError)):  # no credentials, plain TCP
            Client(address.replace("tls://", "tcp://"), timeout=5, set_as_default=False)
        assert len(c.nthreads()) == 1


def test_slurm_run_end_to_end_over_tls(tmp_path):
    """A fit on SLURM workers (the fake sbatch runs the job script here): TLS, cleanup, a correct result."""
    X = make_data(600, seed=4)
    data = write_data(tmp_path / "d.zarr", X)
    env = fake_batch(tmp_path, mode="run")
    cfg = write_config(tmp_path / "c.yaml", slurm_test_config(tmp_path, timeout="120s"))
    proc = run_cli("fit", data, "-k", "3", "--gamma", "0.2", "--solver", "randomized", "--chunk-size", "150",
                   "--dtype", "float64", "--tol", "1e-10", "--cluster", cfg, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr + "".join(open(p).read() for p in glob.glob(
        os.path.join(env["FAKE_BATCH_LOG"], "*.log")))
    assert "2 worker(s); dashboard: http://127.0.0.1:" in proc.stderr
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 3)
    np.testing.assert_allclose(dkpca.load(tmp_path / "d.dkpca.zarr").eigenvalues_, lam, rtol=1e-8)
    script, modes = submitted(env)
    assert "--lifetime 1530s" in script and "tls://127.0.0.1:" in script
    assert not any(os.path.exists(p) for p in modes)  # credentials removed
    job = cancelled(env)
    assert len(job) == 1
    with pytest.raises(ProcessLookupError):  # the job's processes are gone
        for _ in range(100):
            os.killpg(int(job[0]), 0)
            time.sleep(0.1)


def test_tls_example_connects_with_its_certificates(tmp_path):
    sec = Security.temporary()
    paths = {}
    for name, text in (("ca.pem", sec.tls_ca_file), ("client.pem", sec.tls_client_cert),
                       ("client.key", sec.tls_client_key)):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1", security=sec,
                      dashboard_address=None) as cluster:
        cfg = yaml.safe_load(open(os.path.join(CONFIGS, "tls.yaml")))
        cfg["scheduler-address"] = cluster.scheduler_address
        tls = cfg["distributed"]["comm"]["tls"]
        tls["ca-file"], tls["client"]["cert"], tls["client"]["key"] = (
            str(paths["ca.pem"]), str(paths["client.pem"]), str(paths["client.key"]))
        with dc.connected(cfg) as client:
            assert client.scheduler.address == cluster.scheduler_address
            assert client.submit(lambda x: x + 1, 1).result() == 2


def test_local_example_starts_and_its_dask_settings_reach_the_workers(tmp_path, caplog, blobs):
    cfg = yaml.safe_load(open(os.path.join(CONFIGS, "local.yaml")))
    cfg["dkpca"]["cluster"]["local"]["dashboard_address"] = "127.0.0.1:0"  # the shipped port may be taken here
    with caplog.at_level(logging.INFO, logger="dkpca"), dc.connected(cfg) as client:
        assert len(client.nthreads()) == 2
        spill = client.run(lambda: dask.config.get("distributed.worker.memory.spill"))
        assert set(spill.values()) == {0.85}
        # dkpca's housekeeping intervals reach the worker processes too (through their nannies)
        profile = client.run(lambda: dask.config.get("distributed.worker.profile.interval"))
        assert set(profile.values()) == {"100ms"}
        # and glibc's allocator as it is: no MALLOC_TRIM_THRESHOLD_ from distributed in the workers' environment
        trim = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert set(trim.values()) == {os.environ.get("MALLOC_TRIM_THRESHOLD_")}
        model = dkpca.fit(blobs, n_components=3, gamma=0.1, solver="randomized", chunk_size=200, dtype="float64",
                          tol=1e-10, store=tmp_path / "s.zarr")
    assert caplog.text.count("dashboard: http://127.0.0.1:") == 1
    lam, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_local_housekeeping_applies_where_the_dask_config_keeps_distributeds_defaults():
    assert local_housekeeping() == {**LOCAL_HOUSEKEEPING, **LOCAL_MALLOC}
    trim = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
    with dask.config.set({"distributed.worker.profile.interval": "20ms", trim: 1 << 20}):
        lean = local_housekeeping()
    assert "distributed.worker.profile.interval" not in lean and trim not in lean
    assert lean == {k: v for k, v in LOCAL_HOUSEKEEPING.items() if k != "distributed.worker.profile.interval"}


# -- running schedulers: address and scheduler file --------------------------------------
def test_connect_by_scheduler_file(proc_cluster):
    client = dc.connect(scheduler_file=os.path.join(proc_cluster.tmp, "scheduler.json"))
    try:
        assert client.scheduler.address == proc_cluster.address and len(client.nthreads()) == 2
    finally:
        dc.close(client)


def test_cli_fit_with_scheduler_file(proc_cluster, tmp_path):
    X = make_data(900, seed=3)
    data = write_data(tmp_path / "d.zarr", X)
    proc = run_cli("fit", data, "-k", "4", "--gamma", "0.2", "--solver", "randomized", "--chunk-size", "150",
                   "--dtype", "float64", "--tol", "1e-10", "--scheduler-file",
                   os.path.join(proc_cluster.tmp, "scheduler.json"))
    assert proc.returncode == 0, proc.stderr
    assert "Gram blocks: 21 computed, 0 reused" in proc.stdout
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 4)
    np.testing.assert_allclose(dkpca.load(tmp_path / "d.dkpca.zarr").eigenvalues_, lam, rtol=1e-8)
    logs = "".join(open(os.path.join(proc_cluster.tmp, f"worker{i}.log")).read() for i in range(2))
    assert "Traceback" not in logs


def test_cli_plan_with_scheduler_file_asks_the_scheduler(proc_cluster, tmp_path):
    data = write_data(tmp_path / "d.zarr", make_data(300))
    proc = run_cli("plan", data, "--no-measure", "--scheduler-file", os.path.join(proc_cluster.tmp, "scheduler.json"))
    assert proc.returncode == 0, proc.stderr
    assert "workers:       2 x 1 thread(s)" in proc.stdout


def test_cli_transform_with_scheduler_address(proc_cluster, tmp_path, blobs):
    import zarr

    data = write_data(tmp_path / "d.zarr", blobs)
    model = dkpca.fit(data, n_components=2, gamma=0.1, store=tmp_path / "s.zarr", dtype="float64")
    proc = run_cli("transform", str(tmp_path / "s.zarr"), data, str(tmp_path / "z.zarr"), "--scheduler",
                   proc_cluster.address, "-q")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    # the reference is the same model's transform here, without a cluster: the two differ by rounding only
    # (embedding_ would differ by the solver's residual, ~1e-7 at the default tol: CI once saw 3.7e-8)
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[:], model.transform(blobs),
                               rtol=1e-10, atol=1e-12)


def test_plan_sizes_a_cluster_file_without_starting_it(tmp_path, monkeypatch, blobs):
    monkeypatch.chdir(tmp_path)
    p = dkpca.plan(blobs, n_components=2, cluster=os.path.join(CONFIGS, "pbs.yaml"), measure=False)
    assert (p.workers, p.threads_per_worker, p.memory_available_per_worker) == (64, 1, 8 * 2**30)
    assert not os.path.exists("dask-logs")  # sizing created nothing


def test_scheduler_backend_needs_an_address():
    with pytest.raises(dc.ClusterConfigError, match="scheduler-address"):
        dc.connect({"dkpca": {"cluster": {"backend": "scheduler"}}})


# -- a pass on a cluster: a fixed, balanced share of K's blocks per worker thread ----------
def test_shares_are_balanced_and_the_same_every_pass(proc_cluster):
    from dkpca.execution import placement, shares
    from dkpca.linalg import block_bounds, pair_weights, upper_pairs

    pairs = upper_pairs(7)
    weights = pair_weights(block_bounds(650, 100), pairs)  # a short edge block: weights differ three ways
    with Client(proc_cluster.address):
        first, again, where = shares(weights), shares(weights), placement(weights)
    assert first == again and len(first) == 2  # two single-thread workers: one share each, every pass alike
    assert sorted(i for _, members in first for i in members) == list(range(len(pairs)))
    loads = [sum(weights[i] for i in members) for _, members in first]
    assert max(loads) - min(loads) <= max(weights)  # largest-first greedy: within one block of even
    assert {w for w, _ in first} == set(where) and all(where[i] == w for w, members in first for i in members)


def _loads(weights, slots, k):
    out = [0.0] * k
    for w, s in zip(weights, slots, strict=True):
        out[s] += w
    return out


def _largest_first(weights, k):
    slots, load = [], [0.0] * k
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        j = min(range(k), key=lambda j: (load[j], j))
        slots.append((i, j))
        load[j] += weights[i]
    return max(load)


def test_balance_finds_the_even_split_of_a_square_grid_on_two_workers():
    """5 x 5 equal blocks on two workers: largest-first alone gives one share five off-diagonal blocks and three
    diagonal ones; the best split (brute force over all 2^15) has six and one against four and four."""
    from dkpca.execution import balance
    from dkpca.linalg import block_bounds, pair_weights, upper_pairs

    weights = pair_weights(block_bounds(20000, 4000), upper_pairs(5))
    best = min(max(sum(w for i, w in enumerate(weights) if m >> i & 1), sum(w for i, w in enumerate(weights)
                                                                          if not m >> i & 1))
               for m in range(1 << len(weights)))
    assert max(_loads(weights, balance(weights, 2), 2)) == pytest.approx(best)
    assert best < _largest_first(weights, 2)


@pytest.mark.parametrize("seed", range(20))
def test_balance_is_never_worse_than_largest_first_and_is_deterministic(seed):
    from dkpca.execution import balance

    rng = np.random.default_rng(seed)
    weights = list(rng.choice([1.5, 2.5, 0.6, 1.0], size=int(rng.integers(1, 60))) * rng.uniform(0.5, 1, 1))
    k = int(rng.integers(1, 9))
    slots = balance(weights, k)
    assert slots == balance(weights, k) and all(0 <= s < k for s in slots)
    assert max(_loads(weights, slots, k)) <= _largest_first(weights, k) + 1e-12


@pytest.mark.parametrize("n, slots, gathered_rows, balanced_rows", [(40000, 16, 63, 89), (100000, 16, 173, 365),
                                                                     (41000, 16, 77, 102)])
def test_gathered_shares_keep_balance_s_loads_and_touch_fewer_row_blocks(n, slots, gathered_rows, balanced_rows):
    """With each task's block, every slot keeps the loads ``balance`` gives it (the same multiset of weights)
    and its blocks lie along one stretch of a Hilbert curve, so the slots touch fewer row blocks in all: the
    V pieces a cluster share carries and the partial sums it returns (blocks of 4,000; at 41,000 an edge row
    block of 1,000 gives four weight classes, each dealt out on its own)."""
    from dkpca.execution import balance
    from dkpca.linalg import block_bounds, pair_weights, touched_rows, upper_pairs

    pairs = upper_pairs(len(block_bounds(n, 4000)))
    weights = pair_weights(block_bounds(n, 4000), pairs)
    alone, near = balance(weights, slots), balance(weights, slots, pairs)
    assert near == balance(weights, slots, pairs)  # deterministic: every pass alike
    assert sorted(sorted(w for w, s in zip(weights, alone, strict=True) if s == k) for k in range(slots)) == \
        sorted(sorted(w for w, s in zip(weights, near, strict=True) if s == k) for k in range(slots))

    def touched(slot):
        return sum(len(touched_rows([p for p, s in zip(pairs, slot, strict=True) if s == k])) for k in range(slots))

    assert (touched(near), touched(alone)) == (gathered_rows, balanced_rows)


def test_curve_order_visits_each_block_once_and_steps_to_a_neighbour():
    """The Hilbert curve over a grid of 2^3 x 2^3 blocks: each step moves to an adjacent block."""
    from dkpca.linalg import curve_order

    cells = [(i, j) for i in range(8) for j in range(8)]
    path = [cells[i] for i in curve_order(cells)]
    assert sorted(path) == cells
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(path, path[1:], strict=False))


def test_a_diagonal_block_weighs_more_than_half_an_off_diagonal_one():
    """Reading (or writing) a block costs besides its products: 0.56-0.70 of an off-diagonal block measured."""
    from dkpca.linalg import block_bounds, pair_weights

    diag, off = pair_weights(block_bounds(8, 4), [(0, 0), (0, 1)])
    assert 0.55 < diag / off < 0.7


def test_group_products_sends_float32_partial_sums_when_asked_and_they_are_added_in_float64():
    """A single-precision pass's partial sums travel in float32 (half the bytes); their rounding is 6e-8
    relative, and the sums of them are float64."""
    from dkpca.linalg import add_outputs, block_products, group_products

    rng = np.random.default_rng(0)
    blocks = {(0, 0): rng.random((4, 4)).astype(np.float32), (0, 1): rng.random((4, 3)).astype(np.float32)}
    blocks[(0, 0)] = (blocks[(0, 0)] + blocks[(0, 0)].T) / 2
    V = rng.standard_normal((7, 2)).astype(np.float32)
    pieces = [V[:4], V[4:]]
    args = [(blocks[(I, J)], pieces[I], pieces[J], I != J) for I, J in blocks]
    wide = group_products(block_products, list(blocks), args)
    narrow = group_products(block_products, list(blocks), args, "float32")
    assert [y.dtype for y in wide] == [np.float64] * 2 and [y.dtype for y in narrow] == [np.float32] * 2
    for a, b in zip(wide, narrow, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-7)
    total = add_outputs([narrow, 0], [narrow, 0])
    assert total.dtype == np.float64 and np.array_equal(total, 2 * narrow[0].astype(np.float64))


def test_a_single_precision_pass_on_a_cluster_matches_the_float32_product(proc_cluster, tmp_path, blobs):
    """The partial sums cross the network in float32: the pass still agrees with fl32(K) V to 1e-5 of its
    largest entry (float32 products; the same bound as in memory)."""
    from dkpca.gram import build_gram
    from dkpca.io import as_dask, scan
    from dkpca.kernels import RBF
    from dkpca.operator import StoredKernelOperator
    from dkpca.storage import FitStore

    Xd = as_dask(blobs, block_rows=100)
    V = np.random.default_rng(1).standard_normal((600, 3))
    with Client(proc_cluster.address):
        op = StoredKernelOperator(build_gram(FitStore.at(tmp_path / "s.zarr"), Xd, RBF(0.1), scan(Xd)))
        got = op.raw_matmat(V, single=True)
    exact = rbf_kernel(blobs, gamma=0.1).astype(np.float32).astype(np.float64) @ V
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-5 * np.abs(exact).max())


@pytest.mark.parametrize("stored", [True, False])
def test_a_pass_on_a_cluster_runs_one_task_per_worker_thread_and_is_exact(proc_cluster, tmp_path, blobs, monkeypatch,
                                                                         stored):
    from dkpca import execution, operator
    from dkpca.gram import build_gram
    from dkpca.io import as_dask, scan
    from dkpca.kernels import RBF
    from dkpca.storage import FitStore

    Xd = as_dask(blobs, block_rows=100)  # 6 row blocks, 21 blocks of K
    V = np.random.default_rng(1).standard_normal((600, 3))
    seen, sizes = [], []

    def counting(*tasks, **kw):
        seen.append(len(tasks))
        sizes.append(sum("dkpca-pass" in str(key) for key in dict(tasks[0].__dask_graph__())))  # X's keys aside
        return execution.compute(*tasks, **kw)

    monkeypatch.setattr(operator, "compute", counting)
    with Client(proc_cluster.address):
        op = (operator.StoredKernelOperator(build_gram(FitStore.at(tmp_path / "s.zarr"), Xd, RBF(0.1), scan(Xd),
                                                       dtype="float64"))
              if stored else operator.MatrixFreeKernelOperator(Xd, RBF(0.1), dtype=np.float64))
        seen.clear()
        sizes.clear()
        KV = op.raw_matmat(V)
    assert seen == [2]  # two shares, their partial sums added by the caller: no per-block or sum tasks
    assert sizes == [2]  # and no tasks for the pieces of V either: each share carries its own
    np.testing.assert_allclose(KV, rbf_kernel(blobs, gamma=0.1) @ V, rtol=1e-12, atol=1e-12)  # float64 K: exact


@pytest.mark.parametrize("budget, carried", [(None, True), (0, False)])
def test_many_shares_carry_v_within_the_budget_and_refer_to_pieces_past_it(tmp_path, blobs, monkeypatch, budget,
                                                                           carried):
    """Ten worker threads (more than FAN_IN shares): within ``INLINE_PASS_BYTES`` each share carries its pieces
    of V (ten tasks, no piece or sum tasks), past it the pass refers to piece tasks and sums by trees; float64
    K V exact to 1e-12 either way."""
    from dkpca import execution, operator
    from dkpca.gram import build_gram
    from dkpca.io import as_dask, scan
    from dkpca.kernels import RBF
    from dkpca.linalg import FAN_IN, grid
    from dkpca.storage import FitStore

    if budget is not None:
        monkeypatch.setattr(grid, "INLINE_PASS_BYTES", budget)
    Xd = as_dask(blobs, block_rows=100)  # 6 row blocks, 21 blocks of K
    V = np.random.default_rng(1).standard_normal((600, 3))
    sizes = []

    def counting(*tasks, **kw):
        sizes.append(sum("dkpca-pass" in str(key) for key in dict(dask.delayed(list(tasks)).__dask_graph__())))
        return execution.compute(*tasks, **kw)

    with (LocalCluster(n_workers=1, threads_per_worker=10, processes=False, dashboard_address=None) as cluster,
          Client(cluster)):
        op = operator.StoredKernelOperator(build_gram(FitStore.at(tmp_path / "s.zarr"), Xd, RBF(0.1), scan(Xd),
                                                      dtype="float64"))
        monkeypatch.setattr(operator, "compute", counting)
        KV = op.raw_matmat(V)
    assert 10 > FAN_IN
    assert (sizes == [10]) == carried and sizes[0] >= 10  # past the budget: 6 pieces and the trees' sums too
    np.testing.assert_allclose(KV, rbf_kernel(blobs, gamma=0.1) @ V, rtol=1e-12, atol=1e-12)


def fake_client(direct, *addresses, scheduler="tls://127.0.0.1:8786"):
    """What :func:`dkpca.execution.gathers_direct` reads of a client: its own setting, its scheduler's address
    and its workers' addresses (asked of the scheduler: ``scheduler=None`` refuses to be asked)."""
    from types import SimpleNamespace

    def nthreads():
        assert scheduler is not None, "the workers' addresses were asked for"
        return dict.fromkeys(addresses, 1)

    return SimpleNamespace(direct_to_workers=direct, nthreads=nthreads,
                           scheduler=SimpleNamespace(address=scheduler or "tls://10.1.2.1:8786"))


@pytest.mark.parametrize("addresses, direct", [
    (("tls://127.0.0.1:40001", "tls://127.0.0.1:40002"), True),  # a LocalCluster dkpca starts
    (("tcp://[::1]:40001",), True),
    (("inproc://192.0.2.2/5371/4",), True),  # threads in this process
    (("tls://127.0.0.1:40001", "tls://10.1.2.3:40002"), None),  # one worker on another node
    (("tls://node12:40001",), None),  # a host name may resolve to another machine
    ((), None),  # no worker yet: nothing to reach
])
def test_results_come_straight_from_workers_only_when_every_worker_is_on_loopback(addresses, direct):
    """Otherwise (None) distributed chooses: through the scheduler, unless the fit runs in one of its workers."""
    from dkpca.execution import gathers_direct

    assert gathers_direct(fake_client(None, *addresses)) is direct


def test_a_scheduler_beyond_this_machine_leaves_gathering_to_distributed_without_asking():
    """Its workers may be anywhere: None, and no round trip for their addresses (the fake refuses one)."""
    from dkpca.execution import gathers_direct

    assert gathers_direct(fake_client(None, "tls://127.0.0.1:40001", scheduler=None)) is None


@pytest.mark.parametrize("setting", [True, False])
def test_the_clients_own_direct_to_workers_setting_decides(setting):
    from dkpca.execution import gathers_direct

    assert gathers_direct(fake_client(setting, "tls://10.1.2.3:40002")) is setting
    assert gathers_direct(fake_client(setting, "tls://127.0.0.1:40001")) is setting


def test_a_local_clusters_results_are_gathered_from_its_workers(monkeypatch):
    """On in-process workers ``compute`` asks the workers for the results (``direct=True``), and gets them."""
    from dkpca import execution

    asked = []
    gather = Client.gather

    def spying(self, futures, *args, **kwargs):
        asked.append(kwargs.get("direct"))
        return gather(self, futures, *args, **kwargs)

    monkeypatch.setattr(Client, "gather", spying)
    with (LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
          Client(cluster)):
        out = execution.compute(*(dask.delayed(np.arange)(i) for i in range(4)))
    assert asked == [True]
    assert [o.tolist() for o in out] == [list(range(i)) for i in range(4)]


def test_a_compiled_kernel_travels_to_the_workers_and_is_exact(proc_cluster, blobs):
    """Each worker compiles the exp on its first block (kernels.fastexp); a float64 matrix-free pass matches
    K V to 1e-12 (entries within 1e-15 of numpy's exp)."""
    from dkpca.io import as_dask
    from dkpca.kernels import RBF
    from dkpca.operator import MatrixFreeKernelOperator

    kernel = RBF(0.1).compiled()
    assert type(kernel).__name__ == "CompiledRBF"
    V = np.random.default_rng(2).standard_normal((600, 3))
    with Client(proc_cluster.address):
        KV = MatrixFreeKernelOperator(as_dask(blobs, block_rows=100), kernel, dtype=np.float64).raw_matmat(V)
    np.testing.assert_allclose(KV, rbf_kernel(blobs, gamma=0.1) @ V, rtol=1e-12, atol=1e-12)


def test_a_block_task_on_a_worker_after_its_fit_let_the_store_go_writes_nothing(proc_cluster, tmp_path):
    """A worker process still running a block task after its client gave up (interrupt, failure, killed batch
    job) checks the lease it carries against the store's lock: refused there, no chunk, no done marker."""
    from dkpca.storage import FitStore, LeaseLostError

    with FitStore.at(tmp_path / "s.zarr").lock() as lease:
        gs, out, blk, sums = gram_writers(tmp_path / "s.zarr", lease)
    with Client(proc_cluster.address) as client:
        late = client.submit(out.write_block, 0, 1, blk, sums, sums)
        with pytest.raises(LeaseLostError, match="no longer holds the store's lock"):
            late.result()
    chunk, marker = written_block(gs, tmp_path / "s.zarr")
    assert not chunk
    assert marker == 0
