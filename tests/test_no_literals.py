"""No solver name or Gram mode is compared as a string outside ``dkpca/solvers/`` and ``dkpca/planning/``.

Above those packages decisions travel as typed values (``dkpca.solvers.Solver``,
``dkpca.planning.GramMode``) in one ``FitPlan``; a string compared there is a
decision re-made from a name.  Reference: the source itself, read with ``ast``:
every ``==`` or ``!=`` one of whose sides is such a string literal, and every
``in`` / ``not in`` whose container is a tuple, list or set holding one
(``gram in ("store", "recompute")``; ``"memory" in limits`` looks a key up in a
mapping -- a Kubernetes worker's resources -- and compares no decision).
"""

from __future__ import annotations

import ast
from pathlib import Path

import dkpca

NAMES = {"dense", "arpack", "randomized", "lanczos", "nystrom",  # solvers
         "store", "recompute", "memory"}  # Gram modes
ALLOWED = ("solvers", "planning")  # the packages that define and decide them
ROOT = Path(dkpca.__file__).parent


def _literals(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def compared_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each comparison against a solver-name or Gram-mode literal in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                sides = _literals(left) | _literals(right)
            elif isinstance(op, (ast.In, ast.NotIn)) and not isinstance(right, ast.Constant):
                sides = _literals(right)  # the container's members
            else:
                sides = set()
            found += [(node.lineno, name) for name in sorted(sides & NAMES)]
            left = right
    return found


def test_the_scan_finds_a_literal_comparison():
    assert compared_names('if solver == "dense" or gram in ("store", "x"):\n    pass\n') == [(1, "dense"),
                                                                                               (1, "store")]
    assert compared_names("if solver is Solver.DENSE or 'memory' in limits:\n    pass\n") == []


def test_no_solver_or_gram_literal_compared_outside_solvers_and_planning():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ALLOWED:
            continue
        offenders += [f"dkpca/{rel}:{line}: {name!r}" for line, name in compared_names(path.read_text())]
    assert not offenders, "solver names or Gram modes compared as strings:\n" + "\n".join(offenders)
