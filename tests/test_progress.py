"""Progress for people and for logs, and dask's own settings respected.

References: a batch log (stderr not a terminal) gets plain lines, at most
one per tenth of a computation plus its header, and no carriage returns or
escape codes; ``--quiet`` leaves stderr empty on success and one error line
on failure; the per-pass report goes through ``logging``, never ``print``.
"""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import threading
import time

import dask
import dask.array as da
import pytest

import dkpca
from dkpca import cluster as dc
from dkpca.execution import compute, local_threads
from dkpca.kernels.library import RBF

from .conftest import dkpca_cmd, make_data, write_data


def fit_cli(tmp_path, *extra):
    data = write_data(tmp_path / "d.zarr", make_data(600))
    return subprocess.run(dkpca_cmd("fit", data, "-k", "3", "--solver", "randomized", "--chunk-size", "100",
                                    "--dtype", "float64", *extra), capture_output=True, text=True, timeout=300)


def test_progress_in_a_log_is_plain_lines(tmp_path):
    proc = fit_cli(tmp_path)  # stderr is a pipe: not a terminal
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    gram = [line for line in proc.stderr.splitlines() if line.startswith("dkpca: Gram matrix: 21 of 21 blocks")]
    assert re.search(r"100% \((\d+)/\1\)$", gram[-1]) and 2 <= len(gram) <= 11  # header + a line per tenth
    assert re.search(r"^dkpca: pass 1: max relative residual", proc.stderr, re.M)
    assert "Gram matrix: 21 of 21" not in proc.stdout and "pass 1" not in proc.stdout  # stdout: results only


