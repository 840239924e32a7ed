"""Plots of a fitted model: the spectrum and the 2-D embedding (matplotlib).

matplotlib is an optional extra (``pip install 'dkpca[plot]'``); it is
imported only when a plot is drawn.

Layout rules, so that nothing is cut off: figures made here use matplotlib's
constrained layout (labels, legends and colour bars are given room), and
:func:`save_figure` writes with ``bbox_inches="tight"``.  Component numbers
are integers on every axis; class labels get a legend, continuous values a
labelled colour bar.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["plot_spectrum", "plot_embedding", "new_figure", "save_figure", "is_categorical", "MAX_CLASSES"]

#: up to this many distinct non-float values, colour values are classes (a legend), not a scale
MAX_CLASSES = 20


def _missing() -> ImportError:
    return ImportError("plotting needs matplotlib, which is not installed; install it with: "
                       "pip install 'dkpca[plot]'")


def _require() -> None:
    """Fail with the install hint, before anything is drawn, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise _missing() from exc


def new_figure(figsize: tuple[float, float] = (6.0, 5.0)) -> Any:
    """A figure for writing to a file: constrained layout, no pyplot, no window, no GUI backend.

    Raises
    ------
    ImportError
        matplotlib is not installed (the message says how to install it).
    """
    _require()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)  # a file renderer of its own, whatever pyplot's backend is
    return fig


def save_figure(fig_or_ax: Any, path: str | os.PathLike, dpi: int = 120) -> str:
    """Write a figure (or an axes' figure) with a tight bounding box, so no label is cut; return ``path``.

    ``path`` names the format by its extension (``.png``, ``.pdf``, ``.svg``, ...).  Without one matplotlib
    would write ``path + ".png"`` -- replacing a file of that name the caller never named -- so it is refused.

    Raises
    ------
    ValueError
        ``path`` has no extension.
    IsADirectoryError
        ``path`` is a directory.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"figure path {path!r} is a directory; name a file in it, e.g. "
                                f"{os.path.join(path, 'figure.png')}")
    if not os.path.splitext(os.path.basename(path))[1]:
        raise ValueError(f"figure path {path!r} has no extension; name the format, e.g. {path}.png, .pdf or .svg "
                         "(matplotlib would write a file named otherwise)")
    fig = getattr(fig_or_ax, "figure", fig_or_ax)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _new_axes(figsize: tuple[float, float]) -> Any:
    """Axes on a new pyplot figure (shown by notebooks and ``plt.show()``), constrained layout."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def plot_spectrum(model: Any, ax: Any = None, cumulative: bool = True, log: bool = False) -> Any:
    """Explained-variance ratio per component (bars) and its cumulative sum (a line on a second axis).

    Parameters
    ----------
    model : KPCAModel
        A fitted model (anything with ``explained_variance_ratio_``).
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure, constrained layout).
    cumulative : bool, default=True
        Also draw the cumulative ratio, on a twin y axis from 0 to 100 %;
        a fit asked for a fraction of explained variance (``n_components=0.95``)
        shows that target as a dashed line.
    log : bool, default=False
        Logarithmic y axis for the bars (slowly decaying spectra).

    Returns
    -------
    matplotlib Axes
        The bars' axes; the cumulative line is on its twin, which shares the
        x axis (``ax.get_shared_x_axes().get_siblings(ax)``).
    """
    _require()
    from matplotlib.ticker import PercentFormatter
    from matplotlib.transforms import offset_copy

    _has_components(model)
    ratio = np.asarray(model.explained_variance_ratio_, dtype=float)
    if ax is None:
        ax = _new_axes((6.4, 3.8))
    idx = np.arange(1, ratio.size + 1)
    bars = ax.bar(idx, ratio, color="C0", label="per component")
    if log:
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    _integer_ticks(ax.xaxis)
    if ratio.size:
        ax.set_xlim(0.4, ratio.size + 0.6)
    ax.set_xlabel("component")
    ax.set_ylabel("explained variance")
    ax.set_title(f"kernel PCA spectrum ({model.kernel.name}, n={model.n_samples})")
    handles = [bars]
    legend_axes = ax
    if cumulative:
        twin = ax.twinx()
        # markers only while they stay apart
        (line,) = twin.plot(idx, np.cumsum(ratio), "o-" if ratio.size <= 40 else "-", color="C1", markersize=3,
                            label="cumulative")
        handles.append(line)
        twin.set_ylim(0.0, 1.02)
        twin.yaxis.set_major_formatter(PercentFormatter(1.0))
        twin.set_ylabel("cumulative", color="C1")
        target = (getattr(model, "report", None) or {}).get("n_components_requested")
        if isinstance(target, float):
            handles.append(twin.axhline(target, color="C1", linestyle="--", linewidth=1,
                                        label=f"asked: {target:.0%}"))
        legend_axes = twin  # drawn above the bars' axes
    # below the x label, in one row: inside the axes every corner is some spectrum's bars or cumulative line (a
    # fraction fit's curve ends at mid height, where 'center right' put it); 34 points clear the tick labels and
    # the x label, and constrained layout makes room for it
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-34, units="points")
    legend_axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below,
                       ncols=len(handles), frameon=False)
    return ax


