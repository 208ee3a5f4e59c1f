"""The exact budgeted optimum of ``examples.rapids``, and how far the best static threshold falls short of it.

    from examples.rapids_optimum import best_threshold, optimum, room
    success, interventions = optimum(budget=3)     # 0.615: the best any gate reaches under a cap of 3
    best_threshold(budget=3)                       # process 0.418, outcome 0.323 (the best level of each)
    room(budget=3)                                 # 0.197 = 0.615 - 0.418

The risks are independent across crossings and a slip ends the episode, so (crossing, risk,
budget left) is all a gate needs to know: ``optimum`` is backward induction over it, the best
success any gate that sees the state texts can reach with at most ``budget`` interventions, and
the expected interventions of that gate when a tie goes to the agent. ``policy_search`` is a
second, slower brute force for tiny rivers: every deterministic (crossing, risk, budget left)
policy, each evaluated on every risk sequence. ``true_model`` is the same dynamics as a
``tabular_rl.TabularModel`` (states: the risk words, their odds depending on the crossing), for
the solver and for the reference gate (``optimal_gate``).

``best_threshold`` is the yardstick the optimum is read against: a static gate that intervenes,
while the cap lasts, wherever an ideal step-level verifier's score passes a level, each level
tried and the best kept. Two verifiers: ``process``, the crossing's own slip probability
(intervene where it is at least the level), and ``outcome``, the chance that the base agent alone
makes every crossing from here (intervene where it is at most the level). Neither looks ahead at
what the budget will be needed for; ``room`` is what that costs.

At a spend, with no cap (the priced helper's yardstick): ``priced_frontier`` is the best success any gate reaches
for each expected number of interventions an episode (every deterministic (crossing, risk) policy enumerated, a slip
ending the episode before later calls; mixing two policies draws the segment between them, so the frontier is the
upper concave hull), ``threshold_curve`` a static threshold's (success, spend) at each level of an ideal verifier,
read between levels as the report reads a baseline's curve, and ``room_at_spend`` what the best of them leaves.

``logged_rows`` and ``scored_rivers`` log the dynamics and score fresh rivers with an ideal verifier plus noise, for
tests and benchmarks of the solve and the member choice apart from any PRM.

``SureFootedAgent`` and ``expected_outcome`` are plain-cue's (``examples.plain_cue_optimum``): the
agent, the slips and the intervention are the same, so they evaluate a gate in expectation over
the slips here too.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import numpy as np

from examples.plain_cue_optimum import RISKS, SureFootedAgent, expected_outcome
from examples.rapids import HORIZON, SLIP, risk_odds_by_step

__all__ = ["IDEAL_SCORE", "RISKS", "SureFootedAgent", "best_threshold", "expected_outcome", "logged_rows",
           "optimal_gate", "optimum", "played_in_expectation", "scored_rivers",
           "outcome_score", "policy_point", "policy_search", "priced_frontier", "process_score", "room",
           "room_at_spend", "threshold_curve", "threshold_success", "true_model"]

# The odds are decimal (0.3, 0.7, ...), not binary fractions, so two equal values reached along
# different sums can differ in their last bits: an intervention must win by more than that, and a
# tie goes to the agent (as in ``tabular_rl.solve_exact``).
TIE = 1e-12


def _wins(helped: float, crossed: float) -> bool:
    return helped > crossed + TIE * (1.0 + abs(crossed))


def optimum(budget: int, horizon: int = HORIZON) -> tuple[float, float]:
    """(best success, expected interventions of the best gate, ties to the agent) with ``budget``."""
    budget = int(budget)
    value = [1.0] * (budget + 1)  # after the last crossing, per budget left
    spent = [0.0] * (budget + 1)
    for odds in reversed(risk_odds_by_step(horizon)):
        new_value, new_spent = [0.0] * (budget + 1), [0.0] * (budget + 1)
        for left in range(budget + 1):
            for risk, p in odds.items():
                keep = 1.0 - SLIP[risk]
                best = (keep * value[left], keep * spent[left])
                if left and _wins(value[left - 1], best[0]):
                    best = (value[left - 1], 1.0 + spent[left - 1])
                new_value[left] += p * best[0]
                new_spent[left] += p * best[1]
        value, spent = new_value, new_spent
    return value[budget], spent[budget]


def policy_search(budget: int, horizon: int) -> float:
    """Best success over every deterministic (crossing, risk, budget left) -> intervene policy.

    Only the cells a river can reach are enumerated (a risk with odds 0 at that crossing, or more
    budget spent than crossings passed, never occurs), so a policy differs from another where it matters."""
    odds = risk_odds_by_step(horizon)
    cells = [(t, r, b) for t in range(horizon) for r in RISKS if odds[t][r] > 0
             for b in range(max(1, budget - t), budget + 1)]
    sequences = []
    for seq in itertools.product(RISKS, repeat=horizon):
        weight = float(np.prod([odds[t][r] for t, r in enumerate(seq)]))
        if weight > 0:
            sequences.append((seq, weight))
    best = 0.0
    for choice in itertools.product((False, True), repeat=len(cells)):
        policy = dict(zip(cells, choice))
        value = 0.0
        for seq, weight in sequences:
            left, survive = budget, 1.0
            for t, risk in enumerate(seq):
                if left and policy[(t, risk, left)]:
                    left -= 1
                else:
                    survive *= 1.0 - SLIP[risk]
            value += weight * survive
        best = max(best, value)
    return best


def true_model(horizon: int = HORIZON):
    """The dynamics as a ``TabularModel``: state = the crossing's risk word; return = success."""
    from tabular_rl import TabularModel

    S = len(RISKS)
    odds = np.array([[step[r] for r in RISKS] for step in risk_odds_by_step(horizon)])
    slip = np.array([SLIP[r] for r in RISKS])
    transitions = np.zeros((horizon, S, 2, S + 1))
    for t in range(horizon - 1):  # the next crossing's risk follows that crossing's odds
        transitions[t, :, 0, :S] = (1.0 - slip)[:, None] * odds[t + 1][None, :]
        transitions[t, :, 0, S] = slip
        transitions[t, :, 1, :S] = odds[t + 1]
    transitions[horizon - 1, :, :, S] = 1.0
    rewards = np.zeros((horizon, S, 2))
    rewards[horizon - 1, :, 0] = 1.0 - slip  # success is credited when the last crossing is made
    rewards[horizon - 1, :, 1] = 1.0
    return TabularModel(transitions=transitions, rewards=rewards, start=odds[0].copy(), success=rewards.copy())


