"""The helper's family: policies over (step, score, budget left) that the training folds choose among.

    from tabular_rl.choice.members import default_family, fit_member
    member = fit_member(spec, rows, budget=3, targets=own)     # fitted on training rows
    member.decide(step, score, budget_left)                    # vectorised

Three kinds of member, all played by the helper's table backend (PRM score -> discretizer -> table):

- ``table``: the budgeted MDP solved exactly (``tabular_rl.solvers.solve_exact``) with its own structure: the
  configured bins, finer bins where the rows allow, every step pooled into one estimate (``backoff`` at its
  maximum: the proportional-hazards end rate and the step-pooled moves), stationary dynamics (a state's risk the
  same at every step, the next state a draw of the step alone: ``tabular_rl.stationary``), the same with the risk
  on a curve over step and score (``tabular_rl.smooth``), or pessimism (an
  intervention whose own gain is within z standard errors of nothing is not taken);
- ``threshold``: intervene while the budget lasts wherever the score is at or below the ``share`` quantile of the
  training scores: the threshold a user would set on the same verifier, as a table with one score edge.
- ``priced``: a table's structure solved with a price on each intervention, the price set on the training model
  to spend ``spend`` interventions an episode (``tabular_rl.solvers.solve_spending``): the helper at an average
  spend rather than under a cap.

A member's policy at ``b`` interventions left does not depend on the episode's cap (the exact solve at cap C
restricted to b <= C is the solve at b), so one fitted member serves every cap up to the one it was solved for.
``edges`` are the score values where its decision can change: a grid holding every member's edges is fine enough
to evaluate each of them exactly (``tabular_rl.choice.judge``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from ..discretize import Discretizer
from ..estimate import MAX_POOLING_WEIGHT, estimate
from ..solution import Solution
from ..smooth import estimate_smooth, fit_risk_curve, state_scores
from ..stationary import estimate_stationary
from ..solvers.exact import solve_exact
from ..solvers.priced import solve_spending
from ..transitions import DEFAULT_COLUMNS, Columns, extract_transitions, with_objective

KINDS = ("table", "threshold", "priced")
DYNAMICS = ("steps", "stationary", "smooth")
THRESHOLD_LEVELS = 32
"""Threshold members per family: score quantiles evenly spaced up to the share that spends about 3 C_max."""
ROWS_PER_CELL = 20
"""Finer bins join the family only where the rows give each (step, bin) at least this many on average."""


@dataclass(frozen=True)
class MemberSpec:
    """One member's structure (fitted by ``fit_member``)."""

    kind: str
    """table, threshold or priced."""
    bins: int = 6
    """table, priced: score bins."""
    binning: str = "quantile"
    """table, priced: how the bins are cut (tabular_rl.discretize)."""
    step_buckets: int = 0
    """table, priced: step buckets crossed with the bins."""
    backoff: float | str = "auto"
    """table, priced: weight of the step-pooled estimate (its maximum pools every step)."""
    pessimism: float = 0.0
    """table: standard errors an intervention's own gain must clear."""
    share: float = 0.0
    """threshold: the share of training scores at or below the level."""
    spend: float = 0.0
    """priced: the interventions per episode its price is set to spend on the training model."""
    dynamics: str = "steps"
    """table, priced: ``steps`` (``tabular_rl.estimate``, a cell per step), ``stationary``
    (``tabular_rl.stationary``: a state's risk pooled over steps, the next state a draw of the step) or ``smooth``
    (``tabular_rl.smooth``: the same with the risk on a curve over step and score)."""

    @property
    def name(self) -> str:
        if self.kind == "threshold":
            return f"threshold@{self.share:.4f}"
        parts = [f"{self.kind}:{self.bins}{self.binning[0]}"] + ([f"spend{self.spend:g}"] if self.kind == "priced" else [])
        if self.step_buckets:
            parts.append(f"steps{self.step_buckets}")
        if self.dynamics != "steps":
            parts.append(self.dynamics)
        if self.backoff != "auto":
            parts.append("pooled" if float(self.backoff) >= MAX_POOLING_WEIGHT else f"backoff{float(self.backoff):g}")
        if self.pessimism:
            parts.append(f"z{self.pessimism:g}")
        return ",".join(parts)

    def to_dict(self) -> dict:
        return asdict(self) | {"name": self.name}

    @classmethod
    def from_dict(cls, d: dict) -> MemberSpec:
        return cls(**{k: v for k, v in d.items() if k != "name"})


def default_family(bins: int, binning: str, rows: int, horizon: int, decisions: float, top_budget: int,
                   step_buckets: int = 0, levels: int = THRESHOLD_LEVELS, pessimism: bool = True) -> list[MemberSpec]:
    """The configured solve first (ties go to it), then finer bins where ``rows`` allow, steps pooled, and
    where the objective is the success alone (``pessimism``) stationary dynamics (on equal-count bins: supervised
    edges fitted to outcomes pooled over steps place them where the mix of steps changes, not the risk), the same
    with the risk on a curve over step and score (``tabular_rl.smooth``: its parameters do not grow with the bins,
    so it takes twice as many) and pessimism; then ``levels``
    thresholds up to the score share that spends about 3 ``top_budget`` decisions of the ``decisions`` an
    episode has."""
    family = [MemberSpec("table", bins, binning, step_buckets)]
    if rows >= ROWS_PER_CELL * 2 * bins * max(horizon, 1):
        family.append(MemberSpec("table", 2 * bins, "quantile", step_buckets))
    family.append(MemberSpec("table", bins, binning, step_buckets, backoff=MAX_POOLING_WEIGHT))
    if pessimism:
        family.append(MemberSpec("table", bins, "quantile", step_buckets, dynamics="stationary"))
        family.append(MemberSpec("table", 2 * bins, "quantile", step_buckets, dynamics="smooth"))
        family.append(MemberSpec("table", bins, binning, step_buckets, pessimism=1.0))
    return family + threshold_specs(decisions, top_budget, levels)


