"""Cluster configs, dkpca.cluster.connect, and a real multi-process Dask cluster.

The multi-process fixture starts ``dask scheduler`` and two ``dask worker``
processes (nanny + worker, one thread each) on 127.0.0.1 as subprocesses, each
in its own process group so that a finalizer can kill the whole group
(nanny and its worker child) whatever the test did.
"""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import cluster as dc

from .conftest import ROOT, dkpca_cmd, make_data, reference_eigh, write_data

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "cluster_configs", "*.yaml")))


# -- configs -----------------------------------------------------------------
def test_all_configs_present():
    names = {os.path.basename(p) for p in CONFIGS}
    assert {"local.yaml", "slurm.yaml", "pbs.yaml", "kubernetes.yaml", "gateway.yaml", "tls.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_parses_and_validates(path, caplog):
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        cfg = dc.load_config(path)
    assert cfg["backend"] in dc.BACKENDS
    assert not caplog.records, "shipped configs must validate without warnings"
    res = dc.worker_resources(cfg)
    if cfg["backend"] != "scheduler":
        assert res["workers"] >= 1 and res["memory_per_worker"] > 0


BAD_CONFIGS = [
    ([1, 2], "must be a mapping"),
    ({"cluster": {}}, "'backend' must be one of"),
    ({"backend": "lsf"}, "'backend' must be one of"),
    ({"backend": "local", "clustr": {}}, "unknown top-level key 'clustr'"),
    ({"backend": "local", "cluster": {"n_wrkers": 2}}, "unknown LocalCluster option 'n_wrkers'"),
    ({"backend": "local", "cluster": {"n_workers": 0}}, "'n_workers' must be an integer >= 1"),
    ({"backend": "local", "cluster": {"dashboard_address": ":8787"}}, "unauthenticated Dask dashboard"),
    ({"backend": "local", "cluster": {"dashboard_address": "0.0.0.0:8787"}}, "127.0.0.1:8787"),
    ({"backend": "local", "cluster": {"memory_limit": "lots"}}, "'memory_limit' = 'lots' is not a size"),
    ({"backend": "slurm", "cluster": {"memory": "8GiB"}}, "'cores' is required"),
    ({"backend": "slurm", "cluster": {"cores": 4}}, "'memory' is required"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB", "processes": 4}}, "processes=4 exceeds cores=2"),
    ({"backend": "pbs", "cluster": {"cores": 2, "memory": "8GiB", "walltime": "two hours"}}, "walltime 'two hours'"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB", "walltime": "01:00:00",
                                      "worker_extra_args": ["--lifetime", "60m", "--lifetime-stagger", "5m"]}},
     "not shorter than the walltime"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB", "walltime": "01:00:00",
                                      "worker_extra_args": ["--lifetime", "1h50m"]}}, "is not a duration"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB", "worker_extra_args": "--lifetime 1h"}},
     "must be a list of strings"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB",
                                      "scheduler_options": {"dashboard_address": ":8787"}}}, "dashboard"),
    ({"backend": "scheduler"}, "needs 'address: tcp://host:port'"),
    ({"backend": "scheduler", "address": "tcp://h:1", "security": {"require_encryption": True}}, "tls://"),
    ({"backend": "scheduler", "address": "tcp://h:1", "scale": {"workers": 2}}, "do not apply"),
    ({"backend": "local", "address": "tcp://h:1"}, "only for backend 'scheduler'"),
    ({"backend": "gateway"}, "gateway.address"),
    ({"backend": "kubernetes", "cluster": {"image": 3}}, "'image' must be a string"),
    ({"backend": "local", "scale": {"workers": 2}, "adapt": {"maximum": 3}}, "either 'scale' or 'adapt'"),
    ({"backend": "local", "security": {"tls_cert": "x"}}, "unknown option 'tls_cert'"),
    ({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB"}, "security": {"temporary": True}},
     "only with backend 'local'"),
    ({"backend": "local", "client": {"wait_for_workers": -1}}, "'wait_for_workers' must be an integer >= 0"),
]


@pytest.mark.parametrize("cfg, message", BAD_CONFIGS)
def test_bad_config_is_a_clear_error(cfg, message):
    with pytest.raises(dc.ClusterConfigError, match=None) as exc:
        dc.validate_config(cfg, source="my.yaml")
    assert message in str(exc.value) and "my.yaml" in str(exc.value)


def test_walltime_without_lifetime_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        dc.validate_config({"backend": "slurm", "cluster": {"cores": 2, "memory": "8GiB", "walltime": "02:00:00"}})
    assert "--lifetime" in caplog.text


def test_config_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        dc.load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: [local\n")
    with pytest.raises(dc.ClusterConfigError, match="not valid YAML"):
        dc.load_config(bad)
    with pytest.raises(FileNotFoundError, match="neither a cluster config file nor a scheduler address"):
        dc.connect("no-such-thing")


@pytest.mark.parametrize("backend, module, extra", [
    ("slurm", "dask_jobqueue", "slurm"), ("pbs", "dask_jobqueue", "pbs"),
    ("kubernetes", "dask_kubernetes", "kubernetes"), ("gateway", "dask_gateway", "gateway"),
])
def test_missing_backend_names_the_extra(monkeypatch, backend, module, extra):
    # None in sys.modules makes `import module` raise ImportError
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, module + ".operator", None)
    with pytest.raises(ImportError, match=rf"pip install 'dkpca\[{extra}\]'"):
        dc.backend_class(backend)


