"""Silent pitfalls warn: a kernel matrix that is numerically the identity or constant, a CSV's row index column
and a narrow CSV's first line of numbers (a header or a row: a guess, said).

References: the sample's median squared distance computed here directly (numpy, on the rows
``sample_rows`` picks), the message's figures compared at its printed 3 significant digits; the CSV's
columns as pandas wrote them.  Ordinary data and files give no such warning (warnings turned into errors).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import dkpca
from dkpca import KernelScaleWarning, RowIndexWarning
from dkpca.cli import main
from dkpca.io import open_input
from dkpca.planning import sample_rows


def pixels(n: int = 300, d: int = 64, seed: int = 0) -> np.ndarray:
    """Unscaled 8-bit 'images': every pair is thousands of gamma = 1/d units apart."""
    return (np.random.default_rng(seed).random((n, d)) * 255).astype(np.uint8)


def median_sq_distance(X: np.ndarray) -> float:
    S = sample_rows(X).astype(np.float64)
    d2 = ((S[:, None, :] - S[None, :, :]) ** 2).sum(-1)
    return float(np.median(d2[np.triu_indices(S.shape[0], 1)]))


def test_unscaled_pixels_with_the_default_gamma_warn_with_the_measured_scale():
    """dkpca.fit of uint8 data, rbf's default gamma: K = I to rounding; the warning gives the median and 1/median."""
    X = pixels()
    median = median_sq_distance(X)
    with pytest.warns(KernelScaleWarning, match="numerically the identity") as got:
        with dkpca.fit(X, n_components=3) as model:
            lam = model.eigenvalues_
    text = str(got[0].message)
    assert f"median squared distance of its pairs, {median:.3g}" in text
    assert f"1/{median:.3g} = {1 / median:.3g}" in text and "X / 255" in text
    assert np.allclose(lam, lam[0], rtol=1e-3)  # what the warning says: all eigenvalues equal


@pytest.mark.parametrize("source", ["numpy", "npy"])
def test_a_fit_in_float64_warns_too(tmp_path, source):
    """dtype='float64' measures no precision: the sample's kernel alone is checked, in memory and from a file."""
    X = pixels()
    if source == "npy":
        np.save(tmp_path / "x.npy", X)
        X = str(tmp_path / "x.npy")
    with pytest.warns(KernelScaleWarning, match="numerically the identity"):
        with dkpca.fit(X, n_components=3, dtype="float64", store=str(tmp_path / "s.dkpca.zarr")):
            pass


def test_the_estimator_warns_with_dtype_float64_asked_for():
    """KernelPCA(dtype='float64') measures no precision either: the same scale check as float64 input."""
    with pytest.warns(KernelScaleWarning, match="numerically the identity"):
        dkpca.KernelPCA(n_components=3, kernel="rbf", dtype="float64").fit(pixels())


def test_the_estimator_warns_on_float64_input_too():
    """KernelPCA's float64 path measures no precision; its sample's kernel alone is checked."""
    with pytest.warns(KernelScaleWarning, match="rbf gamma=0.0156"):
        dkpca.KernelPCA(n_components=3, kernel="rbf").fit(pixels().astype(np.float64))


