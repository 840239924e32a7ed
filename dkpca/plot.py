"""Plots of a fitted model: the spectrum and the 2-D embedding (matplotlib).

matplotlib is an optional extra (``pip install 'dkpca[plot]'``); it is
imported only when a plot is drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["plot_spectrum", "plot_embedding"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib, which is not installed; "
                          "install it with: pip install 'dkpca[plot]'") from exc
    return plt


def plot_spectrum(model: Any, ax: Any = None, cumulative: bool = True, log: bool = False) -> Any:
    """Bar chart of the eigenvalues' explained-variance ratios.

    Parameters
    ----------
    model : KPCAModel
        A fitted model.
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure).
    cumulative : bool, default=True
        Also draw the cumulative ratio as a line.
    log : bool, default=False
        Logarithmic y axis (for slowly decaying spectra).

    Returns
    -------
    matplotlib Axes
    """
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ratio = np.asarray(model.explained_variance_ratio_)
    idx = np.arange(1, ratio.size + 1)
    ax.bar(idx, ratio, color="C0", label="explained variance ratio")
    if cumulative:
        ax.plot(idx, np.cumsum(ratio), "o-", color="C1", label="cumulative")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("component k")
    ax.set_ylabel(r"$\lambda_k / \mathrm{trace}(\tilde K)$")
    ax.set_title(f"kernel PCA spectrum ({model.kernel.name}, n={model.n_samples})")
    ax.legend(loc="best")
    return ax


def plot_embedding(model: Any, components: tuple[int, int] = (0, 1), c: Any = None, ax: Any = None,
                   max_points: int | None = 20000, random_state: int = 0, **scatter_kws: Any) -> Any:
    """Scatter plot of the training points in two components (``model.embedding_``).

    Parameters
    ----------
    model : KPCAModel
        A fitted model with at least two components (or one: plotted against 0).
    components : (int, int), default=(0, 1)
        Zero-based component indices for the x and y axes.
    c : array-like of shape (n_samples,), optional
        Colour values (e.g. labels).
    ax : matplotlib Axes, optional
    max_points : int or None, default=20000
        Plot a random subset of at most this many points (None: all).
    random_state : int
        Seed of that subset.
    **scatter_kws
        Passed to ``Axes.scatter``.

    Returns
    -------
    matplotlib Axes
    """
    plt = _pyplot()
    k = model.n_components
    i, j = components
    if not (0 <= i < k and (j is None or 0 <= j < k)):
        raise ValueError(f"components={components!r} are out of range for a model with {k} component(s); "
                         "use zero-based indices below n_components.")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    E = model.embedding_
    n = E.shape[0]
    sel = np.arange(n)
    if max_points is not None and n > max_points:
        sel = np.sort(np.random.default_rng(random_state).choice(n, max_points, replace=False))
    x = E[sel, i]
    y = E[sel, j] if j is not None else np.zeros_like(x)
    if c is not None:
        c = np.asarray(c)
        if c.shape[0] != n:
            raise ValueError(f"c has {c.shape[0]} values but the model has {n} training points.")
        c = c[sel]
    scatter_kws.setdefault("s", 6)
    sc = ax.scatter(x, y, c=c, **scatter_kws)
    if c is not None and np.issubdtype(np.asarray(c).dtype, np.number):
        plt.colorbar(sc, ax=ax)
    ax.set_xlabel(f"component {i + 1}")
    ax.set_ylabel(f"component {j + 1}" if j is not None else "")
    ax.set_title("training points in kernel PCA space")
    return ax