def test_missing_extra_is_a_cli_error(monkeypatch, tmp_path, capsys):
    from dkpca.cli import main

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    data = write_data(tmp_path / "d.zarr", make_data(50))
    rc = main(["fit", data, "--cluster", os.path.join(ROOT, "cluster_configs", "slurm.yaml"), "--quiet"])
    assert rc == 2 and "pip install 'dkpca[slurm]'" in capsys.readouterr().err


def test_tls_security(tmp_path):
    cfg = dc.load_config(os.path.join(ROOT, "cluster_configs", "tls.yaml"))
    with pytest.raises(FileNotFoundError, match="tls_ca_file"):
        dc.make_security(dict(cfg["security"]), "tls.yaml")
    sec = dict(cfg["security"])
    for key in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        p = tmp_path / key
        p.write_text("placeholder")
        sec[key] = str(p)
    s = dc.make_security(sec, "tls.yaml")
    from distributed.security import Security

    assert isinstance(s, Security) and s.require_encryption and s.tls_ca_file == str(tmp_path / "tls_ca_file")


@pytest.mark.parametrize("name, cls, needles", [
    ("slurm.yaml", "SLURMCluster", ["#SBATCH -t 04:00:00", "#SBATCH --exclusive", "--lifetime 225m",
                                    "--lifetime-stagger 5m", "--local-directory $TMPDIR", "--nthreads 1",
                                    "--nworkers 4"]),
    ("pbs.yaml", "PBSCluster", ["#PBS -l walltime=02:00:00", "#PBS -l place=excl", "--lifetime 110m",
                                "--local-directory $TMPDIR", "--nworkers 8"]),
])
def test_jobqueue_job_script(name, cls, needles):
    jq = pytest.importorskip("dask_jobqueue")
    cfg = dc.load_config(os.path.join(ROOT, "cluster_configs", name))
    kwargs = dict(cfg["cluster"])
    kwargs["scheduler_options"] = {**kwargs.get("scheduler_options", {}), "host": "127.0.0.1"}
    with getattr(jq, cls)(**kwargs) as cluster:
        script = cluster.job_script()
    assert script.startswith("#!/usr/bin/env bash")
    for needle in needles:
        assert needle in script, f"{needle!r} missing from the {cls} job script:\n{script}"


def test_local_config_starts_and_fits(tmp_path, caplog, blobs):
    path = os.path.join(ROOT, "cluster_configs", "local.yaml")
    cfg = dc.load_config(path)
    cfg["cluster"]["dashboard_address"] = "127.0.0.1:0"  # the shipped port may be taken here
    with caplog.at_level(logging.INFO, logger="dkpca"), dc.connected(cfg) as client:
        assert len(client.scheduler_info()["workers"]) == cfg["cluster"]["n_workers"]
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        model = dkpca.fit(blobs, n_components=3, gamma=0.1, solver="randomized", chunk_size=200, dtype="float64",
                          tol=1e-10, store=tmp_path / "s.zarr")
    assert "dashboard: http://127.0.0.1:" in caplog.text
    lam, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_connect_by_address(proc_cluster, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="dkpca"):
        client = dc.connect(proc_cluster.address)
    try:
        assert len(client.scheduler_info()["workers"]) == 2
    finally:
        dc.close(client)
    assert f"Dask scheduler {proc_cluster.address}" in caplog.text


def test_cli_fit_on_multiprocess_cluster(proc_cluster, tmp_path):
    X = make_data(900, seed=3)
    data = write_data(tmp_path / "d.zarr", X)
    proc = subprocess.run(dkpca_cmd("fit", data, "-k", "4", "--gamma", "0.2", "--solver", "randomized",
                                    "--chunk-size", "150", "--dtype", "float64", "--tol", "1e-10",
                                    "--scheduler", proc_cluster.address),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "Gram blocks: 21 computed, 0 reused" in proc.stdout
    assert "pass" in proc.stdout and "Gram matrix: 21 of 21 blocks" in proc.stdout  # progress
    assert "dashboard: http://127.0.0.1:" in proc.stderr and "plan: n=900" in proc.stderr
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 4)
    np.testing.assert_allclose(dkpca.load(tmp_path / "d.dkpca.zarr").eigenvalues_, lam, rtol=1e-8)
    # the work ran on the cluster's workers, not in the CLI process
    logs = "".join(open(os.path.join(proc_cluster.tmp, f"worker{i}.log")).read() for i in range(2))
    assert "Traceback" not in logs


def test_cli_transform_with_cluster_file(tmp_path, blobs):
    data = write_data(tmp_path / "d.zarr", blobs)
    store = tmp_path / "d.dkpca.zarr"
    model = dkpca.fit(data, n_components=2, gamma=0.1, store=store, dtype="float64")
    cfg = {"backend": "local", "cluster": {"n_workers": 1, "dashboard_address": "127.0.0.1:0"}}
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    from dkpca.cli import main

    assert main(["transform", str(store), data, str(tmp_path / "z.zarr"), "--cluster", str(cfg_path), "-q"]) == 0
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[:], model.embedding_, atol=1e-8)