def test_quiet_leaves_only_errors(tmp_path):
    proc = fit_cli(tmp_path, "--quiet")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    bad = subprocess.run(dkpca_cmd("fit", str(tmp_path / "missing.zarr"), "--quiet"), capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and bad.stderr.startswith("dkpca: error:")


def test_progress_bar_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    compute(da.ones(100, chunks=10).sum(), label="summing", progress=True)
    assert "summing" in err.getvalue() and "\r" in err.getvalue()  # tqdm redraws its line


def test_progress_callback(tmp_path):
    seen = []
    dkpca.fit(make_data(400), n_components=2, solver="randomized", chunk_size=100, store=tmp_path / "s.zarr",
              progress=lambda label, done, total: seen.append((label, done, total)))
    gram = [s for s in seen if s[0].startswith("Gram matrix")]
    assert gram[0][1] == 0 and gram[-1][1] == gram[-1][2] > 0
    assert [d for _, d, _ in gram] == sorted(d for _, d, _ in gram)


def test_progress_callback_on_a_cluster(tmp_path):
    seen = []
    local = {"n_workers": 1, "processes": False, "dashboard_address": None}
    with dc.connected({"dkpca": {"cluster": {"local": local}}}):
        compute(*[dask.delayed(abs)(-i) for i in range(7)], label="seven", progress=lambda *a: seen.append(a))
    assert seen[0] == ("seven", 0, 7) and seen[-1] == ("seven", 7, 7) and len(seen) == 8


def test_pass_report_goes_through_logging(tmp_path, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="dkpca"):
        dkpca.fit(make_data(400), n_components=2, solver="randomized", chunk_size=100, store=tmp_path / "s.zarr")
    assert any(r.getMessage().startswith("pass 1: max relative residual") for r in caplog.records)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # progress=False: nothing printed


def test_dask_configured_scheduler_runs_every_stage(tmp_path, monkeypatch):
    """``dask.config.set(scheduler="synchronous")``: every kernel block runs in the calling thread."""
    threads, rows = set(), {}
    block = RBF._block

    def spy(self, X, *args, **kwargs):
        threads.add(threading.get_ident())
        rows.setdefault(X.shape[0], set()).add(threading.get_ident())
        return block(self, X, *args, **kwargs)

    monkeypatch.setattr(RBF, "_block", spy)
    X = make_data(500)
    with dask.config.set(scheduler="synchronous"):
        for gram in ("store", "recompute"):  # build and passes, or kernel blocks every pass
            model = dkpca.fit(X, n_components=2, gamma=0.1, solver="randomized", chunk_size=100, gram=gram,
                              store=tmp_path / f"{gram}.zarr")
        model.transform(X[:50])
    assert threads == {threading.get_ident()}
    rows.clear()
    # float64 asked for: no precision sample, only the 256-point sample's kernel (the scale check) in the calling
    # thread; the Gram blocks (100 rows, the chunk size) run in dask's thread pool by default
    dkpca.fit(X, n_components=2, gamma=0.1, solver="randomized", chunk_size=100, gram="recompute",
              store=tmp_path / "threads.zarr", dtype="float64")
    assert rows[100] and threading.get_ident() not in rows[100]


def test_dask_num_workers_setting_is_the_local_parallelism():
    seen = set()

    def record(i):
        seen.add(threading.get_ident())
        return i

    with dask.config.set(scheduler="threads", num_workers=1):
        compute(*[dask.delayed(record)(i) for i in range(20)], threads=8)
    assert len(seen) == 1



def test_notebook_progress_leaves_nothing_behind_when_the_cluster_closes(tmp_path):
    """In Jupyter a fit with progress on a cluster, then the cluster closed: no stray errors afterwards."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    cells = [
        "import logging, time, numpy as np, dkpca\nlogging.basicConfig(level=logging.INFO)",
        "client = dkpca.cluster.connect({'dkpca': {'cluster': {'local': {'n_workers': 1, "
        "'dashboard_address': '127.0.0.1:0'}}}})",
        "X = np.random.default_rng(0).standard_normal((300, 4))\n"
        f"m = dkpca.fit(X, n_components=2, solver='randomized', chunk_size=100, store={str(tmp_path / 's.zarr')!r}, "
        "progress=True)",
        "dkpca.cluster.close(client)\ntime.sleep(3)",
        "print('after close')",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3").execute()
    outputs = [str(o) for cell in nb.cells for o in cell.get("outputs", [])]
    text = "".join(outputs)
    assert text.count("dashboard: http://127.0.0.1:") == 1 and "Gram matrix" in text
    assert "after close" in text
    after = "".join(str(o) for cell in nb.cells[3:] for o in cell.get("outputs", []))
    assert "Error" not in after and "Traceback" not in after


def _fail_now_and_finish_late(mark):
    def late():
        time.sleep(0.5)
        mark.write_text("written")  # a file: a worker may run a copy of this closure

    def fail():
        raise OSError("No space left on device")

    return [dask.delayed(late)(), dask.delayed(fail)()]


def test_a_failed_computation_returns_after_its_running_tasks_end(tmp_path):
    # dask's local scheduler raises at the first error; a sibling already
    # running would otherwise write after the caller let the store go
    with dask.config.set(num_workers=2), pytest.raises(OSError, match="No space"):
        compute(*_fail_now_and_finish_late(tmp_path / "late"))
    assert (tmp_path / "late").exists()


def test_a_failed_computation_on_a_cluster_returns_after_its_tasks_end(tmp_path):
    local = {"n_workers": 1, "threads_per_worker": 2, "processes": False, "dashboard_address": None}
    with dc.connected({"dkpca": {"cluster": {"local": local}}}):
        with pytest.raises(OSError, match="No space"):
            compute(*_fail_now_and_finish_late(tmp_path / "late"))
        assert (tmp_path / "late").exists()  # before the cluster closes


def test_local_threads_return_after_their_running_tasks_end(tmp_path):
    # the in-memory K's block tasks: an error ends the block only once a sibling already running has stopped
    started = threading.Event()

    def late():
        started.set()
        time.sleep(0.5)
        (tmp_path / "late").write_text("written")

    def fail():
        started.wait(5)
        raise OSError("No space left on device")

    with dask.config.set(num_workers=2), pytest.raises(OSError, match="No space"), local_threads() as pmap:
        list(pmap(lambda f: f(), [fail, late]))  # fail's error is seen first, while late runs
    assert (tmp_path / "late").exists()
