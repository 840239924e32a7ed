"""Plots people would rather look at (rendered with the Agg backend; artists checked, not pixels).

* the spectrum: integer ticks for component numbers, the cumulative explained
  variance on a second axis (and the asked fraction, if any);
* layouts never cut labels: figures use constrained layout, files are saved
  with a tight bounding box;
* class labels get a legend with one entry per class, continuous values a
  labelled colour bar;
* ``dkpca demo`` writes its embedding plot next to its data and prints how
  well the shells separate (held-out nearest-centroid accuracy).
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

import dkpca  # noqa: E402
from dkpca.plot import is_categorical, new_figure, save_figure  # noqa: E402

from .conftest import dkpca_cmd, make_data  # noqa: E402


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A 3-component model of four clusters, and each point's cluster."""
    rng = np.random.default_rng(4)
    centers = rng.standard_normal((4, 5)) * 3
    classes = rng.integers(0, 4, 300)
    X = centers[classes] + 0.5 * rng.standard_normal((300, 5))
    model = dkpca.fit(X, n_components=3, gamma=0.1, store=tmp_path_factory.mktemp("plot") / "s.zarr")
    return model, classes


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _inside(inner, outer, slack: float = 0.5) -> bool:
    """Whether display-space box ``inner`` lies within ``outer`` (to half a pixel)."""
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


# -- spectrum -------------------------------------------------------------------------
def test_spectrum_component_ticks_are_integers(fitted):
    model, _ = fitted
    ax = model.plot_spectrum()
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks  # 3 bars: a default locator gives 1.5, 2.5


def test_spectrum_shows_cumulative_explained_variance_on_a_second_axis(fitted):
    model, _ = fitted
    ax = model.plot_spectrum()
    (twin,) = [a for a in ax.get_shared_x_axes().get_siblings(ax) if a is not ax]
    (line,) = twin.get_lines()
    np.testing.assert_allclose(line.get_xdata(), [1, 2, 3])
    np.testing.assert_allclose(line.get_ydata(), np.cumsum(model.explained_variance_ratio_))
    np.testing.assert_allclose([p.get_height() for p in ax.patches], model.explained_variance_ratio_)
    assert twin.get_ylim() == pytest.approx((0.0, 1.02)) and twin.get_ylabel() == "cumulative"


