"""README.md is true to the code: its option tables, stated defaults, signature, thresholds and links.

Each ``### `dkpca COMMAND ...``` section of README's "Command line" holds one
table whose first column names the options (in backticks) and whose second
states the default: a value in backticks is the literal default, words
describe a default worked out at run time (the parser's ``None``), ``off`` is
a flag not given, ``required`` a positional argument.
"""

import argparse
import ast
import inspect
import os
import re

import pytest

import dkpca
from dkpca.planning.auto import DENSE_MAX_N, SMALL_GRAM_BYTES

from .conftest import ROOT, cli_subparsers

with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    README = _f.read()


def option_table(command: str) -> list[tuple[list[str], str]]:
    """Rows (names in the first column, default cell) of the table under README's heading for ``command``."""
    lines = README.splitlines()
    heading = [i for i, ln in enumerate(lines) if ln.startswith(f"### `dkpca {command}")]
    assert len(heading) == 1, f"README needs one '### `dkpca {command} ...`' section"
    rows, started = [], False
    for ln in lines[heading[0] + 1:]:
        if ln.startswith("#"):
            break
        if ln.startswith("|"):
            started = True
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if cells[0] != "option" and not set(cells[0]) <= set("-: "):
                rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
        elif started:
            break
    return rows


def names(action: argparse.Action) -> list[str]:
    return list(action.option_strings) or [action.metavar or action.dest]


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("command", sorted(cli_subparsers()))
def test_every_option_is_in_the_readme(command):
    parser = cli_subparsers()[command]
    in_parser = sorted(tuple(names(a)) for a in documented_actions(parser))
    in_readme = sorted(tuple(row_names) for row_names, _ in option_table(command))
    assert in_readme == in_parser


@pytest.mark.parametrize("command", sorted(cli_subparsers()))
def test_readme_defaults_are_the_parser_defaults(command):
    by_name = {n: a for a in documented_actions(cli_subparsers()[command]) for n in names(a)}
    for row_names, cell in option_table(command):
        a = by_name[row_names[0]]
        if not a.option_strings:
            assert cell == "required", row_names
        elif a.default is False and a.nargs == 0:
            assert cell == "off", row_names
        elif a.default is None:
            assert cell and not cell.startswith("`"), f"{row_names}: a computed default is described in words"
        else:
            literal = re.fullmatch(r"`([^`]+)`", cell)
            assert literal, f"{row_names}: the default {a.default!r} belongs in backticks, not {cell!r}"
            value = a.type(literal.group(1)) if callable(a.type) else literal.group(1)
            assert value == a.default, row_names


def test_readme_fit_signature_is_the_code():
    """The ``dkpca.fit(...)`` signature README quotes has the function's parameters, in order, with its defaults."""
    quoted = re.search(r"`dkpca\.fit\((.*?)\)`", README, re.S)
    assert quoted, "README quotes dkpca.fit's signature"
    args = ast.parse(f"def fit({' '.join(quoted.group(1).split())}): pass").body[0].args
    readme = {a.arg: None for a in args.args}
    readme.update({a.arg: ast.literal_eval(d) for a, d in zip(args.args[::-1], args.defaults[::-1], strict=False)})
    code = {p.name: (None if p.default is p.empty else p.default)
            for p in inspect.signature(dkpca.fit).parameters.values()}
    assert list(readme) == list(code)
    assert readme == code


def test_readme_states_auto_thresholds_of_the_code():
    assert f"n ≤ {DENSE_MAX_N}" in README
    assert SMALL_GRAM_BYTES == 1 << 30 and "K is at most 1 GiB" in README


def test_readme_mentions_version_and_python_m():
    assert "`dkpca --version`" in README and "`python -m dkpca`" in README


def test_readme_links_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert local, "README links files of the repository"
    missing = [t for t in local if not os.path.exists(os.path.join(ROOT, t))]
    assert not missing


def test_quick_start_is_two_commands():
    """The Quick start stays two commands in one block: install and run the demo; install test extras and test."""
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert blocks == ["pip install -e . && dkpca demo\npip install -e '.[test]' && pytest\n"]
