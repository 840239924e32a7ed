"""The ``dkpca`` command end to end, as a user runs it (real subprocesses, ``python -m dkpca``)."""

import argparse
import json
import subprocess
import sys

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import model_facts
from dkpca.kernels import KERNEL_NAMES
from dkpca.solvers import SOLVERS

from .conftest import cli_subparsers, reference_eigh


def run(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "dkpca", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"dkpca {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def data_path(tmp_path, blobs):
    path = tmp_path / "data.zarr"
    zarr.create_array(str(path), data=blobs, chunks=(128, blobs.shape[1]))
    return path


def test_fit_info_transform(tmp_path, data_path, blobs):
    out = run("fit", str(data_path), "--n-components", "4", "--gamma", "0.1", "--dtype", "float64",
              "--chunk-size", "200", "--solver", "randomized", "--tol", "1e-10", "--no-progress")
    store = tmp_path / "data.dkpca.zarr"
    assert str(store) in out.stdout and "Gram blocks: 6 computed, 0 reused" in out.stdout
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 4)
    np.testing.assert_allclose(dkpca.load(store).eigenvalues_, lam_ref, rtol=1e-8)

    again = run("fit", str(data_path), "--n-components", "4", "--gamma", "0.1", "--dtype", "float64",
                "--chunk-size", "200", "--solver", "dense", "--no-progress")
    assert "Gram blocks: 0 computed, 6 reused" in again.stdout

    info = run("info", str(store))
    assert "eigenvalue" in info.stdout and "rbf" in info.stdout

    shown = run("transform", str(store), str(data_path), str(tmp_path / "z.zarr"))
    Z = zarr.open_array(str(tmp_path / "z.zarr"), mode="r")[:]
    np.testing.assert_allclose(Z, dkpca.load(store).embedding_, atol=1e-8)
    assert "projecting: 100%" in shown.stderr
    quiet = run("transform", str(store), str(data_path), str(tmp_path / "z2.zarr"), "--no-progress")
    assert "projecting" not in quiet.stderr  # as fit's option: before, 'unrecognized arguments: --no-progress'


