"""Issue 37, clusters at the edges: a lost computation ends (never waits forever), a scheduler that
goes away is one line, and the workers dkpca starts serve nothing over plain HTTP.

Each test bounds its own wait (a thread joined with a timeout, a subprocess with ``timeout=``) so
that the hang it guards against shows as a failure, not a stuck run; pytest-timeout is the
backstop.  Kills are timed on store state (the solver checkpoint's pass count), never on text.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings

import dask
import psutil
import pytest
from distributed import Client, LocalCluster

from dkpca import execution

from .conftest import ProcCluster, checkpoint_passes, dkpca_cmd, kill_group, make_data, spawn, wait_until, write_data


def _compute_in_thread(*tasks, **kw):
    """Start ``execution.compute(*tasks)`` in a daemon thread: (thread, outcome dict)."""
    out: dict = {}

    def run():
        try:
            out["value"] = execution.compute(*tasks, **kw)
        except BaseException as exc:  # noqa: BLE001 - the test judges what came out
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.mark.timeout(120)
def test_work_stranded_after_all_workers_died_is_submitted_again_and_finishes(caplog):
    """Case 9: both workers gone while a placed task waits, then a new worker: the computation finishes.

    distributed leaves a task whose worker restriction names a dead worker (loose, as dkpca's
    ``placed`` makes it) in ``no-worker`` for ever when it became unrunnable with no worker at
    all: a new worker never picks it up -- the hang of a LocalCluster fit whose two workers were
    killed mid-pass.  Here that state is made directly: no worker, the task submitted, then a
    worker.  Reference: ``sum([1, 2]) == 3`` within the stall bound (2 s here) plus polling, the
    stall reported once in one line.
    """
    with dask.config.set({"dkpca.cluster.stall-timeout": "2s"}), \
            LocalCluster(n_workers=0, processes=False, protocol="tcp://",
                         host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=True) as client:
        with execution.placed("tcp://127.0.0.1:9"):  # a worker that is gone
            task = dask.delayed(sum, pure=False)([1, 2])
        t, out = _compute_in_thread(task)
        wait_until(lambda: client.processing() == {} and len(client.futures) == 1, 30, what="the task submitted")
        time.sleep(0.5)  # the scheduler has put it in no-worker (no worker at all)
        cluster.scale(1)
        client.wait_for_workers(1, timeout=30)
        t.join(30)
        assert not t.is_alive(), "compute still waits for a task no worker will run"
    assert out.get("value") == (3,), repr(out.get("error"))
    [warning] = [r.getMessage() for r in caplog.records if r.name == "dkpca"]
    assert "ran nothing" in warning and "submitting it once more" in warning and "\n" not in warning


@pytest.mark.timeout(120)
def test_work_no_worker_may_run_ends_in_one_line():
    """Case 9, bounded: results no worker will ever produce end the wait (after one fresh submission).

    A task restricted to a worker that is not there (strictly) waits in ``no-worker`` beside
    an idle worker.  Reference: a StalledComputationError (a LostComputationError) within 20 s,
    its message one line saying what happened and that a rerun resumes.
    """
    with dask.annotate(workers=["tcp://127.0.0.1:9"], allow_other_workers=False):
        task = dask.delayed(sum, pure=False)([1, 2])
    with dask.config.set({"dkpca.cluster.stall-timeout": "1s"}), \
            LocalCluster(n_workers=1, processes=False, protocol="tcp://",
                         host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=True):
        t, out = _compute_in_thread(task)
        t.join(20)
        assert not t.is_alive(), "compute still waits for a task no worker will run"
    err = out.get("error")
    assert isinstance(err, execution.StalledComputationError), repr(err)
    assert isinstance(err, execution.LostComputationError)
    msg = str(err)
    assert msg == ("the Dask cluster lost a computation: 1 of its 1 result(s) waited 1 s while the cluster's 1 "
                   "worker(s) ran nothing (work lost with workers that died, not rescheduled by the Dask "
                   "scheduler); rerun the same command to resume"), msg


def _scheduler_only(tmp_path):
    """A ``dask scheduler`` subprocess (no workers): (process, address)."""
    sched_file = tmp_path / "scheduler.json"
    proc = spawn([os.path.join(os.path.dirname(sys.executable), "dask"), "scheduler", "--host",
                  "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file",
                  str(sched_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: sched_file.exists() and sched_file.stat().st_size > 0, 60, what="scheduler file")
    return proc, json.loads(sched_file.read_text())["address"]


@pytest.mark.timeout(120)
def test_compute_after_the_scheduler_went_away_fails_at_once(tmp_path):
    """Case 11 from Python: the scheduler killed between two computations.

    Before: the next computation was handed to a client that was reconnecting for
    ``distributed.comm.timeouts.connect`` (30 s), then "No clients found".  Reference: a
    SchedulerLostError naming the address, in under 5 s, one line.
    """
    proc, address = _scheduler_only(tmp_path)
    try:
        client = Client(address, timeout="10s", set_as_default=True)
        try:
            kill_group(proc)
            wait_until(lambda: client.status != "running", 30, what="the client to see the scheduler gone")
            t0 = time.monotonic()
            t, out = _compute_in_thread(dask.delayed(sum, pure=False)([1, 2]))
            t.join(20)
            took = time.monotonic() - t0
            assert not t.is_alive(), "compute waits on a scheduler that is gone"
        finally:
            client.close(timeout=5)
    finally:
        kill_group(proc)
    err = out.get("error")
    assert isinstance(err, execution.SchedulerLostError), repr(err)
    assert took < 5, took
    msg = str(err)
    assert msg.startswith(f"the Dask scheduler at {address} went away") and msg.endswith(
        "rerun the same command to resume") and "\n" not in msg, msg


@pytest.mark.timeout(180)
def test_cli_fit_whose_scheduler_is_killed_mid_pass_is_one_line(tmp_path):
    """Case 11 from the CLI: ``dkpca fit --scheduler ADDR`` and the scheduler SIGKILLed during the solve.

    Before: a 124-line FuturesCancelledError traceback, exit 1.  Reference: exit 2 within 20 s
    of the kill and exactly one stderr line, ``dkpca: error: the Dask scheduler at ADDR went away
    (...); rerun the same command to resume``.
    """
    c = ProcCluster(str(tmp_path), n_workers=1)
    try:
        data = write_data(tmp_path / "d.zarr", make_data(1500, seed=3))
        store = str(tmp_path / "s.zarr")
        env = {**os.environ, "DASK_DKPCA__CHECKPOINT_INTERVAL": "0"}
        proc = spawn(dkpca_cmd("fit", data, "-k", "3", "--solver", "randomized", "--tol", "1e-14", "--max-passes",
                               "400", "--chunk-size", "500", "--dtype", "float64", "--scheduler", c.address,
                               "--store", store, "--no-progress", "-q"),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            wait_until(lambda: checkpoint_passes(store) >= 2 or proc.poll() is not None, 120, what="solver pass 2")
            assert proc.poll() is None, proc.communicate()[1]
            kill_group(c.procs[0])  # the scheduler
            t0 = time.monotonic()
            out, err = proc.communicate(timeout=60)
            took = time.monotonic() - t0
        finally:
            kill_group(proc)
    finally:
        c.close()
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, err[-3000:]
    assert re.fullmatch(rf"dkpca: error: the Dask scheduler at {re.escape(c.address)} went away \(.+\); rerun the "
                        r"same command to resume", lines[0]), lines[0]
    assert took < 20, took


@pytest.mark.timeout(120)
def test_workers_dkpca_starts_listen_only_on_their_tls_ports():
    """README: no dkpca scheduler or worker listens unencrypted.

    A worker serves HTTP (``/health``, ``/metrics``) beside its TLS port unless told otherwise.
    Reference: each worker process of a LocalCluster that dkpca starts listens on exactly one TCP
    port, its TLS address's.
    """
    from dkpca.cluster import connected

    cfg = {"dkpca": {"cluster": {"local": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"}}}}
    with connected(cfg) as client:
        (address, pid), = client.run(os.getpid).items()
        port = int(address.rsplit(":", 1)[1])
        listening = sorted({c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
                            if c.status == psutil.CONN_LISTEN})
    assert address.startswith("tls://")
    assert listening == [port], f"worker {address} also listens on {sorted(set(listening) - {port})}"



def test_batch_workers_get_the_tls_only_worker_class_unless_the_configuration_says_otherwise():
    """README: batch workers run ``--worker-class dkpca.cluster.security.TLSOnlyWorker --no-dashboard``.

    Reference: the arguments as README states them; a worker class or ``--dashboard`` of the
    user's own is left as given.
    """
    from dkpca.cluster.security import tls_only_worker_args

    assert tls_only_worker_args(["--lifetime", "60s"]) == [
        "--lifetime", "60s", "--worker-class", "dkpca.cluster.security.TLSOnlyWorker", "--no-dashboard"]
    assert tls_only_worker_args(["--dashboard"]) == ["--dashboard"]
    assert tls_only_worker_args(["--worker-class", "my.Worker"]) == ["--worker-class", "my.Worker"]


def test_a_client_only_site_tls_configuration_leaves_started_clusters_on_temporary_certificates(tmp_path, capsys):
    """README's tls.yaml for a remote scheduler names the CA and the client's certificate only.  A cluster dkpca
    starts here needs a scheduler's and workers' too: it gets dkpca's temporary ones (before: the site's config,
    and distributed's TypeError about a missing ssl_context, three tracebacks); with every role named, the site's."""
    from distributed import Security

    from dkpca.cli import main
    from dkpca.cluster.security import run_security

    temp = Security.temporary()
    paths = {name: tmp_path / name for name in ("ca.pem", "client.pem", "client.key")}
    for path, text in zip(paths.values(), (temp.tls_client_cert, temp.tls_client_cert, temp.tls_client_key),
                          strict=True):
        path.write_text(text)
    client_only = {"distributed.comm.tls.ca-file": str(paths["ca.pem"]),
                   "distributed.comm.tls.client.cert": str(paths["client.pem"]),
                   "distributed.comm.tls.client.key": str(paths["client.key"])}
    with dask.config.set(client_only):
        assert run_security().tls_scheduler_cert.startswith("-----BEGIN")  # temporary: PEM text of its own
        data = write_data(tmp_path / "d.zarr", make_data(300, d=4))
        assert main(["fit", data, "-k", "3", "--cluster", "local", "--store", str(tmp_path / "s.zarr"),
                     "--no-progress", "-q"]) == 0
    every_role = {**client_only, **{f"distributed.comm.tls.{role}.cert": str(paths["client.pem"])
                                    for role in ("scheduler", "worker")}}
    with dask.config.set(every_role):
        assert run_security().tls_scheduler_cert == str(paths["client.pem"])  # the site's, from the Dask config


@pytest.mark.parametrize("address, setting, message", [
    # distributed: TypeError "TLS expects a `ssl_context` argument ... Instead got None" (a traceback before)
    # (at once: no "within 2s", which named a wait that never was)
    ("tls://127.0.0.1:1", "2s", r"could not reach the Dask scheduler at tls://127.0.0.1:1 \(.*ssl_context.*ca-file, "
                                r"client.cert, client.key\)\.$"),
    # distributed: TypeError "Can't instantiate abstract class UCXConnector" where UCX is not installed
    ("ucx://127.0.0.1:1", "2s", r"could not reach the Dask scheduler at ucx://127.0.0.1:1"),
    # dask: KeyError "Invalid time unit: abc" (a traceback before)
    ("tcp://127.0.0.1:1", "abc", r"distributed.comm.timeouts.connect is 'abc', not a duration"),
])
def test_a_scheduler_that_cannot_be_reached_as_configured_is_one_line(tmp_path, capsys, address, setting, message):
    from dkpca.cli import main

    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    with dask.config.set({"distributed.comm.timeouts.connect": setting}):
        status = main(["fit", data, "-k", "2", "--scheduler", address, "--store", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("dkpca: error: "), err
    assert re.search(message, err[0]), err


@pytest.mark.parametrize("local, message", [
    # ZeroDivisionError in sizing the workers before
    ("threads_per_worker: 0", r"dkpca.cluster.local.threads_per_worker must be an integer >= 1; got 0"),
    # a nanny's traceback per worker, then "Cluster failed to start", before
    ("bogus_key: 1", r"bogus_key is not an argument of distributed's LocalCluster or its workers"),
    # the plain-TCP scheduler refused by dkpca's Dask configuration, with a traceback, before
    ("scheduler_kwargs: {protocol: 'tcp://'}", r"local.scheduler_kwargs.protocol 'tcp://'.*use TLS"),
    # TypeError comparing 'many' with an int, before
    ("n_workers: 1}\n    scale: {n: many", r"dkpca.cluster.scale.n must be a whole number >= 0; got 'many'"),
    # a typo of a dkpca.cluster key, ignored before
    ("n_workers: 1}\n    wokers: {4", r"dkpca.cluster.wokers is not a dkpca setting \(known: adapt, backend"),
    # a typo of a dkpca key in the file, ignored before
    ("n_workers: 1}\n  leese: {4", r"dkpca.leese is not a dkpca setting \(known: checkpoint-interval, cluster"),
])
def test_a_cluster_file_s_bad_local_settings_are_one_line_before_anything_starts(tmp_path, capsys, local, message):
    from dkpca.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("dkpca:\n  cluster:\n    local: {" + local + "}\n")
    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    status = main(["fit", data, "-k", "2", "--cluster", str(cfg), "--store", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("dkpca: error: "), err
    assert re.search(message, err[0]), err


@pytest.mark.parametrize("settings, message", [
    ("cluster: {timeout: abc, local: {n_workers: 1}}", r"c\.yaml: dask config 'dkpca\.cluster\.timeout' .* got 'abc'"),
    ("cluster: {workers: 0, local: {n_workers: 1}}", r"c\.yaml: dkpca\.cluster\.workers must be a positive integer"),
    ("lease: abc\n  cluster: {local: {n_workers: 1}}", r"c\.yaml: dask config 'dkpca\.lease' .* got 'abc'"),
])
@pytest.mark.parametrize("command", ["fit", "plan"])
def test_a_cluster_file_s_bad_dkpca_settings_are_one_line_before_its_cluster_starts(tmp_path, capsys, monkeypatch,
                                                                                     settings, message, command):
    """They were found once the LocalCluster had started (11-16 s here), after its lines; a plan, which sizes the
    cluster from the file, printed a whole plan over a timeout 'forever' or workers 'two'."""
    import importlib

    from dkpca.cli import main

    def never(*a, **kw):
        raise AssertionError("a cluster was started")
    monkeypatch.setattr(importlib.import_module("dkpca.cluster.connect"), "_start", never)  # (the module)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dkpca:\n  " + settings + "\n")
    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    status = main([command, data, "-k", "2", "--cluster", str(cfg), "--store", str(tmp_path / "s.zarr")])
    out = capsys.readouterr()
    err = out.err.splitlines()
    assert status == 2 and len(err) == 1 and re.search(message, err[0]) and out.out == "", err


@pytest.mark.parametrize("args, message", [
    # an unset shell variable: local threads without a word, before
    (["--cluster", ""], r"--cluster is empty \(an unset variable\?\)"),
    # a running scheduler's file given to --cluster: a new local cluster, the scheduler's workers unused, before
    (["--cluster", "{sched}"], r"a running scheduler's file .*pass it with --scheduler-file"),
])
def test_a_cluster_target_that_would_quietly_run_elsewhere_is_refused(tmp_path, capsys, args, message):
    from dkpca.cli import main

    sched = tmp_path / "scheduler.json"
    sched.write_text(json.dumps({"type": "Scheduler", "id": "Scheduler-1", "address": "tls://127.0.0.1:1",
                                 "services": {}, "started": 0.0, "workers": {}}))
    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    argv = ["fit", data, "-k", "2", "--store", str(tmp_path / "s.zarr")] + [a.format(sched=sched) for a in args]
    with pytest.raises(SystemExit) if args[1] == "" else contextlib.nullcontext():
        status = main(argv)
        assert status == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not os.path.exists(tmp_path / "s.zarr")


def test_an_input_error_is_said_before_a_scheduler_is_reached(tmp_path, capsys):
    """The input and the options are checked before the scheduler is reached: the one line is the input's, at
    once (before: the scheduler's line, then the error -- or, for a scheduler that is gone, its 30 s wait)."""
    from dkpca.cli import main

    t0 = time.monotonic()
    status = main(["fit", str(tmp_path / "nosuch.npy"), "-k", "2", "--scheduler", "tls://127.0.0.1:1"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1 and "nosuch.npy' does not exist" in err[0], err
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("key, value, message", [
    # float('abc') after the plan line and the data copy, before
    ("dkpca.checkpoint-interval", "abc", r"'dkpca.checkpoint-interval' \(environment: DASK_DKPCA__CHECKPOINT_"
                                         r"INTERVAL\) must be a number of seconds >= 0; got 'abc'"),
    ("dkpca.checkpoint-interval", -1, r"must be a number of seconds >= 0; got -1"),  # accepted before
    # a KeyError in the lost-work watchdog's thread, which then stayed off for the fit, before
    ("dkpca.cluster.stall-timeout", "abc", r"'dkpca.cluster.stall-timeout' .* must be a duration.*; got 'abc'"),
])
def test_a_bad_dkpca_setting_is_one_line_before_any_work(tmp_path, capsys, key, value, message):
    from dkpca.cli import main

    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    with dask.config.set({key: value}):
        status = main(["fit", data, "-k", "2", "--store", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1 and re.search(message, err[0]), err
    assert not os.path.exists(tmp_path / "s.zarr")


@pytest.mark.parametrize("key", ["dkpca.leese", "dkpca.cluster.timout"])
def test_a_misspelt_dkpca_setting_is_warned_of_by_name_once(key, monkeypatch):
    """It had no effect without a word (the same key in a --cluster file was refused by name).  A fit checks the
    settings more than once (the command, the cluster, the request): said once."""
    from dkpca import config
    from dkpca.config import check_settings

    monkeypatch.setattr(config, "_WARNED", set())
    with dask.config.set({key: 5}), pytest.warns(UserWarning, match=rf"'{re.escape(key)}' .*is not a dkpca setting"):
        check_settings()
    with dask.config.set({key: 5}), warnings.catch_warnings():
        warnings.simplefilter("error")
        check_settings()
    with warnings.catch_warnings():  # the settings dkpca.yaml names: nothing to say
        warnings.simplefilter("error")
        check_settings()


def test_a_logged_warning_is_a_warning_line(tmp_path, capsys):
    """dkpca's logged warnings read as its Python warnings do, ``dkpca: warning: ...`` (the open dashboard's was
    a bare ``dkpca: ...`` line, like progress)."""
    from dkpca.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("dkpca:\n  cluster:\n    local: {processes: false, n_workers: 1, dashboard_address: '0.0.0.0:0'}\n")
    data = write_data(tmp_path / "d.zarr", make_data(100, d=3))
    assert main(["fit", data, "-k", "2", "--cluster", str(cfg), "--store", str(tmp_path / "s.zarr"),
                 "--no-progress"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "has no authentication" in line]
    assert len(warned) == 1 and warned[0].startswith("dkpca: warning: "), warned


def test_transform_of_a_missing_input_is_one_line_before_a_cluster_starts(tmp_path, capsys):
    """Before: a whole LocalCluster started, its lines printed, then the input's error."""
    import dkpca
    from dkpca.cli import main

    store = str(tmp_path / "s.zarr")
    dkpca.fit(make_data(100, d=3), 2, store=store)
    status = main(["transform", store, str(tmp_path / "nosuch.npy"), str(tmp_path / "o.zarr"), "--cluster", "local"])
    err = capsys.readouterr().err.splitlines()
    assert status == 2 and len(err) == 1 and "nosuch.npy' does not exist" in err[0], err
    assert not os.path.exists(tmp_path / "o.zarr")


@contextlib.contextmanager
def _listener(greeting: bytes | None):
    """A local TCP port that accepts and then sends ``greeting`` (None: nothing, ever): not a Dask scheduler."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held = []

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                held.append(conn)
                if greeting is not None:
                    conn.sendall(greeting)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("greeting, message", [
    (None, "no Dask handshake within 2s: something answers there that is not a Dask scheduler"),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "answers, but not as a Dask scheduler"),
], ids=["silent", "banner"])
def test_a_port_that_answers_but_is_no_scheduler_is_one_line_within_the_connect_timeout(tmp_path, capsys, greeting,
                                                                                          message):
    """An HTTP server's silence held `fit --scheduler` 757 s and more (distributed bounds the connection, not the
    handshake read after it); an SSH banner was read as a 2.8 EiB frame, a MemoryError traceback."""
    from dkpca.cli import main

    X = write_data(tmp_path / "x.zarr", make_data(50, seed=2))
    with _listener(greeting) as address, dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        t = time.monotonic()
        rc = main(["fit", X, "-k", "2", "--store", str(tmp_path / "s.zarr"), "--scheduler", address])
        took = time.monotonic() - t
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("dkpca: error: ") and message in err[0], err
    assert took < 2 + 10 and not os.path.exists(tmp_path / "s.zarr")


def test_workers_that_cannot_import_dkpca_are_refused_by_name_at_once(tmp_path, capsys):
    """Each task names a dkpca function: such a worker died unpickling the first, and the fit waited
    dkpca.cluster.timeout twice (20 minutes by default) to say only that the cluster had lost a computation."""
    from dkpca.cli import main

    shadow = tmp_path / "shadow" / "dkpca"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'dkpca'\")\n")
    X = write_data(tmp_path / "x.zarr", make_data(50, seed=2))
    cluster = ProcCluster(str(tmp_path), n_workers=1, worker_env={"PYTHONPATH": str(tmp_path / "shadow")})
    try:
        t = time.monotonic()
        rc = main(["fit", X, "-k", "2", "--store", str(tmp_path / "s.zarr"), "--scheduler", cluster.address])
        took = time.monotonic() - t
    finally:
        cluster.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "1 of 1 worker(s) cannot import dkpca" in err[0], err
    assert "install this dkpca where the workers run" in err[0] and took < 60


def test_workers_of_another_dkpca_version_are_refused_by_name(proc_cluster, monkeypatch):
    import importlib

    import dkpca

    connect_module = importlib.import_module("dkpca.cluster.connect")
    monkeypatch.setattr(connect_module, "__version__", "0.0.1")
    with pytest.raises(connect_module.ClusterError, match=rf"2 of 2 worker\(s\) runs dkpca {dkpca.__version__} "
                                                          r".*this process runs dkpca 0\.0\.1"):
        connect_module.connect(proc_cluster.address)
