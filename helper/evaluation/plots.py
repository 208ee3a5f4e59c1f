"""Budget-sweep figure: success against interventions per episode, one line per method; a second panel for the
methods played at a spend with no cap. With several kinds of help (``cost_figure``): success against cost per
episode, one line per method.

Built on ``matplotlib.figure.Figure`` directly (no pyplot state), so it renders the same way
under the Agg backend in scripts and inside notebooks, and never opens a window.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

# Fixed styles keep a method's colour the same across figures and runs.
_STYLE = {
    "helper": {"color": "tab:red", "marker": "o", "linewidth": 2.2, "zorder": 5},
    "helper_priced": {"color": "tab:pink", "marker": "o", "linestyle": "--", "linewidth": 1.8, "zorder": 4},
    "oracle": {"color": "black", "marker": "*", "linestyle": "--"},
    "oracle_1step": {"color": "tab:olive", "marker": "*", "linestyle": "-."},
    "exact_optimal": {"color": "tab:purple", "marker": "D", "linestyle": ":"},
    "online_rl": {"color": "tab:orange", "marker": "^"},
    "router": {"color": "tab:green", "marker": "v"},
    "prm_threshold": {"color": "tab:blue", "marker": "s"},
    "knn": {"color": "tab:cyan", "marker": "P"},
    "random": {"color": "tab:gray", "marker": "x"},
    "first_k": {"color": "tab:brown", "marker": "<"},
    "never": {"color": "dimgray", "marker": "o", "markersize": 9},
    "always": {"color": "dimgray", "marker": "s", "markersize": 9},
    "cascade": {"color": "tab:green", "marker": "v"},
    "random_kind": {"color": "tab:gray", "marker": "x"},
}


FREE = "_nocap"
"""Rows played with no cap (``helper.evaluation.spend``): drawn on the second panel."""


def _draw(axes, rows: pd.DataFrame, method: str, label: str, along: str = "interventions") -> None:
    rows = rows.sort_values([along, "budget"])
    style = dict(_STYLE.get(method, {"marker": "."}))
    x, y = rows[along].to_numpy(), rows["success"].to_numpy()
    low = y - rows["ci_low"].to_numpy()
    high = rows["ci_high"].to_numpy() - y
    axes.errorbar(x, y, yerr=[low, high], label=label, capsize=3, **style)


def sweep_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """A figure of the sweep frame (``sweep.csv`` columns), with each point's 95% interval: under a cap C (each
    method at every budget it played as a cap) and, where the sweep played them, at an average spend with no cap
    (the priced helper and the ``*_nocap`` curves, with never and always as their ends)."""
    methods = [str(m) for m in frame["method"]]
    free = [m for m in sorted(set(methods)) if m.endswith(FREE)]
    panels = 2 if free else 1
    figure = Figure(figsize=(7.5 * panels, 5.0), dpi=110)
    capped = figure.add_subplot(1, panels, 1)
    for method, rows in frame.groupby("method", sort=True):
        if str(method).endswith(FREE) or (free and str(method) == "helper_priced"):
            continue
        _draw(capped, rows, str(method), str(method))
    capped.set_title("under a cap C (the point at C is a method's mean spend)" if free else
                     "success against interventions per episode", fontsize=9)
    if free:
        spent = figure.add_subplot(1, panels, 2, sharey=capped)
        for method, rows in frame.groupby("method", sort=True):
            name = str(method)
            if name.endswith(FREE):
                _draw(spent, rows, name[: -len(FREE)], f"{name[: -len(FREE)]} (no cap)")
            elif name in ("helper_priced", "never", "always"):
                _draw(spent, rows, name, name + (" (no cap)" if name == "helper_priced" else ""))
        spent.set_title("at an average spend, no cap", fontsize=9)
    return _finished(figure, "interventions per episode", title)


def cost_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """Success against cost per episode (the sweep frame's ``cost`` column), one line per method, each point at a
    method's mean cost under a budget B with its 95% interval."""
    figure = Figure(figsize=(7.5, 5.0), dpi=110)
    axes = figure.add_subplot(1, 1, 1)
    for method, rows in frame.groupby("method", sort=True):
        _draw(axes, rows, str(method), str(method), along="cost")
    axes.set_title("under a cost budget B (the point at B is a method's mean cost)", fontsize=9)
    return _finished(figure, "cost per episode (in the unit of the prices)", title)


def _finished(figure: Figure, xlabel: str, title: str | None) -> Figure:
    """Every panel's labels, grid and legend, and the figure's title."""
    for axes in figure.axes:
        axes.set_xlabel(xlabel)
        axes.set_ylabel("success")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8, ncols=2)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def save_sweep_plot(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    (cost_figure if "cost" in frame.columns else sweep_figure)(frame, title).savefig(path)
    return path
