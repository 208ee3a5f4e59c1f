"""Budget-sweep figure: success against interventions per episode, one line per method.

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
}


def sweep_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """A figure of the sweep frame (``sweep.csv`` columns), with each point's 95% interval."""
    figure = Figure(figsize=(7.5, 5.0), dpi=110)
    axes = figure.add_subplot()
    for method, rows in frame.groupby("method", sort=True):
        rows = rows.sort_values(["interventions", "budget"])
        style = dict(_STYLE.get(str(method), {"marker": "."}))
        x, y = rows["interventions"].to_numpy(), rows["success"].to_numpy()
        low = y - rows["ci_low"].to_numpy()
        high = rows["ci_high"].to_numpy() - y
        axes.errorbar(x, y, yerr=[low, high], label=str(method), capsize=3, **style)
    axes.set_xlabel("interventions per episode")
    axes.set_ylabel("success")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, ncols=2)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    return figure


def save_sweep_plot(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_figure(frame, title).savefig(path)
    return path
