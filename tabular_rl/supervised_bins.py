"""Score edges where the outcome changes: the splits of a one-dimensional regression tree.

``supervised_edges(scores, targets, bins)`` grows a tree on ``score -> target`` best-first (the leaf
whose best split lowers the squared error most is split next) until it has ``bins`` leaves or no
split lowers the error, each leaf keeping at least ``min_leaf`` rows; the edges are its thresholds,
each halfway between the two neighbouring distinct scores, as a CART regression tree with
``max_leaf_nodes=bins`` places them. Equal-count bins can cut through a cluster of scores whose
rows share one outcome rate, merging part of it with the next cluster; these edges fall where the
rate changes. Exact, in numpy: one sort, prefix sums, and a scan per split.
"""

from __future__ import annotations

import heapq

import numpy as np


def _best_split(x: np.ndarray, y: np.ndarray, lo: int, hi: int, min_leaf: int) -> tuple[float, int] | None:
    """(error decrease, split index) of the best split of sorted rows ``lo:hi``, or None."""
    n = hi - lo
    if n < 2 * min_leaf:
        return None
    ys = y[lo:hi]
    csum, csq = np.cumsum(ys), np.cumsum(ys * ys)
    total, total_sq = csum[-1], csq[-1]
    left_n = np.arange(1, n)
    # A split after position k (left = first k + 1 rows) is only allowed between distinct scores.
    allowed = (x[lo + 1:hi] > x[lo:hi - 1]) & (left_n >= min_leaf) & (n - left_n >= min_leaf)
    if not allowed.any():
        return None
    left_sum, right_sum = csum[:-1], total - csum[:-1]
    # SSE = sum y^2 - (sum y)^2 / n per side; the sum of squares cancels in the decrease.
    decrease = left_sum ** 2 / left_n + right_sum ** 2 / (n - left_n) - total ** 2 / n
    decrease = np.where(allowed, decrease, -np.inf)
    k = int(np.argmax(decrease))
    if not decrease[k] > 1e-12 * max(1.0, float(total_sq)):
        return None
    return float(decrease[k]), lo + k + 1


def supervised_edges(scores, targets, bins: int, min_leaf: int = 1) -> np.ndarray:
    """Interior edges (sorted, at most ``bins - 1``) of the best-first regression tree (module docstring).
    Rows with a NaN score or target are left out."""
    x, y = np.asarray(scores, dtype=np.float64).ravel(), np.asarray(targets, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"targets: {y.size} values for {x.size} scores; give one target per score")
    keep = ~(np.isnan(x) | np.isnan(y))
    order = np.argsort(x[keep], kind="stable")
    x, y = x[keep][order], y[keep][order]
    heap, edges = [], []

    def push(lo: int, hi: int) -> None:
        found = _best_split(x, y, lo, hi, max(1, int(min_leaf)))
        if found is not None:
            heapq.heappush(heap, (-found[0], lo, hi, found[1]))

    push(0, x.size)
    while heap and len(edges) < bins - 1:
        _, lo, hi, cut = heapq.heappop(heap)
        edges.append((x[cut - 1] + x[cut]) / 2.0)
        push(lo, cut)
        push(cut, hi)
    return np.sort(np.asarray(edges, dtype=np.float64))
