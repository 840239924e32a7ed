"""Execute ``walkthrough.ipynb`` and write it with its outputs: the committed outputs are this run's.

    python examples/refresh_walkthrough.py              # refresh examples/walkthrough.ipynb in place
    python examples/refresh_walkthrough.py OUT.ipynb    # write the executed notebook elsewhere

The kernel starts in a new temporary directory (the notebook depends on no
working directory) and may take up to ten minutes.  Stream outputs are stored
as Jupyter shows them: consecutive pieces of one stream joined, each line
what is left after its last carriage return (progress bars redraw their
line), terminal escape codes removed -- so a reader on a code host sees the
text, not a thousand progress-bar frames.  Needs nbclient, nbformat and
ipykernel (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

import nbclient
import nbformat

NOTEBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "walkthrough.ipynb")
#: CSI escape sequences (colours, "erase line")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def as_shown(outputs: list) -> list:
    """Stream outputs joined and rendered as a notebook front end renders them; other outputs unchanged."""
    joined: list = []
    for out in outputs:
        if (out.output_type == "stream" and joined and joined[-1].output_type == "stream"
                and joined[-1].name == out.name):
            joined[-1].text += out.text
        else:
            joined.append(out)
    shown = []
    for out in joined:
        if out.output_type == "stream":
            text = re.sub(r"\r+\n", "\n", ANSI.sub("", out.text))
            out.text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
            if not out.text.strip():
                continue  # only progress frames, all redrawn away
        shown.append(out)
    return shown


def execute(source: str, target: str, timeout: int = 600) -> nbformat.NotebookNode:
    """Run ``source`` in a fresh kernel started in a temporary directory; write the result to ``target``."""
    nb = nbformat.read(source, as_version=4)
    with tempfile.TemporaryDirectory(prefix="dkpca-nb-cwd-") as cwd:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": cwd}}).execute()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = as_shown(cell.outputs)
    nb.metadata.pop("widgets", None)  # no widget state: nothing a code host cannot show
    nbformat.write(nb, target)
    return nb


if __name__ == "__main__":
    execute(NOTEBOOK, sys.argv[1] if len(sys.argv) > 1 else NOTEBOOK)
