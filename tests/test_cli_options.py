"""The CLI's fit and plan options from one declaration, with the Python API's defaults and the registries' choices.

Reference: ``inspect.signature(dkpca.fit)`` / ``inspect.signature(dkpca.plan)`` for the defaults, the
registries (``dkpca.planning.DTYPES``, ``dkpca.request.GRAM_MODES``, ``KERNEL_NAMES``, ``SOLVERS``) for the
choices; every comparison is exact.
"""

from __future__ import annotations

import inspect

import dkpca
from dkpca.grammode import GramMode
from dkpca.kernels import KERNEL_NAMES
from dkpca.planning import DTYPES
from dkpca.request import DEFAULT_MAX_PASSES, DEFAULTS, GRAM_MODES
from dkpca.solvers import SOLVERS

from .conftest import cli_subparsers


def options(command: str) -> dict:
    """The subcommand's options by destination (the Python API's parameter name)."""
    return {a.dest: a for a in cli_subparsers()[command]._actions if a.option_strings and a.dest != "help"}


def api_parameters() -> set[str]:
    """The parameters ``dkpca.fit`` and ``dkpca.plan`` share."""
    return set(inspect.signature(dkpca.fit).parameters) & set(inspect.signature(dkpca.plan).parameters)


def test_options_common_to_fit_and_plan_are_one_declaration():
    """Every option fit and plan share as API parameters: the same flags, default, type, choices and help."""
    fit, plan = options("fit"), options("plan")
    common = set(fit) & set(plan) & api_parameters()
    assert common >= {"n_components", "kernel", "gamma", "degree", "coef0", "solver", "store", "chunk_size",
                      "dtype", "gram", "tol", "max_passes"}
    for name in common:
        a, b = fit[name], plan[name]
        assert (a.option_strings, a.default, a.type, a.choices, a.metavar, a.help) == \
               (b.option_strings, b.default, b.type, b.choices, b.metavar, b.help), name


def test_option_defaults_are_the_python_apis():
    """Each fit/plan option that is an API parameter defaults to what ``dkpca.fit`` and ``dkpca.plan`` default to.

    ``--random-state`` is the one deliberate difference (the CLI's fits are reproducible: 0, the API's None).
    """
    for command, function in (("fit", dkpca.fit), ("plan", dkpca.plan)):
        signature = inspect.signature(function).parameters
        for name, action in options(command).items():
            if name in signature and name != "random_state":
                assert action.default == signature[name].default, (command, name)
                assert DEFAULTS.get(name, action.default) == action.default, (command, name)
    assert options("fit")["random_state"].default == 0


def test_choices_are_the_registries():
    """The choices are the registries' own tuples (identity, not an equal literal that could drift)."""
    for command in ("fit", "plan"):
        found = options(command)
        assert found["dtype"].choices is DTYPES
        assert found["gram"].choices is GRAM_MODES
        assert found["kernel"].choices is KERNEL_NAMES
        assert found["solver"].choices is SOLVERS
    assert GRAM_MODES == ("auto", *(mode.value for mode in GramMode))


def test_max_passes_help_names_the_default_used():
    """``--max-passes`` defaults to None, which means :data:`DEFAULT_MAX_PASSES`; the help says that number."""
    for command in ("fit", "plan"):
        assert f"(default: {DEFAULT_MAX_PASSES})" in options(command)["max_passes"].help
