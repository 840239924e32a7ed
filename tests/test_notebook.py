"""``examples/walkthrough.ipynb``: committed with the outputs of a real run, and that run is clean.

The committed file is checked as a reader on a code host sees it (fast):
every code cell ran, in order, and shows its output; no traceback, no
error, nothing on stderr (distributed's INFO logs included); the plan and
the dashboard link once each; both figures; under 300 KB.  The slow test
executes the notebook afresh, from another working directory, through
``examples/refresh_walkthrough.py`` (the script that wrote the committed
outputs), and checks the same of the new run and that it matches the
committed one cell by cell.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT

nbformat = pytest.importorskip("nbformat")

NOTEBOOK = os.path.join(ROOT, "examples", "walkthrough.ipynb")
REFRESH = os.path.join(ROOT, "examples", "refresh_walkthrough.py")


def code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def texts(nb) -> list[str]:
    """Every output's text: streams, and the plain and HTML forms of results and displays."""
    out = []
    for cell in code_cells(nb):
        for o in cell.outputs:
            out.append(o.get("text", "") + "".join(str(o.get("data", {}).get(m, "")) for m in
                                                   ("text/plain", "text/html")))
    return out


@pytest.fixture(scope="module")
def committed():
    return nbformat.read(NOTEBOOK, as_version=4)


def assert_clean_run(nb) -> None:
    """What a reader must see: outputs of one in-order run, no error, the plan and the dashboard link once."""
    cells = code_cells(nb)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1))
    # every cell but the imports and the shutdown shows something
    assert all(c.outputs for c in cells[1:-1]), [c.source[:40] for c in cells[1:-1] if not c.outputs]
    outputs = [o for c in cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # stderr carries dkpca's progress lines (no ipywidgets here for a bar) and nothing else: no logs, no warnings
    stderr = [line for o in outputs if o.output_type == "stream" and o.name == "stderr"
              for line in o.text.splitlines() if line.strip()]
    assert all(re.match(r"dkpca: .*(: \d+ tasks|\d+% \(\d+/\d+\))$", line) for line in stderr), stderr
    joined = "\n".join(texts(nb))
    assert "Traceback" not in joined and "INFO" not in joined
    assert joined.count("dashboard: http://127.0.0.1:") == 1
    assert joined.count("plan: n=2000, d=10, k=6") == 1
    assert "dkpca KPCAModel" in joined  # the per-pass report goes to the dkpca logger, not into cells
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # spectrum and embedding
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]


def test_committed_notebook_shows_one_clean_run(committed):
    assert_clean_run(committed)


def test_committed_notebook_is_small():
    assert os.path.getsize(NOTEBOOK) < 300_000


@pytest.mark.slow
def test_notebook_runs_from_another_directory_as_committed(tmp_path, committed):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    target = tmp_path / "executed.ipynb"
    temp = tmp_path / "tmp"  # the kernel's temporary directory
    temp.mkdir()
    proc = subprocess.run([sys.executable, REFRESH, str(target)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stderr
    fresh = nbformat.read(str(target), as_version=4)
    assert_clean_run(fresh)
    # the committed outputs are those of this notebook's source: same cells, same kinds of output
    assert [c.source for c in code_cells(fresh)] == [c.source for c in code_cells(committed)]
    kinds = [[(o.output_type, sorted(o.get("data", {}))) for o in c.outputs] for c in code_cells(fresh)]
    assert kinds == [[(o.output_type, sorted(o.get("data", {}))) for o in c.outputs] for c in code_cells(committed)]
    # the run cleaned up after itself (dask's own scratch space aside)
    assert [p for p in os.listdir(temp) if p != "dask-scratch-space"] == []
