"""Evaluation metrics: the one module every report (sweep, summary, notebook, AGILE eval) uses.

Definitions, for one method evaluated at budgets ``C = 0 .. Cmax`` on the same held-out episodes:

- ``success(C)``: mean episode outcome; ``interventions(C)``: mean interventions used per episode.
- References: ``success_never`` is the mean success of the ``never`` method (its rows are
  averaged); ``success_always`` and ``interventions_always`` come from the ``always`` row that
  uses the most interventions (always-intervene with a budget that covers every decision).
- Intervention share ``x = interventions(C) / interventions_always``, clipped to ``[0, 1]``.
- ``PGR = (success - success_never) / (success_always - success_never)``: the share of the gap
  between never and always that a method recovers. It is not clipped (a method can be worse
  than never, PGR < 0, or better than always, PGR > 1) and is NaN when the gap is 0.

The PGR curve of a method (``pgr_curve``), used by both APGR and CPT, as RouteLLM defines them
(PGR against the share of calls to the strong model, over the whole share range [0, 1]):

1. the method's points ``(x, PGR)``, one per budget; points with the same share are merged into
   one whose PGR is their mean (the order of the rows never matters);
2. the point ``(0, 0)`` is added unless the method has a measured point at share 0 (no
   intervention means never's success, by definition);
3. where the last measured share is below 1, the curve is completed with always-intervene's own
   point ``(1, 1)``; the width of that completion, ``1 - last measured share``, is the method's
   ``apgr_extrapolated_share`` (0 when its sweep reached always's interventions). The straight
   completion is what mixing the method's last point with always-intervene would reach, so it
   neither rewards under-spending (as a flat tail would) nor punishes it;
4. piecewise-linear interpolation between consecutive points.

``APGR`` is the area under that curve over ``x in [0, 1]`` (exact: the trapezoid rule on the
knots is the integral of a piecewise-linear curve). ``CPT(level)`` is the smallest share at which
the same curve reaches PGR >= level, found exactly on the segments; None when it never does.

``CPT(100%)`` is the share at which a method first matches always-intervene's success.
``oracle_ratio`` = success / oracle success at the same budget, only against a method named
``oracle``, which is an upper bound (``oracle_1step``, a hindsight heuristic where decisions
interact, gets no ratio); ``bootstrap_ci`` a percentile bootstrap interval of the mean success
over episodes (``scipy.stats.bootstrap``); ``paired_difference`` the same for the difference of
two methods on the same episodes; ``hierarchical_weights`` the draws of a hierarchical bootstrap
(seeds, then groups or games within a seed, then episodes within a group), shared by every method
so comparisons stay paired, and ``hierarchical_ci`` / ``paired_hierarchical_difference`` its
percentile intervals, and ``grouped_ci`` / ``paired_grouped_difference`` the same with one level
(groups, then episodes) where episodes carry a group, the episode bootstrap where they do not
(``sweep.csv``'s interval, ``benchmarks/setups/sweep_table.py``); ``total_score`` the AGILE score
``accuracy - c * advice_rate`` (re-exported from ``agile.executor.scores``, its one home).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

# AGILE's score has its one home in agile; every report gets it from here too.
from agile.executor.scores import DEFAULT_ADVICE_COST, accuracy, advice_rate, total_score  # noqa: F401

NEVER, ALWAYS, ORACLE, HELPER, EXACT_OPTIMAL = "never", "always", "oracle", "helper", "exact_optimal"
ORACLE_1STEP = "oracle_1step"
"""The hindsight gate where decisions interact: one-step gains of a single counterfactual run, not
an upper bound, so no ratio is taken against it."""
SWEEP_COLUMNS = ("method", "budget", "success", "interventions", "episodes", "ci_low", "ci_high")
"""Columns of ``sweep.csv``, in order."""
NIL_GAIN = "nil_gain_interventions"
"""Optional ``sweep.csv`` column, after the others: mean interventions per episode spent where the env's
own dynamics say intervening gains nothing (episodes that count ``nil_gain_interventions``)."""


def sweep_columns(rows) -> list[str]:
    """``SWEEP_COLUMNS``, plus ``NIL_GAIN`` when some row has it."""
    return list(SWEEP_COLUMNS) + ([NIL_GAIN] if any(NIL_GAIN in row for row in rows) else [])


# -- single numbers --------------------------------------------------------------------------
def pgr(success: float, success_never: float, success_always: float) -> float:
    """Performance gap recovered; NaN when always and never succeed equally often."""
    gap = success_always - success_never
    if gap == 0 or not math.isfinite(gap):
        return math.nan
    return (success - success_never) / gap


def intervention_share(interventions: float, interventions_always: float) -> float:
    """Interventions used as a share of always-intervene's, clipped to [0, 1]."""
    if interventions_always <= 0:
        raise ValueError(
            f"interventions_always={interventions_always}: the always-intervene reference used no "
            "intervention, so shares are undefined. Evaluate 'always' with a budget of at least 1."
        )
    return float(min(max(interventions / interventions_always, 0.0), 1.0))