def is_categorical(c: np.ndarray) -> bool:
    """Whether colour values are classes: not floats (ints, strings, booleans) and at most ``MAX_CLASSES`` of them.

    Floats are measurements (a colour scale) however few distinct values
    they take; integers with many distinct values (e.g. an index) too.
    """
    c = np.asarray(c)
    if c.dtype.kind == "f" or c.dtype.kind == "c":
        return False
    return len(np.unique(c)) <= MAX_CLASSES


def _has_components(model: Any) -> None:
    """Refuse a model without components: there is nothing to draw (axes of ticks around 0 said otherwise)."""
    if model.n_components == 0:
        raise ValueError("the model has no components: its centred kernel matrix has no positive eigenvalue (all "
                         "points alike under this kernel), so there is nothing to plot; check the data or the "
                         "kernel's parameters (e.g. gamma).")


def _axis_label(model: Any, j: int) -> str:
    ratio = getattr(model, "explained_variance_ratio_", None)
    share = f" ({ratio[j]:.1%})" if ratio is not None and j < len(ratio) else ""
    return f"component {j + 1}{share}"


def plot_embedding(model: Any, components: tuple[int, int | None] | None = None, c: Any = None, ax: Any = None,
                   max_points: int | None = 20000, random_state: int = 0, label: str | None = None,
                   categorical: bool | None = None, **scatter_kws: Any) -> Any:
    """Scatter plot of the training points in two components (``model.embedding_``).

    Parameters
    ----------
    model : KPCAModel
        A fitted model (one with a single component is plotted against 0).
    components : (int, int or None), optional
        Zero-based component indices for the x and y axes (y None: the x
        component against 0); default ``(0, 1)``, ``(0, None)`` for a
        one-component model.
    c : array-like of shape (n_samples,), optional
        Colour values: class labels (a legend, one entry per class) or a
        continuous quantity (a colour bar); see ``categorical``.
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure, constrained layout).
    max_points : int or None, default=20000
        Plot a random subset of at most this many points (None: all).
    random_state : int
        Seed of that subset.
    label : str, optional
        Title of the legend or label of the colour bar (e.g. ``"shell"``).
    categorical : bool, optional
        Whether ``c`` holds classes; default :func:`is_categorical` (not
        floats, at most ``MAX_CLASSES`` distinct values).
    **scatter_kws
        Passed to ``Axes.scatter``.

    Returns
    -------
    matplotlib Axes
    """
    _require()
    k = model.n_components
    _has_components(model)
    if components is None:
        components = (0, 1) if k >= 2 else (0, None)
    if not (isinstance(components, (tuple, list)) and len(components) == 2
            and all(v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in components)
            and components[0] is not None):
        raise ValueError(f"components={components!r} is invalid; pass two zero-based component indices (x, y), "
                         "or (x, None) to plot one component against 0.")
    i, j = components
    if not (0 <= i < k and (j is None or 0 <= j < k)):
        raise ValueError(f"components={components!r} are out of range for a model with {k} component(s); "
                         "use zero-based indices below n_components.")
    if max_points is not None and not (isinstance(max_points, (int, np.integer)) and not isinstance(max_points, bool)
                                       and max_points >= 1):
        raise ValueError(f"max_points={max_points!r} is invalid; pass a positive integer, or None for all points.")
    E = model.embedding_
    n = E.shape[0]
    if c is not None:
        c = np.asarray(c)
        if c.dtype.kind == "O":  # mixed labels ('a' and None): compared, sorted and shown as their text
            c = c.astype(str)
        if c.ndim != 1 or c.shape[0] != n:
            raise ValueError(f"c has shape {c.shape}; pass one value per training point (shape ({n},)).")
        if categorical is None and c.dtype.kind not in "fciub" and not is_categorical(c):
            raise ValueError(f"c holds {len(np.unique(c))} distinct labels, more than MAX_CLASSES={MAX_CLASSES} a "
                             "legend can show; pass numbers for a colour scale, or categorical=True to draw "
                             "them all.")
    if ax is None:
        ax = _new_axes((6.4, 5.0))
    sel = np.arange(n)
    if max_points is not None and n > max_points:
        sel = np.sort(np.random.default_rng(random_state).choice(n, max_points, replace=False))
    x = E[sel, i]
    y = E[sel, j] if j is not None else np.zeros_like(x)
    scatter_kws.setdefault("s", 6)
    if c is not None and (is_categorical(c) if categorical is None else categorical):
        # one scatter per class, so that the legend lists exactly the classes, in sorted order
        import matplotlib

        classes, cs = np.unique(c), c[sel]
        scatter_kws.pop("cmap", None)
        palette = matplotlib.colormaps["tab10" if classes.size <= 10 else "tab20"]
        for m, cls in enumerate(classes):
            on = cs == cls
            ax.scatter(x[on], y[on], color=palette(m), label=str(cls), **scatter_kws)
        ax.legend(title=label, markerscale=2.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    else:
        sc = ax.scatter(x, y, c=None if c is None else c[sel], **scatter_kws)
        if c is not None:
            bar = ax.figure.colorbar(sc, ax=ax)
            bar.set_label(label or "c")
    ax.set_xlabel(_axis_label(model, i))
    ax.set_ylabel(_axis_label(model, j) if j is not None else "")
    ax.set_title("training points in kernel PCA space")
    return ax
