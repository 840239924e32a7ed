"""dkpca.plan / `dkpca plan`: sizes and estimates without computing K."""

from __future__ import annotations

import logging
import os
import subprocess

import numpy as np
import pytest

import dkpca
from dkpca.planning import plan
from dkpca.storage import fitstore, gram_bytes

from .conftest import ROOT, dkpca_cmd, make_data, write_data


def test_plan_sizes_without_computing(tmp_path):
    X = make_data(2000, seed=1)
    data = write_data(tmp_path / "d.zarr", X)
    p = plan(data, n_components=3, gamma=0.2, chunk_size=300, dtype="float32", solver="randomized", tol=1e-8,
             gram="store")
    assert not os.path.exists(tmp_path / "d.dkpca.zarr")  # nothing written, K not computed
    assert p.n_row_blocks == 7 and p.n_block_tasks == 28 and p.chunk_shape == (300, 300)
    assert p.gram_bytes == gram_bytes(2000, 300, np.float32) and p.chunk_bytes == 300 * 300 * 4
    assert p.free_bytes > 0 and p.memory_per_task >= 2 * 300 * 300 * 4
    assert p.memory_per_worker == p.threads_per_worker * p.memory_per_task
    assert set(p.measured) >= {"kernel_block", "write_block", "read_block", "product_block"}
    assert all(v > 0 for v in p.measured.values())
    assert p.total_seconds > p.build_seconds > 0 and p.pass_seconds > 0
    text = str(p)
    for needle in ("Gram store:", "chunk shape:   300 x 300 float32", "per worker", "passes:", "estimate:"):
        assert needle in text
    # the pass estimate is of the right size: compare with a real fit
    model = dkpca.fit(data, n_components=3, gamma=0.2, chunk_size=300, solver="randomized", tol=1e-8,
                      store=tmp_path / "s.zarr", gram="store")
    actual = model.report["passes"]
    assert abs(p.expected_passes - actual) <= max(3, actual // 2), (p.expected_passes, actual)


def test_plan_dense_and_recompute(blobs):
    p = plan(blobs, n_components=2, measure=False)
    assert p.solver == "dense" and p.expected_passes == 1 and not p.measured and "not measured" in str(p)
    q = plan(blobs, n_components=2, gram="recompute", solver="randomized", chunk_size=200)
    assert q.gram_bytes == 0 and "recomputed every pass" in str(q) and q.build_seconds == 0


def test_plan_with_cluster_config(blobs):
    p = plan(blobs, n_components=2, cluster=os.path.join(ROOT, "cluster_configs", "slurm.yaml"), measure=False)
    assert p.workers == 16 and p.threads_per_worker == 1 and p.memory_available_per_worker == 8 * 2**30
    with pytest.raises(FileNotFoundError):
        plan(blobs, cluster="no-such.yaml", measure=False)


def test_plan_validates_like_fit(blobs):
    with pytest.raises(ValueError, match="n_components=0"):
        plan(blobs, n_components=0)
    with pytest.raises(ValueError, match="solver='nope'"):
        plan(blobs, solver="nope")


def test_plan_warns_on_small_disk(blobs, monkeypatch, tmp_path):
    from collections import namedtuple

    monkeypatch.setattr(fitstore.shutil, "disk_usage", lambda p: namedtuple("u", "total used free")(1, 1, 1000))
    p = plan(blobs, n_components=2, store=tmp_path / "s.zarr", measure=False, gram="store")
    assert any("only 1000 B is free" in w for w in p.warnings) and "warning:" in str(p)


def test_cli_plan_and_fit_logs_plan(tmp_path, blobs, caplog):
    data = write_data(tmp_path / "d.zarr", blobs)
    out = subprocess.run(dkpca_cmd("plan", data, "-k", "2", "--chunk-size", "200", "--cluster",
                                   os.path.join(ROOT, "cluster_configs", "local.yaml")),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "plan: n=600, d=6, k=2" in out.stdout and "workers:       2 x 1 thread(s)" in out.stdout
    assert not os.path.exists(tmp_path / "d.dkpca.zarr")
    with caplog.at_level(logging.INFO, logger="dkpca"):
        dkpca.fit(data, n_components=2, chunk_size=200, store=tmp_path / "s.zarr")
    assert "plan: n=600, d=6, k=2" in caplog.text and "Gram store:" in caplog.text


# -- display: HTML repr, plots, notebook -----------------------------------------
def test_html_repr_and_plots(tmp_path, blobs):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model = dkpca.fit(blobs, n_components=3, gamma=0.1, store=tmp_path / "s.zarr")
    html = model._repr_html_()
    assert html.count("<tr>") >= 3 + 6 and "eigenvalue" in html and "<table>" in html
    ax = model.plot_spectrum()
    assert len(ax.patches) == 3
    np.testing.assert_allclose([p.get_height() for p in ax.patches], model.explained_variance_ratio_)
    ax = model.plot_embedding(c=np.arange(600))
    np.testing.assert_allclose(ax.collections[0].get_offsets(), model.embedding_[:, :2])
    with pytest.raises(ValueError, match="out of range"):
        model.plot_embedding(components=(0, 5))


def test_plot_without_matplotlib(monkeypatch, tmp_path, blobs):
    import sys

    model = dkpca.fit(blobs, n_components=2, gamma=0.1, store=tmp_path / "s.zarr")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'dkpca\[plot\]'"):
        model.plot_spectrum()