def optimal_gate(budget: int, horizon: int = HORIZON):
    """The exact optimum as a gate: backward induction on ``true_model``, reading the risk annotation."""
    from helper.gates.exact_optimal import exact_optimal_gate

    return exact_optimal_gate(true_model(horizon), RISKS, lambda o: o.annotations.get("risk"), budget)


def threshold_success(budget: int, wants: Callable[[int, str], bool], horizon: int = HORIZON) -> float:
    """Exact success of the gate that intervenes, while the cap lasts, at every crossing where ``wants(t, risk)``."""
    budget = int(budget)
    value = [1.0] * (budget + 1)
    for t, odds in reversed(list(enumerate(risk_odds_by_step(horizon)))):
        value = [sum(p * (value[left - 1] if left and wants(t, risk) else (1.0 - SLIP[risk]) * value[left])
                     for risk, p in odds.items()) for left in range(budget + 1)]
    return value[budget]


def process_score(t: int, risk: str, horizon: int = HORIZON) -> float:
    """The ideal process verifier: this crossing's slip probability (higher = help here). It reads the risk
    alone; the crossing and the horizon are there so that both verifiers are called alike."""
    return SLIP[risk]


def outcome_score(t: int, risk: str, horizon: int = HORIZON) -> float:
    """The ideal outcome verifier: the chance the base agent alone makes this crossing and every later one."""
    ahead = 1.0
    for odds in risk_odds_by_step(horizon)[t + 1:]:
        ahead *= sum(p * (1.0 - SLIP[r]) for r, p in odds.items())
    return (1.0 - SLIP[risk]) * ahead