@pytest.mark.parametrize(
    "args, message",
    [
        (["fit", "/no/such/input.zarr"], "does not exist"),
        (["fit", "{data}", "--n-components", "100000"], "n_components=100000"),
        (["fit", "{data}", "--gamma", "-1"], "gamma=-1.0"),
        (["info", "/no/such/store.zarr"], "does not exist"),
        # usage errors, found by argparse: the same one line and prefix, never argparse's "dkpca fit: error:"
        (["fit"], "the following arguments are required: INPUT"),
        (["fit", "{data}", "--kernel", "gauss"], "argument --kernel: invalid choice: 'gauss'"),
        (["plan", "{data}", "--solver", "arpack", "--gram", "store"], "solver='arpack' needs K in memory"),
        (["fit", "{data}", "-k", "two"], "argument --n-components/-k: 'two' is neither an integer"),
        # argparse reads -1e-3 as an option (only -2 and -0.5 look like numbers to it): the spelling that works
        (["fit", "{data}", "--kernel", "sigmoid", "--coef0", "-1e-3"], "is written --coef0=-1e-3"),
        (["info", "{data}", "--no-such-option"], "unrecognized arguments: --no-such-option (see 'dkpca info --help')"),
        (["bogus"], "invalid choice: 'bogus'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_input_is_one_line_error(data_path, args, message):
    args = [a.format(data=data_path) for a in args]
    proc = run(*args, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dkpca: error:") and message in lines[0], proc.stderr


def test_fingerprint_mismatch_names_overwrite(tmp_path, data_path, blobs):
    run("fit", str(data_path), "--no-progress")
    zarr.create_array(str(data_path), data=blobs + 1, chunks=(128, blobs.shape[1]), overwrite=True)
    proc = run("fit", str(data_path), "--no-progress", check=False)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
    run("fit", str(data_path), "--no-progress", "--overwrite")


def test_demo_runs_on_local_cluster(tmp_path):
    out = run("demo", "--dir", str(tmp_path), "--n-samples", "3000", "--n-components", "3", "--workers", "2")
    assert out.stderr.count("dashboard: http://127.0.0.1") == 1  # the link, once
    assert "eigenvalue" in out.stdout and "explained" in out.stdout
    model = dkpca.load(tmp_path / "shells.dkpca.zarr")
    assert model.n_samples == 3000 and model.report["converged"]


def test_version_is_the_package_version():
    out = run("--version")
    assert out.stdout.strip() == f"dkpca {dkpca.__version__}"


def test_help_imports_no_heavy_library():
    """``dkpca --help`` and every ``dkpca COMMAND --help`` in a fresh interpreter load no scikit-learn, Dask
    arrays, distributed or Zarr: those imports take seconds, and the CLI imports them only in the command that
    runs (``python -X importtime -m dkpca --help`` shows what is left)."""
    code = """
import contextlib, json, sys
from dkpca.cli import main
for argv in [["--help"], ["--version"]] + [[command, "--help"] for command in sys.argv[1:]]:
    with contextlib.redirect_stdout(None), contextlib.suppress(SystemExit):
        main(argv)
heavy = [m for m in sys.modules if m.split(".")[0] in ("sklearn", "distributed", "zarr")
         or m.startswith(("dask.array", "dask.dataframe"))]
print(json.dumps(sorted(heavy)))
"""
    proc = subprocess.run([sys.executable, "-c", code, *cli_subparsers()], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_ctrl_c_while_the_command_line_loads_is_one_line():
    """The console script imported the command line (0.3-0.6 s) before any handler: Ctrl-C then printed a
    traceback of 15-65 lines (measured).  An import that is interrupted stands in for the keypress."""
    code = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "dkpca.cli":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
from dkpca.__main__ import main
sys.exit(main())
"""
    proc = subprocess.run([sys.executable, "-c", code, "info", "x"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "dkpca: interrupted\n", "")
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "dkpca"]
    assert script.value == "dkpca.__main__:main"


def test_a_finished_command_leaves_its_objects_to_the_exit_uncollected(fitted):
    """The interpreter's last collections took 0.54-0.70 s after ``dkpca demo`` (0.41 s after importing only its
    libraries): that long after its work, every command still ran, and a Ctrl-C or SIGTERM then killed it by the
    signal without a line.  The console script freezes what is left once the command returns (0.06 s after
    the demo; ``dkpca info`` 1.9-2.2 s -> 1.6-1.7 s in all)."""
    X, data, store = fitted
    code = ("import gc, sys\nfrom dkpca.__main__ import main\n"
            "status = main()\nprint(status, gc.get_freeze_count() > 0)\n")
    proc = subprocess.run([sys.executable, "-c", code, "info", store], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 True"


def test_ctrl_c_while_the_arguments_are_parsed_is_one_line(monkeypatch, capsys):
    import dkpca.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(dkpca.cli, "build_parser", interrupted)
    assert dkpca.cli.main(["info", "x"]) == 130
    assert capsys.readouterr().err == "dkpca: interrupted\n"


def test_kernel_and_solver_choices_are_the_registries():
    for name in ("fit", "plan"):
        options = {o: a for a in cli_subparsers()[name]._actions for o in a.option_strings}
        assert tuple(options["--kernel"].choices) == KERNEL_NAMES
        assert tuple(options["--solver"].choices) == SOLVERS


def test_every_option_help_states_its_default():
    """A literal default is appended by the formatter; a computed one (None) is described in the help itself."""
    for name, parser in cli_subparsers().items():
        text = " ".join(parser.format_help().split())
        for a in parser._actions:
            if not a.option_strings or any(a.default is v for v in (None, False, argparse.SUPPRESS)):
                continue
            assert f"(default: {a.default})" in text, (name, a.option_strings)
        for a in parser._actions:
            if a.option_strings and a.default is None:
                assert "(default: " in (a.help or ""), (name, a.option_strings)


def test_info_json(tmp_path, blobs):
    model = dkpca.fit(blobs, n_components=3, gamma=0.1, store=str(tmp_path / "s.dkpca.zarr"))
    facts = json.loads(run("info", model.store, "--json").stdout)
    assert facts["n_samples"] == 600 and facts["n_components"] == 3 and facts["kernel"] == model.kernel.to_dict()
    assert facts["dkpca_version"] == dkpca.__version__
    np.testing.assert_array_equal(facts["eigenvalues"], model.eigenvalues_)  # floats survive JSON exactly
    np.testing.assert_array_equal(facts["explained_variance_ratio"], model.explained_variance_ratio_)
    assert facts["report"]["solver"] == model.report["solver"]


def test_info_json_has_no_nan(tmp_path, blobs):
    """JSON has no NaN: a non-finite number in the report is null, so strict parsers read the output."""
    model = dkpca.fit(blobs, n_components=2, store=str(tmp_path / "s.dkpca.zarr"))
    model.report["max_relative_residual"] = float("nan")
    text = json.dumps(model_facts(model), allow_nan=False)
    assert json.loads(text)["report"]["max_relative_residual"] is None


def test_a_missing_extra_is_a_user_error_and_dkpcas_own_import_failing_a_bug():
    """An ImportError naming a dkpca module is dkpca's bug: it keeps its traceback (was one "error" line)."""
    from dkpca.cli import explain

    assert explain(ImportError("'s3://b/x' needs an fsspec back end that is not installed (pip install 'dkpca[s3]')"))
    assert explain(ImportError("cannot import name 'x' from 'dkpca.storage'", name="dkpca.storage")) is None