def test_a_gamma_far_below_the_data_scale_warns_of_a_constant_kernel():
    X = np.random.default_rng(1).standard_normal((200, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fit's own warning: every component is zero
        with pytest.warns(KernelScaleWarning, match="numerically constant"):
            dkpca.KernelPCA(n_components=2, kernel="rbf", gamma=1e-20, dtype="auto").fit(X.astype(np.float32))


@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "poly"])
def test_ordinary_data_gives_no_scale_warning(kernel):
    X = np.random.default_rng(2).standard_normal((300, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelScaleWarning)
        with dkpca.fit(X, n_components=3, kernel=kernel):
            pass
        dkpca.KernelPCA(n_components=3, kernel=kernel).fit(X.astype(np.float64))


def test_a_csv_with_pandas_index_column_warns_and_names_the_fix(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("dask.dataframe")
    path = tmp_path / "x.csv"
    pd.DataFrame(np.random.default_rng(3).standard_normal((50, 3)), columns=list("abc")).to_csv(path)
    with pytest.warns(RowIndexWarning, match=r"index=False.*index_col=0"):
        X = open_input(str(path))
    assert X.shape == (50, 4)  # warned, not changed: the file is read as written


@pytest.mark.parametrize("write, name", [
    (lambda pd, X, p: pd.read_csv(_csv_with_index(pd, X, p)).to_parquet(p / "x.parquet"), "Unnamed: 0"),
    (lambda pd, X, p: pd.DataFrame(X, columns=list("abc")).reset_index().to_parquet(p / "x.parquet", index=False),
     "index"),
])
def test_a_parquet_file_with_a_row_index_column_warns_and_names_it(tmp_path, write, name):
    """Before: fitted without a word, the counter a feature that grows with the row number."""
    pd = pytest.importorskip("pandas")
    write(pd, np.random.default_rng(3).standard_normal((50, 3)), tmp_path)
    with pytest.warns(RowIndexWarning, match=re.escape(f"the first column {name!r} counts 0, 1, 2, ...")):
        X = open_input(str(tmp_path / "x.parquet"))
    assert X.shape == (50, 4)  # warned, not changed
    pd.read_parquet(tmp_path / "x.parquet").drop(columns=name).to_parquet(tmp_path / "x.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RowIndexWarning)
        assert open_input(str(tmp_path / "x.parquet")).shape == (50, 3)


def test_the_parquet_row_index_check_reads_that_column_alone(tmp_path, monkeypatch):
    """A wide file's first row group can be all of it: the check reads the one column it looks at."""
    pd = pytest.importorskip("pandas")
    pq = pytest.importorskip("pyarrow.parquet")
    pd.DataFrame(np.random.default_rng(3).standard_normal((50, 30))).add_prefix("f").reset_index().to_parquet(
        tmp_path / "x.parquet", index=False)
    read, real = [], pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, columns=None, **kw: read.append(columns) or real(self, i, columns, **kw))
    with pytest.warns(RowIndexWarning):
        open_input(str(tmp_path / "x.parquet"))
    assert read == [["index"]]


def _csv_with_index(pd, X, path):
    pd.DataFrame(X).to_csv(path / "x.csv")
    return path / "x.csv"


def test_the_cli_folds_a_warning_into_the_error_that_follows_it(tmp_path, capsys):
    """Before: Python's two warning lines (file, source line) came before the one error line.  Now the only line
    on stderr is the error, carrying the warning that explains it (the index column is the sixth feature)."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("dask.dataframe")
    rng = np.random.default_rng(5)
    np.save(tmp_path / "x.npy", rng.standard_normal((60, 5)))
    assert main(["fit", str(tmp_path / "x.npy"), "-k", "2", "-q"]) == 0
    pd.DataFrame(rng.standard_normal((20, 5))).to_csv(tmp_path / "idx.csv")
    assert main(["transform", str(tmp_path / "x.npy.dkpca.zarr"), str(tmp_path / "idx.csv"),
                 str(tmp_path / "z.zarr")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("dkpca: error: X has 6 features") and "It followed a warning" in line and \
        "index=False" in line, line


def test_the_cli_says_a_warning_in_one_line_before_a_command_goes_on(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("dask.dataframe")
    pd.DataFrame(np.random.default_rng(6).standard_normal((60, 3))).to_csv(tmp_path / "idx.csv")
    assert main(["fit", str(tmp_path / "idx.csv"), "-k", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dkpca: warning: input") and "index=False" in err[0], err
    assert err[1].startswith("dkpca: plan:") and not any("RowIndexWarning" in line for line in err), err


def test_csvs_without_a_row_index_give_no_warning(tmp_path):
    """index=False, an unnamed first column that is data (not 0, 1, 2, ...), and a named index."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("dask.dataframe")
    frame = pd.DataFrame(np.random.default_rng(4).standard_normal((50, 3)), columns=["x", "b", "c"])
    frame.to_csv(tmp_path / "plain.csv", index=False)
    frame.rename(columns={"x": ""}).to_csv(tmp_path / "unnamed.csv", index=False)
    named = frame.copy()
    named.index.name = "id"  # a named index is a column its writer meant to keep
    named.to_csv(tmp_path / "named.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RowIndexWarning)
        for name in ("plain", "unnamed", "named"):
            open_input(str(tmp_path / f"{name}.csv"))


# A CSV of one or two columns whose first line is numbers that a header also reads as: pandas' labels '0' (or
# '0,1') head a frame written from an array, and start a column of counts as often; integers over fractions.
NARROW_FIRST_LINES = [
    ("0\n1\n-2\n3\n", "'0' was read as column names", (3, 1)),
    ("0,1\n1.5,2\n3,4\n2,2\n", "'0,1' was read as column names", (3, 2)),
    ("3\n2.5\n1\n4\n", "'3' was read as a row of data", (4, 1)),  # before: a header, a row lost without a word
    ("3,5\n2.5,1\n1,2\n4,4\n", "'3,5' was read as a row of data", (4, 2)),
]


@pytest.mark.parametrize("text, said, shape", NARROW_FIRST_LINES)
def test_a_narrow_csvs_first_line_of_numbers_is_read_one_way_and_said(tmp_path, text, said, shape):
    pytest.importorskip("dask.dataframe")
    (tmp_path / "x.csv").write_text(text)
    with pytest.warns(dkpca.HeaderGuessWarning, match=re.escape(said)) as got:
        X = open_input(str(tmp_path / "x.csv"))
    assert X.shape == shape
    assert "write a line of names first" in str(got[0].message)


@pytest.mark.parametrize("text", ["x\n0\n1\n-2\n", "0.5\n1\n-2\n", "1,1\n2,5\n", "0,1,2\n1.5,2,1\n3,4,1\n",
                                  "400,450,500\n0.1,0.2,0.3\n"])
def test_a_first_line_that_reads_one_way_only_gives_no_header_warning(tmp_path, text):
    """A named header, a first row with a fraction or of integers over integers (data), and three or more columns
    (pandas' labels and integers over fractions are headers: a data row of exactly those is rare there)."""
    pytest.importorskip("dask.dataframe")
    (tmp_path / "x.csv").write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dkpca.HeaderGuessWarning)
        open_input(str(tmp_path / "x.csv"))