def best_threshold(budget: int, horizon: int = HORIZON) -> dict[str, float]:
    """Per ideal verifier (``process``, ``outcome``), the best success of a static threshold under the cap."""
    odds = risk_odds_by_step(horizon)
    best = {}
    for name, score, helps_above in (("process", process_score, True), ("outcome", outcome_score, False)):
        scores = {(t, r): score(t, r, horizon) for t in range(horizon) for r in RISKS}
        # Every level that splits the scores a river can show differently, "never" included.
        levels = sorted({scores[t, r] for t in range(horizon) for r in RISKS if odds[t][r] > 0})
        levels.append(np.inf if helps_above else -np.inf)
        best[name] = max(threshold_success(budget, _threshold(scores, level, helps_above), horizon) for level in levels)
    return best


def _threshold(scores: dict, level: float, helps_above: bool) -> Callable[[int, str], bool]:
    if helps_above:
        return lambda t, risk: scores[t, risk] >= level
    return lambda t, risk: scores[t, risk] <= level


def room(budget: int, horizon: int = HORIZON) -> float:
    """How much success the optimum gains over the best threshold of either verifier under the same cap."""
    return optimum(budget, horizon)[0] - max(best_threshold(budget, horizon).values())


def policy_point(helps: Callable[[int, str], bool], horizon: int = HORIZON) -> tuple[float, float]:
    """(success, expected interventions) of the no-cap gate that intervenes wherever ``helps(t, risk)``."""
    reach, spent = 1.0, 0.0  # the chance of reaching crossing t, the calls expected so far
    for t, odds in enumerate(risk_odds_by_step(horizon)):
        spent += reach * sum(p for risk, p in odds.items() if helps(t, risk))
        reach *= sum(p * (1.0 if helps(t, risk) else 1.0 - SLIP[risk]) for risk, p in odds.items())
    return reach, spent


def _upper_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The upper concave hull of (spend, success) points, by spend, from the least spending one."""
    hull: list[tuple[float, float]] = []
    for x, y in sorted(set(points)):
        if hull and y <= hull[-1][1]:  # spends more for no more success: dominated
            continue
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (y - hull[-2][1])
                                  >= (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0])):
            hull.pop()
        hull.append((x, y))
    return hull


@functools.lru_cache(maxsize=None)
def priced_frontier(horizon: int = HORIZON) -> tuple[tuple[float, float], ...]:
    """The (spend, success) vertices of the best success at each expected spend, no cap: every deterministic
    (crossing, risk) policy over the cells a river can reach, then the upper concave hull (mixtures between)."""
    odds = risk_odds_by_step(horizon)
    cells = [(t, r) for t in range(horizon) for r in RISKS if odds[t][r] > 0]
    points = []
    for choice in itertools.product((False, True), repeat=len(cells)):
        chosen = {cell for cell, on in zip(cells, choice) if on}
        success, spend = policy_point(lambda t, risk: (t, risk) in chosen, horizon)
        points.append((spend, success))
    return tuple(_upper_hull(points))


def threshold_curve(name: str, horizon: int = HORIZON) -> list[tuple[float, float]]:
    """(spend, success) of a static threshold on the ideal ``process`` or ``outcome`` verifier at each level, no
    cap, by spend."""
    score, helps_above = {"process": (process_score, True), "outcome": (outcome_score, False)}[name]
    odds = risk_odds_by_step(horizon)
    scores = {(t, r): score(t, r, horizon) for t in range(horizon) for r in RISKS}
    levels = sorted({scores[t, r] for t in range(horizon) for r in RISKS if odds[t][r] > 0})
    levels.append(np.inf if helps_above else -np.inf)
    points = {policy_point(_threshold(scores, level, helps_above), horizon)[::-1] for level in levels}
    return sorted(points)


def _read(curve, spend: float) -> float:
    xs, ys = zip(*curve)
    return float(np.interp(spend, xs, ys))


def room_at_spend(spend: float, horizon: int = HORIZON) -> dict[str, float]:
    """At an expected ``spend`` an episode: the optimum's success, the best ideal threshold's (read between its
    levels) and the room between them."""
    best = _read(priced_frontier(horizon), spend)
    threshold = max(_read(threshold_curve(name, horizon), spend) for name in ("process", "outcome"))
    return {"optimum": best, "threshold": threshold, "room": best - threshold}


IDEAL_SCORE = {"calm": 0.9, "tricky": 0.5, "dangerous": 0.1}
"""A verifier of the crossing's own risk, one score per word (three uniform bins hold one word each)."""