def threshold_specs(decisions: float, top_budget: int, levels: int = THRESHOLD_LEVELS) -> list[MemberSpec]:
    """``levels`` threshold members, their shares evenly spaced up to the one under which about 3 ``top_budget``
    of an episode's ``decisions`` fall."""
    top = min(1.0, 3.0 * max(top_budget, 1) / max(decisions, 1.0))
    return [MemberSpec("threshold", share=round(float(top * k / levels), 6)) for k in range(1, levels + 1)]


@dataclass
class Member:
    """A fitted member: its discretizer and its policy table (solved at ``solution.budget``)."""

    spec: MemberSpec
    discretizer: Discretizer
    solution: Solution
    level: float | None = None
    """threshold: the score level (intervene at or below it)."""

    def decide(self, step, score, budget_left) -> np.ndarray:
        """Intervene or not, per decision (arrays of one length); never with no budget left."""
        step = np.asarray(step, dtype=np.int64)
        state = self.discretizer.transform(np.asarray(score, dtype=np.float64), step)
        return self.solution.intervene_prob(step, state, budget_left) > 0.5

    @property
    def edges(self) -> np.ndarray:
        return np.asarray(self.discretizer.edges_, dtype=np.float64)


def threshold_member(spec: MemberSpec, scores: np.ndarray, horizon: int, budget: int) -> Member:
    """"Score at or below the ``spec.share`` quantile of ``scores`` while the budget lasts" as a table over one
    score edge (just above the level, so a score equal to it intervenes: a value on an edge goes up)."""
    finite = np.asarray(scores, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    level = float(np.quantile(finite, spec.share, method="lower")) if finite.size else -np.inf
    edge = np.nextafter(level, np.inf) if np.isfinite(level) else level
    discretizer = Discretizer.from_dict({"kind": "helpgate.tabular_rl.Discretizer", "bins": 2, "binning": "uniform",
                                         "step_buckets": 0, "score_range": [0.0, 1.0], "edges": [float(edge)],
                                         "horizon": None})
    policy = np.zeros((horizon, discretizer.n_states, budget + 1))
    policy[:, 0, 1:] = 1.0  # bin 0: at or below the level; bin 2 (NaN) never intervenes
    solution = Solution(method="threshold", budget=budget, policy=policy, values=np.full(policy.shape, np.nan),
                        hard_budget=True, expected_return=np.nan, expected_success=np.nan,
                        expected_interventions=np.nan, discretizer=discretizer)
    return Member(spec, discretizer, solution, level)


def fit_member(spec: MemberSpec, rows: pl.DataFrame, budget: int, *, targets: np.ndarray | None = None,
               columns: Columns = DEFAULT_COLUMNS, smoothing: float = 1.0, objective: str = "success",
               shaping: float = 0.0, horizon: int | None = None) -> Member:
    """``spec`` fitted on ``rows`` (scored, one per decision) for caps up to ``budget``. ``targets``: one
    outcome per row for supervised bins (``helper.solve.solve_command.own_rewards``)."""
    if spec.kind not in KINDS:
        raise ValueError(f"member kind={spec.kind!r}: choose one of {', '.join(KINDS)}")
    if spec.dynamics not in DYNAMICS:
        raise ValueError(f"member dynamics={spec.dynamics!r}: choose one of {', '.join(DYNAMICS)}")
    horizon = horizon or int(rows[columns.step].max()) + 1
    if spec.kind == "threshold":
        return threshold_member(spec, rows[columns.score].cast(pl.Float64).to_numpy(), horizon, budget)
    discretizer = Discretizer(spec.bins, spec.binning, spec.step_buckets).fit(
        rows[columns.score], rows[columns.step], targets if spec.binning == "supervised" else None)
    if spec.dynamics in ("stationary", "smooth"):
        if objective != "success" or shaping:
            raise ValueError(f"member dynamics={spec.dynamics!r} reads a failure as an end that pays nothing: it needs "
                             f"objective='success' with no shaping (got {objective!r}, shaping={shaping})")
        transitions = with_objective(extract_transitions(rows, discretizer, columns), objective)
        if spec.dynamics == "smooth":
            rates = fit_risk_curve(rows, columns, transitions.horizon).rates(state_scores(rows, discretizer, columns))
            model = estimate_smooth(transitions, rates, smoothing=smoothing, discretizer=discretizer)
        else:
            model = estimate_stationary(transitions, smoothing=smoothing, discretizer=discretizer)
    else:
        model = estimate(rows, discretizer, columns=columns, smoothing=smoothing, backoff=spec.backoff,
                         objective=objective, shaping=shaping)
    if spec.kind == "priced":
        return Member(spec, discretizer, solve_spending(model, budget, spec.spend))
    return Member(spec, discretizer, solve_exact(model, budget, pessimism=spec.pessimism))