def oracle_ratio(success: float, oracle_success: float) -> float | None:
    """success / oracle success at the same budget; None when the oracle's success is 0."""
    if oracle_success == 0 or not math.isfinite(oracle_success) or not math.isfinite(success):
        return None
    return float(success / oracle_success)


def bootstrap_ci(
    outcomes: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-episode outcomes (deterministic in seed)."""
    values = np.asarray(outcomes, dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    if not 0 < level < 1:
        raise ValueError(f"level={level}: a confidence level must lie strictly between 0 and 1")
    if values.size == 1 or np.all(values == values[0]):
        # scipy needs two distinct observations; every resample of these has the same mean.
        return float(values.mean()), float(values.mean())
    result = stats.bootstrap((values,), np.mean, confidence_level=level, n_resamples=resamples,
                             method="percentile", rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def paired_difference(
    first: Sequence[float], second: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of ``first - second`` over the same episodes and its bootstrap interval (resampling
    episodes, so what the two methods share, the episode's difficulty, cancels out)."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes need the same episodes: got {a.size} and {b.size} values")
    diff = a - b
    low, high = bootstrap_ci(diff, level, resamples, seed)
    return (float(diff.mean()) if diff.size else math.nan), low, high


# -- hierarchical bootstrap --------------------------------------------------------------------
def hierarchical_weights(levels: Sequence[Sequence], resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """Multiplicities ``(resamples, n)`` of ``n`` episodes under a hierarchical bootstrap.

    ``levels`` holds one label per episode for each level above the episode, outermost first (e.g.
    ``[seed_of_episode, group_of_episode]``); a label names a unit within its parent (group "a"
    of seed 1 and group "a" of seed 2 are two units). One resample draws the top level's units
    with replacement (as many as there are), then, inside each unit drawn, that unit's children
    with replacement (as many as it has), down to its episodes; an episode's weight is how often
    it was drawn. A unit drawn ``m`` times contributes ``m`` independent resamples of its
    children, whose summed counts are one multinomial of ``m * k`` draws over its ``k`` children:
    that is how it is drawn here (exact, one call per unit instead of one per resample). Every
    method's statistic computed with the same weights is paired: the same draws for all.
    A level with one unit (one seed) adds no variance; with no level it is the episode bootstrap.
    """
    labels = [np.asarray(level, dtype=object) for level in levels]
    n = len(labels[0]) if labels else None
    if any(len(level) != n for level in labels):
        raise ValueError(f"every level needs one label per episode: got lengths {[len(level) for level in labels]}")
    if resamples < 1:
        raise ValueError(f"resamples={resamples}: draw at least one resample")
    rng = np.random.default_rng(seed)
    if n is None:
        raise ValueError("hierarchical_weights needs at least one level (use [[0] * n] for a plain bootstrap)")
    weights = np.zeros((resamples, n), dtype=np.int64)

    def draw(rows: np.ndarray, depth: int, times: np.ndarray) -> None:
        if depth == len(labels):
            units = [rows[i:i + 1] for i in range(rows.size)]
        else:
            # Units in order of first appearance: the draws depend on the data, not on a sort of labels.
            names = list(dict.fromkeys(labels[depth][rows].tolist()))
            units = [rows[labels[depth][rows] == name] for name in names]
        counts = rng.multinomial(times * len(units), np.full(len(units), 1.0 / len(units)))
        for k, unit in enumerate(units):
            if depth == len(labels):
                weights[:, unit[0]] += counts[:, k]
            else:
                draw(unit, depth + 1, counts[:, k])

    if n:
        draw(np.arange(n), 0, np.ones(resamples, dtype=np.int64))
    return weights


def shares_groups(seeds: Sequence, groups: Sequence) -> bool:
    """Whether the groups are units the seeds share (a crossed design): several seeds, each played the same
    set of groups, and some group holds several episodes of one seed. Names that repeat across seeds but
    hold one episode each (an episode's own id, as ``test-3``) name different episodes, not shared units."""
    by_seed: dict = {}
    sizes: dict = {}
    for s, g in zip(seeds, groups):
        by_seed.setdefault(s, set()).add(g)
        sizes[(s, g)] = sizes.get((s, g), 0) + 1
    return (len(by_seed) > 1 and all(found == next(iter(by_seed.values())) for found in by_seed.values())
            and max(sizes.values()) > 1)


def crossed_weights(seeds: Sequence, groups: Sequence, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """Multiplicities ``(resamples, n)`` where every seed played the *same* groups (a crossed design, as
    fixed test groups under several training seeds): one resample draws the seeds and, separately, the
    groups, each with replacement, and inside each (seed, group) cell drawn ``m_s * g_k`` times that many
    resamples of its episodes (Owen's pigeonhole bootstrap). Drawing groups inside each seed instead
    (``hierarchical_weights``) would count one group's shared effect as independent across seeds."""
    seeds, groups = np.asarray(seeds, dtype=object), np.asarray(groups, dtype=object)
    if len(seeds) != len(groups):
        raise ValueError(f"one seed and one group per episode: got {len(seeds)} and {len(groups)}")
    if resamples < 1:
        raise ValueError(f"resamples={resamples}: draw at least one resample")
    rng = np.random.default_rng(seed)
    seed_names = list(dict.fromkeys(seeds.tolist()))
    group_names = list(dict.fromkeys(groups.tolist()))
    seed_counts = rng.multinomial(len(seed_names), np.full(len(seed_names), 1.0 / len(seed_names)), size=resamples)
    group_counts = rng.multinomial(len(group_names), np.full(len(group_names), 1.0 / len(group_names)),
                                   size=resamples)
    seed_index = {s: i for i, s in enumerate(seed_names)}
    group_index = {g: k for k, g in enumerate(group_names)}
    cells: dict[tuple[int, int], list[int]] = {}
    for row, (s, g) in enumerate(zip(seeds.tolist(), groups.tolist())):
        cells.setdefault((seed_index[s], group_index[g]), []).append(row)
    weights = np.zeros((resamples, len(seeds)), dtype=np.int64)
    for (i, k), rows in sorted(cells.items()):
        times = seed_counts[:, i] * group_counts[:, k] * len(rows)
        weights[:, rows] = rng.multinomial(times, np.full(len(rows), 1.0 / len(rows)))
    return weights


def seed_group_weights(levels: Sequence[Sequence], resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """The bootstrap for ``levels`` (outermost first, as ``hierarchical_weights``): where the first two are seeds
    and groups every seed shares (``shares_groups``), seeds and groups drawn apart (``crossed_weights``);
    otherwise nested. The one choice the report, the AGILE joins and the verifier tables all make."""
    if len(levels) == 2 and shares_groups(*levels):
        return crossed_weights(*levels, resamples, seed)
    return hierarchical_weights(levels, resamples, seed)


def cluster_variance(values: Sequence[float], levels: Sequence[Sequence]) -> tuple[float, float]:
    """``(variance of the mean of values, degrees of freedom)`` from the clusters of ``levels`` (outermost first,
    as ``seed_group_weights`` reads them), the analytic counterpart of that bootstrap for few clusters:

    - seeds crossed with the groups they share (``shares_groups``): the S x G table of cell means as a two-way
      layout, ``Var = (MS_seed + MS_group - MS_residual) / (S G)`` (each mean square's expectation: G s_seed^2
      + s_res^2, S s_group^2 + s_res^2, s_res^2), floored at ``MS_residual / (S G)``, with Satterthwaite's
      degrees of freedom (at least 1);
    - otherwise the outermost level with more than one unit (K units): the cluster-robust variance of the mean
      over episodes, ``K / (K - 1) * sum_k n_k^2 (m_k - mean)^2 / N^2`` (for equal clusters, the variance of the
      K unit means over K), with K - 1 degrees of freedom; the episodes themselves where no level varies.

    Either is floored at the variance of the mean of independent episodes (``var(values) / n``), the larger of the
    two standard errors as the few-cluster literature advises: with a handful of clusters their means can agree by
    chance (one seed's two product groups with the same mean difference gave a zero-width interval and a Holm
    "loss" of one episode in 64) while the episodes themselves still differ."""
    variance, df = _cluster_variance(values, levels)
    y = np.asarray(values, dtype=np.float64)
    if y.size > 1 and math.isfinite(variance):
        variance = max(variance, float(y.var(ddof=1)) / y.size)
    return variance, df


def _cluster_variance(values: Sequence[float], levels: Sequence[Sequence]) -> tuple[float, float]:
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    if len(levels) == 2 and shares_groups(*levels):
        seeds = list(dict.fromkeys(levels[0]))
        groups = list(dict.fromkeys(levels[1]))
        cell = np.zeros((len(seeds), len(groups)))
        for i, s_ in enumerate(seeds):
            for k, g in enumerate(groups):
                mask = np.array([a == s_ and b == g for a, b in zip(levels[0], levels[1])])
                cell[i, k] = y[mask].mean()
        S, G = cell.shape
        grand = cell.mean()
        ms_s = G * ((cell.mean(axis=1) - grand) ** 2).sum() / (S - 1)
        ms_g = S * ((cell.mean(axis=0) - grand) ** 2).sum() / (G - 1)
        resid = cell - cell.mean(axis=1, keepdims=True) - cell.mean(axis=0, keepdims=True) + grand
        df_e = (S - 1) * (G - 1)
        ms_e = (resid ** 2).sum() / df_e
        combined = ms_s + ms_g - ms_e
        if combined <= ms_e:
            return float(ms_e / (S * G)), float(df_e)
        df = combined ** 2 / (ms_s ** 2 / (S - 1) + ms_g ** 2 / (G - 1) + ms_e ** 2 / df_e)
        return float(combined / (S * G)), float(max(df, 1.0))  # below 1 its t quantile runs off to infinity
    parents: list[tuple] = [()] * n
    units = list(range(n))
    for level in levels:
        parents = [parent + (label,) for parent, label in zip(parents, level)]
        if len(set(parents)) > 1:
            units = parents
            break
    names = list(dict.fromkeys(units))
    K = len(names)
    if K < 2:
        return math.inf, 0.0
    index = {u: k for k, u in enumerate(names)}
    which = np.array([index[u] for u in units])
    totals = np.bincount(which, weights=y - y.mean(), minlength=K)  # n_k (m_k - mean)
    return float(K / (K - 1) * (totals ** 2).sum() / n ** 2), float(K - 1)


def cluster_t_interval(values: Sequence[float], levels: Sequence[Sequence],
                       level: float = 0.95) -> tuple[float, float]:
    """The mean of ``values`` ± Student's t quantile x the standard error of ``cluster_variance``: the report's
    interval of a paired difference. With 2-6 clusters the percentile interval of ``seed_group_weights`` covers
    below its level (``benchmarks/setups/interval_coverage.py``, RESULTS); this one is built for few clusters
    (exact for balanced normal clusters). One cluster gives an unbounded interval."""
    if not 0 < level < 1:
        raise ValueError(f"level={level}: a confidence level must lie strictly between 0 and 1")
    y = np.asarray(values, dtype=np.float64)
    variance, df = cluster_variance(y, levels)
    if df <= 0 or not math.isfinite(variance):
        return -math.inf, math.inf
    half = float(stats.t.ppf((1 + level) / 2, df)) * math.sqrt(variance)
    return float(y.mean() - half), float(y.mean() + half)


def cluster_t_p(values: Sequence[float], levels: Sequence[Sequence]) -> float:
    """The two-sided p-value of "the mean is 0" that ``cluster_t_interval`` inverts (below ``1 - level``
    exactly where that interval excludes 0)."""
    y = np.asarray(values, dtype=np.float64)
    variance, df = cluster_variance(y, levels)
    if df <= 0 or not math.isfinite(variance):
        return 1.0
    if variance == 0:
        return 0.0 if y.mean() != 0 else 1.0
    return float(2 * stats.t.sf(abs(y.mean()) / math.sqrt(variance), df))


def weighted_means(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(resamples, k)`` means of the ``(n, k)`` per-episode ``values`` under each resample's weights."""
    values = np.asarray(values, dtype=np.float64)
    return (weights @ values.reshape(values.shape[0], -1)) / weights.sum(axis=1, keepdims=True)


def verdict(intervals: Sequence[tuple[float, float]], significant: Sequence[bool] | None = None) -> str:
    """win / loss / mixed / tie from helper-minus-baseline intervals: win where one lies above 0 and none below,
    loss the reverse, mixed both, tie where every one holds 0. With ``significant`` (one flag per interval: the
    family-level rule, ``holm``, rejected that comparison's null) only flagged comparisons count, each on the
    side of 0 its interval's midpoint lies; the intervals stay the per-comparison evidence beside it."""
    if significant is None:
        above = any(low > 0 for low, _ in intervals)
        below = any(high < 0 for _, high in intervals)
    else:
        if len(significant) != len(intervals):
            raise ValueError(f"significant has {len(significant)} flags for {len(intervals)} intervals")
        above = any(flag and low + high > 0 for (low, high), flag in zip(intervals, significant))
        below = any(flag and low + high < 0 for (low, high), flag in zip(intervals, significant))
    return "mixed" if above and below else "win" if above else "loss" if below else "tie"


def bootstrap_p(draws: Sequence[float]) -> float:
    """Two-sided bootstrap p-value of "the difference is 0": twice the smaller share of draws on one side of 0
    (draws at 0 count on both), capped at 1. It is below ``alpha`` exactly where the ``1 - alpha`` percentile
    interval of the draws (up to the quantile's interpolation) excludes 0."""
    d = np.asarray(draws, dtype=np.float64)
    if d.size == 0:
        return math.nan
    return float(min(1.0, 2.0 * min(np.mean(d <= 0), np.mean(d >= 0))))


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down rule over a family of ``m`` comparisons: sorted ascending, the i-th p-value (0-based) is
    rejected while every one before it was and it is at most ``alpha / (m - i)``; controls the chance of any
    false rejection in the family at ``alpha``. Returns one flag per p-value, in the given order."""
    p = np.asarray(pvalues, dtype=np.float64)
    rejected = [False] * p.size
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        if not p[i] <= alpha / (p.size - rank):
            break
        rejected[int(i)] = True
    return rejected


def spend_matched_mix(spend: dict[int, float], target: float) -> dict[int, float] | None:
    """A method's success at another method's mean spend ``target``, read on its own success-vs-interventions
    curve: the two budgets ``a < b`` (adjacent, first such pair) whose mean interventions bracket ``target``,
    mixed with weights ``{a: 1 - w, b: w}`` so the mix spends ``target`` on average (the straight line between
    the two points: a gate that plays budget b on a share w of the episodes). None where the method never spends
    that much (its largest spend is below ``target``)."""
    budgets = sorted(spend)
    for c in budgets:
        if abs(spend[c] - target) < 1e-12:
            return {c: 1.0}
    for a, b in zip(budgets, budgets[1:]):
        if spend[a] < target < spend[b]:
            w = (target - spend[a]) / (spend[b] - spend[a])
            return {a: 1.0 - w, b: w}
    return None


def percentile_interval(draws: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The ``level`` percentile interval of bootstrap draws."""
    if not 0 < level < 1:
        raise ValueError(f"level={level}: a confidence level must lie strictly between 0 and 1")
    low, high = np.quantile(np.asarray(draws, dtype=np.float64), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def hierarchical_ci(outcomes: Sequence[float], levels: Sequence[Sequence], level: float = 0.95,
                    resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of ``outcomes`` under ``hierarchical_weights(levels)``."""
    values = np.asarray(outcomes, dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    return percentile_interval(weighted_means(values, hierarchical_weights(levels, resamples, seed))[:, 0], level)


def paired_hierarchical_difference(first: Sequence[float], second: Sequence[float], levels: Sequence[Sequence],
                                   level: float = 0.95, resamples: int = 2000,
                                   seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``first - second`` over the same episodes and its hierarchical bootstrap interval."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes need the same episodes: got {a.size} and {b.size} values")
    if a.size == 0:
        return math.nan, math.nan, math.nan
    low, high = hierarchical_ci(a - b, levels, level, resamples, seed)
    return float((a - b).mean()), low, high


def grouped_ci(outcomes: Sequence[float], groups: Sequence | None = None, level: float = 0.95,
               resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Interval of the mean over episodes that carry a group: groups, then episodes within a group
    (``hierarchical_ci``). Where no group exists (``groups`` None, or every episode its own group)
    it is ``bootstrap_ci``, the episode bootstrap: the same law, the interval as before groups."""
    if groups is None or len(set(groups)) == len(groups):
        return bootstrap_ci(outcomes, level, resamples, seed)
    return hierarchical_ci(outcomes, [list(groups)], level, resamples, seed)


def paired_grouped_difference(first: Sequence[float], second: Sequence[float], groups: Sequence | None = None,
                              level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``paired_difference`` resampling groups, then episodes, where the episodes carry a group (as
    ``grouped_ci``); the episode bootstrap where they do not."""
    if groups is None or len(set(groups)) == len(groups):
        return paired_difference(first, second, level, resamples, seed)
    return paired_hierarchical_difference(first, second, [list(groups)], level, resamples, seed)


# -- curves ----------------------------------------------------------------------------------
def _measured(shares: Iterable[float], pgrs: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """The measured points, shares clipped to [0, 1], ties merged (mean PGR), sorted by share."""
    x = np.clip(np.asarray(list(shares), dtype=np.float64), 0.0, 1.0)
    y = np.asarray(list(pgrs), dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"shares ({x.size}) and pgrs ({y.size}) must have the same length")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    knots_x, inverse = np.unique(x, return_inverse=True)
    knots_y = np.bincount(inverse, weights=y, minlength=knots_x.size) / np.bincount(inverse, minlength=knots_x.size)
    return knots_x, knots_y


def pgr_curve(shares: Iterable[float], pgrs: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """The knots of a method's PGR curve (rule in the module docstring), sorted by share, from 0 to 1."""
    knots_x, knots_y = _measured(shares, pgrs)
    if knots_x.size == 0 or knots_x[0] > 0:
        knots_x = np.concatenate([[0.0], knots_x])
        knots_y = np.concatenate([[0.0], knots_y])
    if knots_x[-1] < 1:
        knots_x = np.concatenate([knots_x, [1.0]])
        knots_y = np.concatenate([knots_y, [1.0]])  # always-intervene: share 1, PGR 1
    return knots_x, knots_y


def extrapolated_share(shares: Iterable[float], pgrs: Iterable[float]) -> float:
    """Width of the share range [0, 1] the PGR curve takes from the completion to (1, 1)."""
    knots_x, _ = _measured(shares, pgrs)
    return 1.0 if knots_x.size == 0 else float(1.0 - knots_x[-1])


def apgr(shares: Iterable[float], pgrs: Iterable[float]) -> float:
    """Area under the PGR curve over shares in [0, 1] (exact; see the module docstring)."""
    knots_x, knots_y = pgr_curve(shares, pgrs)
    return float(((knots_y[:-1] + knots_y[1:]) / 2 * np.diff(knots_x)).sum())


def cpt(shares: Iterable[float], pgrs: Iterable[float], level: float) -> float | None:
    """Smallest share at which the PGR curve reaches ``level`` (exact on the segments), or None."""
    knots_x, knots_y = pgr_curve(shares, pgrs)
    if knots_y[0] >= level:
        return float(knots_x[0])
    for x0, y0, x1, y1 in zip(knots_x[:-1], knots_y[:-1], knots_x[1:], knots_y[1:]):
        if y1 >= level:
            # y0 < level <= y1 here, so the segment rises through the level.
            return float(x0 + (level - y0) * (x1 - x0) / (y1 - y0))
    return None


# -- a whole sweep -----------------------------------------------------------------------------
def _require_method(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    rows = frame[frame["method"] == method]
    if rows.empty:
        raise ValueError(
            f"the sweep has no {method!r} rows (methods present: {sorted(frame['method'].unique())}); "
            f"PGR needs both 'never' and 'always'. Re-run the sweep with {method!r} in --methods."
        )
    return rows


def references(frame: pd.DataFrame) -> dict[str, float]:
    """success_never, success_always and interventions_always from a sweep frame."""
    never = _require_method(frame, NEVER)
    always = _require_method(frame, ALWAYS)
    top = always.loc[always["interventions"].idxmax()]
    return {
        "success_never": float(never["success"].mean()),
        "success_always": float(top["success"]),
        "interventions_always": float(top["interventions"]),
    }


def with_pgr(frame: pd.DataFrame) -> pd.DataFrame:
    """The sweep frame plus ``share`` and ``pgr`` columns."""
    ref = references(frame)
    out = frame.copy()
    out["share"] = [intervention_share(v, ref["interventions_always"]) for v in out["interventions"]]
    out["pgr"] = [pgr(v, ref["success_never"], ref["success_always"]) for v in out["success"]]
    return out


def _none_if_nan(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _ratios(rows: pd.DataFrame, reference: pd.Series | None) -> dict[int, float | None] | None:
    if reference is None:
        return None
    return {int(b): oracle_ratio(float(s), float(reference[b])) if b in reference.index else None
            for b, s in zip(rows["budget"], rows["success"])}


def summarize(frame: pd.DataFrame, training_calls: dict[str, dict] | None = None) -> dict:
    """Per-method summary of a sweep.

    For every method: ``apgr``, ``apgr_extrapolated_share`` (the part of [0, 1] its curve takes
    from the completion to always-intervene rather than from measured points), ``cpt50``, ``cpt80``, ``cpt100`` (the share at which it first
    matches always-intervene's success), ``training_calls`` (from ``training_calls``, e.g.
    ``{"helper": {"strong": 0, "human": 1200}}``; None when not given), its success and
    interventions per budget, and per budget its success divided by the ``oracle``'s
    (``oracle_ratio``) and by ``exact_optimal``'s (``exact_optimal_ratio``) when the sweep has
    those methods (both are upper bounds; ``oracle_1step`` is not and gets no ratio). ``frame`` has
    the ``sweep.csv`` columns. NaN results are written as None so the summary is valid JSON.
    """
    missing = [c for c in SWEEP_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"sweep frame lacks column(s) {missing}; it needs {list(SWEEP_COLUMNS)}")
    scored = with_pgr(frame)

    def reference(method: str) -> pd.Series | None:
        rows = scored[scored["method"] == method]
        return None if rows.empty else rows.groupby("budget")["success"].mean()

    oracle, exact = reference(ORACLE), reference(EXACT_OPTIMAL)
    methods: dict[str, dict] = {}
    for method, rows in scored.groupby("method", sort=True):
        rows = rows.sort_values("budget")
        entry = {
            "apgr": _none_if_nan(apgr(rows["share"], rows["pgr"])),
            "apgr_extrapolated_share": extrapolated_share(rows["share"], rows["pgr"]),
            "cpt50": cpt(rows["share"], rows["pgr"], 0.5),
            "cpt80": cpt(rows["share"], rows["pgr"], 0.8),
            "cpt100": cpt(rows["share"], rows["pgr"], 1.0),
            "training_calls": (training_calls or {}).get(method),
            "success": {int(b): float(s) for b, s in zip(rows["budget"], rows["success"])},
            "interventions": {int(b): float(v) for b, v in zip(rows["budget"], rows["interventions"])},
        }
        if NIL_GAIN in rows and rows[NIL_GAIN].notna().any():
            entry[NIL_GAIN] = {int(b): float(v) for b, v in zip(rows["budget"], rows[NIL_GAIN]) if v == v}
        for key, ref in (("oracle_ratio", oracle), ("exact_optimal_ratio", exact)):
            if ref is not None:
                entry[key] = _ratios(rows, ref)
        methods[str(method)] = entry
    return {"references": references(frame), "methods": methods}


def summary_table(summary: dict) -> pd.DataFrame:
    """One row per method: APGR (and how much of it is extrapolated), CPT(50%), CPT(80%), training
    calls (for notebooks and logs)."""
    rows = []
    for method, entry in summary["methods"].items():
        calls = entry.get("training_calls") or {}
        rows.append({
            "method": method,
            "APGR": entry["apgr"],
            "APGR extrapolated share": entry.get("apgr_extrapolated_share"),
            "CPT(50%)": entry["cpt50"],
            "CPT(80%)": entry["cpt80"],
            "CPT(100%)": entry.get("cpt100"),
            "training strong calls": calls.get("strong"),
            "training human calls": calls.get("human"),
        })
    return pd.DataFrame(rows).sort_values("APGR", ascending=False, na_position="last").reset_index(drop=True)