def logged_rows(episodes: int, seed: int, *, noise: float = 0.0, explore: float = 0.4, horizon: int = HORIZON):
    """The rapids logged as a collection logs them, without the texts: random interventions with probability
    ``explore``, a slip ending the river, the success on every row of a river made to its end, and as the
    verifier's score ``IDEAL_SCORE`` of the risk plus normal ``noise`` (its standard deviation): for tests and
    benchmarks of the solve and the member choice apart from any PRM."""
    import polars as pl

    rng = np.random.default_rng(seed)
    odds = risk_odds_by_step(horizon)
    rows = []
    for e in range(episodes):
        kept, made = [], True
        for t in range(horizon):
            risk = RISKS[rng.choice(len(RISKS), p=[odds[t][r] for r in RISKS])]
            helped = bool(rng.random() < explore)
            slipped = not helped and rng.random() < SLIP[risk]
            kept.append({"episode_id": f"e{e}", "step": t, "intervened": helped, "reward": float(not slipped),
                         "done": slipped or t == horizon - 1,
                         "prm_score": IDEAL_SCORE[risk] + (rng.normal(0.0, noise) if noise else 0.0)})
            if slipped:
                made = False
                break
        rows += [r | {"success": float(made)} for r in kept]
    return pl.DataFrame(rows)


def scored_rivers(rivers: int, seed: int, *, noise: float = 0.0, horizon: int = HORIZON):
    """(scores, slip probabilities), each of shape (rivers, crossings): fresh rivers scored as ``logged_rows``
    scores them, to play a gate on in expectation over the slips."""
    rng = np.random.default_rng(seed)
    odds = risk_odds_by_step(horizon)
    risks = np.array([[rng.choice(len(RISKS), p=[odds[t][r] for r in RISKS]) for t in range(horizon)]
                      for _ in range(rivers)])
    ideal = np.array([IDEAL_SCORE[r] for r in RISKS])
    scores = ideal[risks] + (rng.normal(0.0, noise, risks.shape) if noise else 0.0)
    return scores, np.array([SLIP[r] for r in RISKS])[risks]


def played_in_expectation(decide: Callable, scores: np.ndarray, slip: np.ndarray, budget: int) -> float:
    """Mean success probability over rivers of a gate ``decide(step, score, budget_left)`` (vectorised, as a
    member's) under a cap of ``budget``: (rivers, crossings) arrays of scores and slip probabilities, each
    crossing left to the agent made with 1 - its slip probability, as ``expected_outcome`` reads one river."""
    rivers, horizon = scores.shape
    left, reach = np.full(rivers, int(budget)), np.ones(rivers)
    for t in range(horizon):
        helped = np.asarray(decide(np.full(rivers, t), scores[:, t], left), dtype=bool) & (left > 0)
        reach *= np.where(helped, 1.0, 1.0 - slip[:, t])
        left = left - helped
    return float(reach.mean())
