"""docs/architecture.md tells the truth: its files exist, and the rules of the house it states hold in dkpca/.

Reference for each: the source tree itself (file listing, line counts, ``ast``); every check is exact.
"""

from __future__ import annotations

import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "dkpca")
ARCHITECTURE = os.path.join(ROOT, "docs", "architecture.md")

#: the house's limit on a module's lines (docs/architecture.md, "Rules of the house")
MAX_LINES = 400

#: what may be imported inside a function outside the CLI (docs/architecture.md, "Rules of the house"): optional
#: dependencies, and numba (with llvmlite), whose import costs 0.45 s and which only a large fit compiles with
LAZY_IMPORTS = ("matplotlib", "ipywidgets", "tqdm.notebook", "numba", "llvmlite")


def modules() -> list[str]:
    return sorted(glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True))


def named_paths(text: str) -> set[str]:
    """Every file or folder of dkpca/ that ``text`` names in backticks (``storage/lock.py``, ``execution/``)."""
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.removeprefix("dkpca/")
        if not token.startswith("tests/") and re.fullmatch(r"[\w*]+(/[\w*]+)*\.py|\w+(/\w+)*/", token):
            found.add(token)
    return found


def test_every_file_the_responsibility_table_names_exists():
    with open(ARCHITECTURE, encoding="utf-8") as f:
        text = f.read()
    paths = named_paths(text)
    assert len(paths) > 40  # the table names the house's modules, not a handful
    missing = sorted(p for p in paths if not glob.glob(os.path.join(PACKAGE, p)))
    assert missing == []


def test_every_module_of_the_package_is_named_in_the_architecture():
    """The reverse: a module nobody describes is a module whose job nobody can find."""
    with open(ARCHITECTURE, encoding="utf-8") as f:
        paths = named_paths(f.read())
    named = {m for p in paths for m in glob.glob(os.path.join(PACKAGE, p))}
    # a package's __init__ is described by its package's rows; a row may name a whole folder (``sparse/``)
    undescribed = [os.path.relpath(m, PACKAGE) for m in modules()
                   if m not in named and os.path.dirname(m) + os.sep not in named
                   and os.path.basename(m) != "__init__.py"]
    assert undescribed == []


def docstring_lines(tree: ast.Module) -> int:
    """Lines of the class docstrings of a module (its top-level classes'): an estimator's scikit-learn (numpydoc)
    parameter documentation may exceed the limit; its code and its methods' docstrings may not."""
    documented = (n for n in tree.body if isinstance(n, ast.ClassDef))
    return sum(n.body[0].end_lineno - n.body[0].lineno + 1 for n in documented if ast.get_docstring(n) is not None)


def test_no_module_is_over_the_limit():
    over = {}
    for path in modules():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = source.count("\n")
        if os.path.basename(path) == "estimator.py":
            lines -= docstring_lines(ast.parse(source))
        if lines > MAX_LINES:
            over[os.path.relpath(path, PACKAGE)] = lines
    assert over == {}


def test_imports_inside_functions_are_only_the_documented_ones():
    found = []
    for path in modules():
        if os.path.relpath(path, PACKAGE).startswith("cli") or os.path.relpath(path, PACKAGE) == "__main__.py":
            continue  # each command imports the layers it runs: `dkpca --help` loads none of them; the console
            # script imports the command line under its Ctrl-C handler
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                found += [(os.path.relpath(path, PACKAGE), name) for name in names
                          if not name.startswith(LAZY_IMPORTS)]
    assert found == []


def test_documents_the_package_cites_are_in_the_repository():
    """A docstring that sends the reader to a Markdown file names one the repository has.

    A seed note (``seed ``x.md````: the source a method was written from) is provenance, not a document here.
    """
    cited = set()
    for path in modules():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        cited |= {(os.path.relpath(path, PACKAGE), m.group(1)) for m in re.finditer(r"([\w./-]+\.md)\b", text)
                  if not re.search(r"seed\s+``$", text[:m.start()])}
    missing = sorted((module, name) for module, name in cited
                     if not any(os.path.exists(os.path.join(ROOT, where, name)) for where in ("", "docs")))
    assert missing == []