def test_spectrum_marks_the_asked_fraction(tmp_path):
    model = dkpca.fit(make_data(300, seed=4), n_components=0.8, gamma=0.1, store=tmp_path / "s.zarr")
    ax = model.plot_spectrum()
    (twin,) = [a for a in ax.get_shared_x_axes().get_siblings(ax) if a is not ax]
    dashed = [ln for ln in twin.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {0.8}


def test_spectrum_labels_are_inside_the_figure(fitted):
    """Constrained layout: what a notebook shows cuts neither axis label nor the legend."""
    model, _ = fitted
    ax = model.plot_spectrum()
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (twin,) = [a for a in ax.get_shared_x_axes().get_siblings(ax) if a is not ax]
    for artist in (ax.xaxis.label, ax.yaxis.label, twin.yaxis.label, ax.title, twin.get_legend()):
        assert _inside(artist.get_window_extent(renderer), fig.bbox), artist


def test_spectrum_legend_is_below_the_axes_clear_of_bars_and_curves(tmp_path):
    """'center right' sat on a fraction fit's cumulative curve and its 'asked' line (both near mid height)."""
    model = dkpca.fit(make_data(300, seed=4), n_components=0.5, gamma=0.1, store=tmp_path / "s.zarr")
    ax = model.plot_spectrum()
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (twin,) = [a for a in ax.get_shared_x_axes().get_siblings(ax) if a is not ax]
    legend = twin.get_legend().get_window_extent(renderer)
    assert legend.y1 <= ax.xaxis.label.get_window_extent(renderer).y0 and _inside(legend, fig.bbox)
    assert [t.get_text() for t in twin.get_legend().get_texts()] == ["per component", "cumulative", "asked: 50%"]


def test_saved_figure_tight_bbox_contains_the_x_label(fitted, tmp_path):
    model, _ = fitted
    fig = new_figure((4.0, 3.0))
    ax = fig.add_subplot()
    model.plot_spectrum(ax=ax)
    path = save_figure(fig, str(tmp_path / "spectrum.png"), dpi=100)
    renderer = fig.canvas.get_renderer()
    tight = fig.get_tightbbox(renderer)  # inches
    assert _inside(ax.xaxis.label.get_window_extent(renderer), tight.transformed(fig.dpi_scale_trans))
    # the file is that box plus matplotlib's 0.1 inch padding, not the 4 x 3 inch canvas
    height, width = matplotlib.image.imread(path).shape[:2]
    assert (width, height) == (pytest.approx((tight.width + 0.2) * 100, abs=1),
                               pytest.approx((tight.height + 0.2) * 100, abs=1))


def test_save_figure_refuses_a_path_without_extension_and_replaces_nothing(fitted, tmp_path):
    """matplotlib writes ``keep`` as keep.png: a file the caller never named was replaced, and ``keep`` returned."""
    model, _ = fitted
    (tmp_path / "keep.png").write_text("precious")
    with pytest.raises(ValueError, match="has no extension; name the format, e.g. .*keep.png"):
        save_figure(model.plot_spectrum(), tmp_path / "keep")
    with pytest.raises(IsADirectoryError, match="is a directory; name a file in it"):
        save_figure(model.plot_spectrum(), tmp_path)
    assert (tmp_path / "keep.png").read_text() == "precious"
    assert save_figure(model.plot_spectrum(), tmp_path / "spectrum.svg") == str(tmp_path / "spectrum.svg")
    assert (tmp_path / "spectrum.svg").read_text().lstrip().startswith("<?xml")


def test_new_figure_opens_no_pyplot_window(fitted, tmp_path):
    model, classes = fitted
    fig = new_figure()
    model.plot_embedding(c=classes, ax=fig.add_subplot())
    save_figure(fig, str(tmp_path / "e.png"))
    assert plt.get_fignums() == []


# -- embedding --------------------------------------------------------------------------
def test_class_labels_get_a_legend_with_one_entry_per_class(fitted):
    model, classes = fitted
    ax = model.plot_embedding(c=classes, label="cluster")
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["0", "1", "2", "3"]
    assert legend.get_title().get_text() == "cluster"
    assert len(ax.figure.axes) == 1  # no colour bar
    # every plotted point is in its class's scatter
    for cls, coll in zip(range(4), ax.collections, strict=True):
        np.testing.assert_allclose(coll.get_offsets(), model.embedding_[classes == cls][:, :2])


def test_string_labels_get_a_legend(fitted):
    model, classes = fitted
    names = np.array(["alpha", "beta", "gamma", "delta"])[classes]
    ax = model.plot_embedding(c=names)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == sorted(set(names))


def test_embedding_legend_is_inside_the_figure(fitted):
    model, classes = fitted
    ax = model.plot_embedding(c=classes, label="cluster")
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for artist in (ax.get_legend(), ax.xaxis.label, ax.yaxis.label):
        assert _inside(artist.get_window_extent(renderer), fig.bbox), artist


def test_continuous_values_get_a_labelled_colour_bar(fitted):
    model, _ = fitted
    radius = np.linalg.norm(model.embedding_, axis=1)
    ax = model.plot_embedding(c=radius, label="radius")
    (bar_ax,) = [a for a in ax.figure.axes if a is not ax]
    assert bar_ax.get_ylabel() == "radius" and ax.get_legend() is None
    np.testing.assert_allclose(ax.collections[0].get_offsets(), model.embedding_[:, :2])


def test_axis_labels_name_components_and_their_share(fitted):
    model, _ = fitted
    ax = model.plot_embedding(components=(0, 2))
    assert ax.get_xlabel() == f"component 1 ({model.explained_variance_ratio_[0]:.1%})"
    assert ax.get_ylabel().startswith("component 3 (")


@pytest.mark.parametrize("values, expected", [
    (np.array([0, 1, 2, 1]), True),
    (np.array(["a", "b"]), True),
    (np.array([True, False]), True),
    (np.array([0.5, 1.0, 0.5]), False),  # floats are measurements, however few values
    (np.arange(100), False),  # an index, not classes
    (np.array([f"s{i}" for i in range(30)]), False),  # more labels than a legend shows
])
def test_is_categorical(values, expected):
    assert is_categorical(values) is expected


def test_a_one_component_model_is_plotted_against_zero(tmp_path):
    """Before: the default components=(0, 1) refused a one-component model (the demo with --n-components 1 failed
    after its fit); the docstring promised the plot against 0."""
    model = dkpca.fit(make_data(80, d=3), n_components=1, store=tmp_path / "one.zarr")
    ax = model.plot_embedding()
    assert ax.get_xlabel().startswith("component 1") and ax.get_ylabel() == ""
    np.testing.assert_array_equal(ax.collections[0].get_offsets()[:, 1], 0.0)


@pytest.mark.parametrize("kwargs, says", [({"components": (0,)}, "two zero-based component indices"),
                                          ({"components": (0, 1.5)}, "two zero-based component indices"),
                                          ({"c": 3}, "one value per training point"),
                                          ({"c": np.zeros((2, 2))}, "one value per training point"),
                                          ({"max_points": -1}, "max_points=-1 is invalid"),
                                          ({"c": "names"}, "more than MAX_CLASSES=20")])
def test_embedding_arguments_refused_by_name(fitted, kwargs, says):
    """Before: IndexError, "not enough values to unpack", numpy's "negative dimensions", and 600 distinct string
    labels drawn as 600 scatters with a 600-entry legend."""
    model, _ = fitted
    if isinstance(kwargs.get("c"), str):
        kwargs = {"c": np.array([f"p{i}" for i in range(model.embedding_.shape[0])])}
    with pytest.raises(ValueError, match=re.escape(says)):
        model.plot_embedding(**kwargs)


# -- the demo -------------------------------------------------------------------------
def _demo(tmp_path, *prefix: str) -> subprocess.CompletedProcess:
    cmd = [*prefix, "demo", "--dir", str(tmp_path), "--n-samples", "600", "--n-components", "3", "--workers", "1",
           "-q"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def test_demo_writes_its_embedding_plot_and_shows_the_shells_separate(tmp_path):
    out = _demo(tmp_path, *dkpca_cmd()).stdout
    m = re.search(r"nearest-centroid accuracy ([\d.]+)% in kernel PCA components 1-2 vs ([\d.]+)% in the raw", out)
    assert m, out
    # kernel PCA separates the concentric shells; in the raw input every shell's centroid is the origin (chance)
    assert float(m.group(1)) >= 95.0 and float(m.group(2)) <= 50.0
    png = tmp_path / "shells_embedding.png"
    assert f"embedding plot: {png}" in out
    height, width, _ = matplotlib.image.imread(png).shape
    assert width > 300 and height > 300


def test_demo_without_matplotlib_says_so(tmp_path):
    block = ("import sys; sys.modules['matplotlib'] = None; from dkpca.cli import main; "
             "sys.exit(main(sys.argv[1:]))")
    out = _demo(tmp_path, sys.executable, "-c", block).stdout
    assert "no plot will be written: matplotlib is not installed (pip install 'dkpca[plot]')" in out
    assert "nearest-centroid accuracy" in out and not (tmp_path / "shells_embedding.png").exists()
    assert "(sample data, Gram matrix and model); inspect it" in out  # no plot claimed


def test_demo_with_a_broken_matplotlib_setting_is_refused_before_any_work(tmp_path):
    """``MPLBACKEND=nosuch``: the whole fit ran, then the error; now the figure is made first."""
    import os

    cmd = [*dkpca_cmd(), "demo", "--dir", str(tmp_path / "d"), "--n-samples", "300", "--workers", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "MPLBACKEND": "nosuch"})
    assert (out.returncode, out.stdout) == (2, "") and out.stderr.startswith("dkpca: error: ") and \
        out.stderr.count("\n") == 1 and "nosuch" in out.stderr, out.stderr
    assert not (tmp_path / "d").exists()


def test_a_model_without_components_is_refused_by_both_plots(tmp_path):
    """All points alike: no positive eigenvalue.  Before: empty axes with ticks around 0, and 'components=(0, None)
    are out of range' for components the user never passed."""
    with pytest.warns(UserWarning):
        model = dkpca.fit(np.ones((50, 3)), n_components=2, store=tmp_path / "s.zarr")
    assert model.n_components == 0
    for draw in (model.plot_spectrum, model.plot_embedding):
        with pytest.raises(ValueError, match="the model has no components: its centred kernel matrix has no positive"):
            draw()


def test_labels_of_mixed_types_are_drawn_as_their_text(fitted):
    """Before: numpy's "'<' not supported between instances of 'str' and 'NoneType'"."""
    model, classes = fitted
    c = np.array([None if k == 0 else f"class {k}" for k in classes], dtype=object)
    ax = model.plot_embedding(c=c)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["None", "class 1", "class 2", "class 3"]
