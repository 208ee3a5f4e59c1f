"""The simple gates (by name in ``helper.gates.registry.GATES``): the baselines the helper is compared with, and
the built-in gates of ``agile eval``. Every one is a ``BudgetedGate``, so it plugs into
``agile.rollout.run_episodes(gate=...)`` and the AGILE executor like the helper and never exceeds
its budget. How the sweep builds each one (rates, thresholds, training) is its registry of
methods, ``helper.evaluation.methods``; ``agile eval --gate`` builds ``novelty``, ``random`` and
``uniform`` (``helper.evaluation.agile_advice.make_gate``).

- ``NeverGate`` / ``AlwaysGate``: the two references of PGR. ``AlwaysGate`` asks at every
  decision; the sweep runs it with a budget covering the whole episode.
- ``FirstKGate``: intervene at the first ``k`` decisions of the episode (always, capped at k).
- ``RandomGate``: intervene with probability ``p`` at each decision (the sweep sets ``p`` so that
  its mean interventions match the helper's at the same budget). The draw is a pure function of
  ``(seed, episode_id, step)``: reproducible under threads. ``agile eval`` draws in sequence
  instead (``draws="sequential"``), as it always has, so its published rows reproduce.
- ``UniformGate``: spends the budget at decisions drawn uniformly from the episode's: asks with
  probability budget left / decisions left, so every set of ``budget`` decisions is equally likely
  (random at exactly a given rate, never under it).
- ``NoveltyGate``: advice when memory holds nothing close to the question (the closest memory
  entry's cosine, the feature ``memory_top_similarity``, below ``threshold``).
- ``PhrasingGate``: advice on every question not phrased yes/no (a yardstick for the AGILE join).
- ``ScoreThresholdGate``: intervene when a per-decision score is at or below a threshold. With
  the PRM score (P(success) from here) it is the ``prm_threshold`` baseline; with a router's
  predicted base-agent success it is the ``router`` baseline. ``calibrate_threshold`` sets the
  threshold on training data so that about ``budget`` decisions per episode fall at or below it.
  With ``decide_after="proposal"`` the score reads the base agent's proposal too
  (``score(observation, proposal)``: a PRM trained with ``--tag-after proposal``).
- ``OracleGate``: hindsight choice. From counterfactual records (the outcome when the base
  agent acts at a decision point vs. when the expert does, everything else as in the recorded
  run), it intervenes, per episode, at the ``budget`` decision points with the largest positive
  gain ``cf_intervene_success - cf_base_success``. That is the exact hindsight optimum, an upper
  bound, only where gains add up (independent, replayable decisions); elsewhere it is a one-step
  heuristic (``helper.evaluation.methods.oracle_is_exact``).
- ``TableGate``: follows a solved policy table ``Solution.intervene_prob(step, state, budget_left)``
  with a user-supplied state function; ``exact_optimal`` builds it on the simulator's true model
  (``helper.gates.exact_optimal``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import numpy as np

from agile.budget import BudgetedGate, ScoredGate
from agile.envs.phrasing import is_yes_no_question
from agile.functions import current_question
from agile.protocol import Observation
from agile.seeding import stable_uniform


class NeverGate(BudgetedGate):
    name = "never"

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return False


class AlwaysGate(BudgetedGate):
    name = "always"

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return True


class FirstKGate(BudgetedGate):
    name = "first_k"

    def __init__(self, k: int, budget: int | None = None):
        super().__init__(k if budget is None else budget)
        self.k = int(k)

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return observation.step < self.k


class RandomGate(BudgetedGate):
    name = "random"

    def __init__(self, p: float = 0.25, budget: int | None = None, seed: int = 0,
                 draws: Literal["keyed", "sequential"] = "keyed"):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p={p}: an intervention probability must lie in [0, 1]")
        if draws not in ("keyed", "sequential"):
            raise ValueError(f"draws={draws!r}: keyed or sequential")
        super().__init__(budget)
        self.p = float(p)
        self.seed = seed
        # sequential: one draw of random.Random(seed) per decision asked with budget left, in call order.
        self.rng = random.Random(seed) if draws == "sequential" else None

    def wants(self, observation: Observation, budget_left: int) -> bool:
        if self.rng is not None:
            return self.rng.random() < self.p
        return stable_uniform(self.seed, observation.episode_id, observation.step, "random-gate") < self.p


class UniformGate(BudgetedGate):
    name = "uniform"

    def __init__(self, seed: int = 0, budget: int | None = None):
        super().__init__(budget)
        self.seed = seed

    @staticmethod
    def asked_share(budget: int, decisions: int) -> float:
        """The probability that any one of an episode's ``decisions`` is asked: every set of ``budget`` of them
        is equally likely (what an exact expectation of this gate, with no draw, weighs each decision by)."""
        return min(budget, decisions) / decisions

    def wants(self, observation: Observation, budget_left: int) -> bool:
        # Each decision's draw comes from its episode and step alone (common random numbers: the same questions
        # are drawn whatever order the episodes are played in, or how many play beside them).
        questions_left = max(observation.horizon - observation.step, 1)
        draw = stable_uniform(self.seed, observation.episode_id, observation.step, "uniform-gate")
        return draw < budget_left / questions_left


class NoveltyGate(BudgetedGate):
    name = "novelty"

    def __init__(self, threshold: float = 0.6, budget: int | None = None):
        super().__init__(budget)
        self.threshold = threshold

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return observation.features.get("memory_top_similarity", 0.0) < self.threshold


class PhrasingGate(BudgetedGate):
    """Advice on every question not phrased as a yes/no question (``agile.envs.phrasing``, read from the
    question the agent sees). A yardstick, not a learned gate: where the agent answers yes/no questions well
    and nothing else, it is the best rule that reads only the phrasing."""

    name = "not_yes_no"

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return not is_yes_no_question(current_question(observation.state_text))


class ScoreThresholdGate(ScoredGate):
    """Intervene when ``score(observation) <= threshold``; a NaN score never intervenes.

    Where the score is a PRM scorer's (``score`` its bound method, or ``scorer`` given), the episode loop's
    ``record_action`` and ``end_episode`` reach that scorer, as they reach the helper's: the PRM reads the actions
    taken before each step, and without them it scored another text than the training rows' (earlier actions
    rendered empty), so the ``prm_threshold`` baseline played on scores its level was not set on."""

    name = "threshold"

    def __init__(self, score: Callable[..., float], threshold: float, budget: int | None = None,
                 name: str | None = None, decide_after: str = "state", scorer=None):
        super().__init__(budget)
        self.score = score
        self.threshold = float(threshold)
        self.decide_after = decide_after
        owner = getattr(score, "__self__", None)
        self.scorer = scorer if scorer is not None else owner if hasattr(owner, "record_action") else None
        if name:
            self.name = name

    def wants(self, observation: Observation, budget_left: int, proposal=None) -> bool:
        value = self.score(observation, proposal) if self.decide_after == "proposal" else self.score(observation)
        return bool(np.isfinite(value) and value <= self.threshold)


def calibrate_threshold(scores: Iterable[float], decisions_per_episode: float, budget: int) -> float:
    """Threshold at or below which about ``budget`` decisions per episode fall in training data.

    It is the ``budget / decisions_per_episode`` quantile of the training scores (NaN ignored),
    taken as the data value just below it (``method="lower"``), so that the gate fires at a
    share of decisions of at most that quantile when scores are distinct (ties at the threshold
    all fire; the budget still caps each episode). ``-inf`` for budget 0 (never) and ``+inf``
    when the budget covers every decision (always).
    """
    values = np.asarray(list(scores), dtype=np.float64)
    values = values[np.isfinite(values)]
    if budget <= 0:
        return -math.inf
    if budget >= decisions_per_episode:
        return math.inf
    if values.size == 0:
        raise ValueError("calibrate_threshold: no finite training score to calibrate on")
    return float(np.quantile(values, budget / decisions_per_episode, method="lower"))


class OracleGate(BudgetedGate):
    name = "oracle"

    def __init__(self, chosen: Mapping[str, frozenset[int]], budget: int):
        super().__init__(budget)
        self.chosen = dict(chosen)

    @classmethod
    def from_counterfactuals(cls, episode_ids, steps, cf_base, cf_intervene, budget: int) -> OracleGate:
        """Pick, per episode, the ``budget`` steps with the largest positive gain (ties: earlier step)."""
        gains: dict[str, list[tuple[float, int]]] = {}
        for episode, step, base, helped in zip(episode_ids, steps, cf_base, cf_intervene):
            if base is None or helped is None or not (np.isfinite(base) and np.isfinite(helped)):
                raise ValueError(
                    f"episode {episode!r} step {step}: no counterfactual outcome. The oracle needs "
                    "records from run_episodes(..., counterfactual=True)."
                )
            gains.setdefault(str(episode), []).append((float(helped) - float(base), int(step)))
        chosen = {}
        for episode, items in gains.items():
            best = sorted((item for item in items if item[0] > 0), key=lambda item: (-item[0], item[1]))
            chosen[episode] = frozenset(step for _, step in best[: max(budget, 0)])
        return cls(chosen, budget)

    def wants(self, observation: Observation, budget_left: int) -> bool:
        return observation.step in self.chosen.get(observation.episode_id, ())


class TableGate(BudgetedGate):
    """Follow ``solution`` (a ``tabular_rl.Solution``) with states from ``state_of(observation)``."""

    name = "table"

    def __init__(self, solution, state_of: Callable[[Observation], int], budget: int | None = None,
                 name: str | None = None):
        super().__init__(solution.budget if budget is None else budget)
        self.solution = solution
        self.state_of = state_of
        if name:
            self.name = name

    def wants(self, observation: Observation, budget_left: int) -> bool:
        state = self.state_of(observation)
        p = self.solution.intervene_prob([observation.step], [state], [budget_left])[0]
        return bool(p > 0.5)
