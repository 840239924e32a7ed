"""README's usage sections run as written: pre-images and denoising, scikit-learn pipelines, sparse kernel PCA.

Each ```python block of those sections is executed as it stands (small synthetic data, a few seconds in all);
the printed figures are checked against what README's comments say (mean squared errors to 0.002, the
block's rounding plus BLAS differences), and README links the examples and the figure they produce.
"""

from __future__ import annotations

import contextlib
import io
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    README = _f.read()

SECTIONS = ("### Denoising: pre-images", "### scikit-learn pipelines", "### Sparse kernel PCA")


def blocks(heading: str) -> list[str]:
    assert heading in README, f"README has no section {heading!r}"
    section = README.split(heading, 1)[1].split("\n#", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, re.S)
    assert found, f"README's {heading!r} has no python block"
    return found


def run(code: str, tmp_path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(tmp_path):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    return out.getvalue()


def test_the_denoising_block_runs_and_prints_what_its_comments_say(tmp_path):
    (code,) = blocks(SECTIONS[0])
    printed = dict(re.findall(r"^([\w-]+): ([\d.]+)$", run(code, tmp_path), re.M))
    stated = {name: value for comment in re.findall(r"# (.*)", code)
              for name, value in re.findall(r"([\w-]+) (0\.\d{3})", comment)}
    assert set(printed) == {"noisy", "ridge", "kwok-tsang", "fixed-point"} == set(stated)
    for name, value in printed.items():
        assert float(value) == pytest.approx(float(stated[name]), abs=0.002), name
    assert max(float(printed[m]) for m in ("ridge", "kwok-tsang", "fixed-point")) < float(printed["noisy"])


@pytest.mark.parametrize("heading", SECTIONS[1:])
def test_the_pipeline_and_sparse_blocks_run(tmp_path, heading):
    for code in blocks(heading):
        assert run(code, tmp_path).strip()


def test_readme_links_the_examples_and_the_figure():
    for target in ("examples/denoise_usps.py", "docs/denoise_usps.png", "examples/sparse_pima.py",
                   "examples/sparse_toy.py"):
        assert f"]({target})" in README, target
