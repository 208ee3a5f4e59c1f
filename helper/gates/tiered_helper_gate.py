"""``TieredHelperGate``: the helper that says *which* help to call, each kind at its price, under a cost budget.

    from helper import HelperGate

    gate = HelperGate.load("runs/tiered/helper")          # a folder whose helper.json names kinds
    kind = gate.choose(observation)                       # "compute", "stronger", "human" or None
    action = helps[kind](observation) if kind else agent(observation)

It is a ``HelperGate`` (``should_intervene(obs)`` is ``choose(obs) is not None``) with the ``tiered_table``
backend: the PRM score and step go through the discretizer to a state, and the solved ``TieredSolution``
(``tabular_rl.tiered``) reads the action at (step, state, budget left, calls left per capped kind). The gate
keeps its own count per ``episode_id`` in an ``agile.tiered_budget.TieredBudget`` (the solved prices, the
budget and caps it was loaded with): ``choose`` spends the chosen kind under that count's lock, so no episode
ever exceeds the budget or a cap, in any order or thread; a caller's own ``budget_left`` (cost units) and
``calls_left`` (per kind) bind where smaller. A budget above the solved one is read as the solved one (the
table never held more); caps tighter than the solved ones are enforced (a kind they refuse: the agent acts).

A Lagrangian solution is two tables mixed per episode: each episode plays one of them whole, drawn from its
id (``stable_uniform``), so the same episode gets the same table after a restart or on another server.

No score (no PRM, a PRM failure, NaN): the conservative rule of ``HelperGate`` with kinds: the cheapest kind
whose price the budget left covers at every remaining decision (and whose cap does), else the agent acts.

``pick`` is the decision alone (no count spent): ``serve-gate`` calls it and spends in its own ledger.

Backends: ``tiered_table`` reads the table; ``tiered_features`` asks a ``KindClassifier``
(``helper.gates.kind_classifier``, what ``helpgate distill`` writes from a tiered solve: ``helper.solve.tiered_distill``)
for the most probable of the agent and the kinds affordable now; its folder keeps the table too
(``HelperGate.load(dir, backend="tiered_table")`` plays it).
"""

from __future__ import annotations

import math
from pathlib import Path

from agile.budget import ScoredGate
from agile.protocol import Observation
from agile.seeding import stable_uniform
from agile.tiered_budget import TieredBudget
from helper.gates import identity
from helper.gates.helper_gate import CONFIG_FILE, KIND, HelperGate, _guarantee, folder_scorer, recorded_path, resolve_recorded

BACKEND = "tiered_table"
CLASSIFIER_BACKEND = "tiered_features"
"""A ``KindClassifier`` decides (``helper.gates.kind_classifier``); the table is kept beside it (``backend=
"tiered_table"`` at load plays it)."""
POLICY_FILE = "tiered_policy.npz"


class TieredHelperGate(HelperGate):
    """See the module docstring. Build with ``HelperGate.load(dir)``, or from a solution in code and tests."""

    folder_backends = (BACKEND, CLASSIFIER_BACKEND)

    def __init__(self, solution, discretizer, scorer=None, budget: float | None = None, caps: dict | None = None,
                 decide_after: str | None = None, trained_on: dict | None = None, classifier=None,
                 actors: dict | None = None):
        ScoredGate.__init__(self, None)  # the one-kind count is unused: the tiered count below holds the budget
        res = solution.resources
        self.kinds = tuple(solution.kinds)
        self.prices = {k: p / res.scale for k, p in zip(self.kinds, res.prices)}
        self.solved_budget = res.budget / res.scale
        solved_caps = {k: c for k, c in zip(self.kinds, res.caps) if c is not None}
        caps = dict(caps or {})
        unknown = sorted(set(caps) - set(self.kinds))
        if unknown:
            raise ValueError(f"caps name {unknown}: the helper's kinds are {', '.join(self.kinds)}")
        for k, c in solved_caps.items():  # a looser cap than the solved one is the solved one: the table planned it
            caps[k] = c if k not in caps else min(int(caps[k]), c)
        self._tiered = TieredBudget(self.prices, self.solved_budget if budget is None else budget, caps,
                                    owner="TieredHelperGate", end_call="gate.end_episode(episode_id)")
        self.backend = BACKEND if classifier is None else CLASSIFIER_BACKEND
        self.table, self.discretizer, self.scorer = solution, discretizer, scorer
        self.classifier, self.fallback = classifier, None
        self.threshold = 0.5
        self._decision_state(decide_after, scorer, trained_on)
        self.degraded = self.member = self.guarantee = None
        self.members = {}
        self.actors: dict[str, str] = dict(actors or {})
        """Who answers a kind collected as ``NAME=ACTOR:PRICE`` (the others: their name); what plays it reads this."""
        self._plain = (self.backend, solution, discretizer, None)

    # -- what the count holds ------------------------------------------------------------------------
    @property
    def budget(self) -> float | None:
        """Cost per episode this gate grants, in the unit of the prices."""
        return None if self._tiered.budget is None else float(self._tiered.budget)

    @property
    def caps(self) -> dict[str, int]:
        return dict(self._tiered.caps)

    def used(self, episode_id: str) -> float:
        """Cost spent so far in this episode."""
        return self._tiered.used(episode_id)

    def calls(self, episode_id: str) -> dict[str, int]:
        """Calls of each kind so far in this episode."""
        return self._tiered.calls(episode_id)

    def live_episodes(self) -> int:
        return self._tiered.live()

    def end_episode(self, episode_id: str) -> None:
        self._tiered.end(episode_id)
        super().end_episode(episode_id)  # the scorer's caches

    def reset(self) -> None:
        self._tiered.reset()

    def budget_left(self, observation: Observation, budget_left: float | None = None) -> float:
        return self._tiered.left(observation.episode_id, budget_left)

    # -- decisions ------------------------------------------------------------------------------------
    def choose(self, observation: Observation, budget_left: float | None = None, calls_left: dict | None = None,
               proposal=None) -> str | None:
        """The kind of help to call at this decision point, spent from the episode's count; None: the agent acts."""
        self._check_use(observation)
        key = observation.episode_id
        left, calls = self._tiered.left(key, budget_left), self._tiered.calls_left(key, calls_left)
        kind = self.pick(observation, left, calls, proposal)
        # spend re-checks under the count's lock: another thread may have spent the budget meanwhile.
        return kind if kind is not None and self._tiered.spend(key, kind, budget_left, calls_left) else None

    def should_intervene(self, observation: Observation, budget_left: float | None = None, proposal=None) -> bool:
        return self.choose(observation, budget_left, proposal=proposal) is not None

    def wants(self, observation: Observation, budget_left: float, proposal=None) -> bool:
        return self.pick(observation, budget_left, self._tiered.calls_left(observation.episode_id), proposal) \
            is not None

    def intervene_probability(self, observation: Observation, budget_left, proposal=None) -> float:
        """1.0 where ``pick`` calls some kind (a tiered table is deterministic per episode)."""
        return float(self.wants(observation, budget_left, proposal))

    def affordable(self, budget_left: float, calls_left: dict) -> list[str]:
        """The kinds one more call of which ``budget_left`` (cost) and ``calls_left`` (per kind) allow."""
        return [k for k in self.kinds if self.prices[k] <= budget_left + 1e-9 and calls_left.get(k, 1) > 0]

    def pick(self, observation: Observation, budget_left: float, calls_left: dict, proposal=None) -> str | None:
        """The decision alone, nothing spent: the kind the table calls with ``budget_left`` and ``calls_left``."""
        return self.pick_scored(observation, budget_left, calls_left, proposal)[0]

    def pick_scored(self, observation: Observation, budget_left: float, calls_left: dict,
                    proposal=None) -> tuple[str | None, float | None]:
        """``pick`` and the PRM score it read (None: no decision was needed, or no score could be read)."""
        if budget_left is None:
            raise ValueError("TieredHelperGate: no budget known; pass budget_left or load the gate with a budget.")
        ok = self.affordable(budget_left, calls_left)
        if not ok:  # nothing can be called: no PRM pass spent on a decision that has one answer
            return None, None
        self._count("decisions")
        score = self._score(observation, proposal)
        if math.isnan(score):
            return self._fallback_kind(observation, budget_left, calls_left, ok), None
        if self.classifier is not None:
            from helper.gates.kind_classifier import best, kind_observation_features

            names = self.classifier.feature_names
            row = kind_observation_features(observation, min(budget_left, self.solved_budget), calls_left, score, names)
            proba = self.classifier.proba(row, len(self.kinds) + 1)[0]
            choice = best(proba, [self.kinds.index(k) + 1 for k in ok])
            return (None if choice == 0 else self.kinds[choice - 1]), score
        state = int(self.discretizer.transform([score], [observation.step])[0])
        solved = {k: calls_left[k] for k in self.kinds if k in calls_left}
        kind = self.table.kind(observation.step, state, min(budget_left, self.solved_budget), solved,
                               table=self.table_of(observation.episode_id))
        return (kind if kind in ok else None), score  # a cap tighter than the solved one refuses it

    def table_of(self, episode_id: str) -> int:
        """Which of a Lagrangian mixture's tables the episode plays (always 0 for one table)."""
        if len(self.table.tables) == 1:
            return 0
        return 0 if stable_uniform("tiered-mix", episode_id) < self.table.mix else 1

    def _fallback_kind(self, observation: Observation, left: float, calls_left: dict, ok: list[str]) -> str | None:
        self._count("fallbacks")
        steps_left = max(int(observation.horizon) - int(observation.step), 1)
        for kind in sorted(ok, key=self.prices.get):
            if self.prices[kind] * steps_left <= left + 1e-9 and calls_left.get(kind, steps_left) >= steps_left:
                return kind
        return None

    def with_budget(self, budget: float | None) -> TieredHelperGate:  # a subclass's budget gives a subclass
        """A gate sharing this one's solution, scorer and stats, with its own count at ``budget``."""
        gate = type(self)(self.table, self.discretizer, self.scorer, budget, self.caps, self.decide_after,
                          self.trained_on, self.classifier, self.actors)
        gate._stats, gate._stats_lock, gate.degraded = self._stats, self._stats_lock, self.degraded
        gate.horizon, gate.guarantee = self.horizon, self.guarantee
        return gate

    @property
    def unscored(self) -> bool:
        return self.scorer is None

    # -- persistence ------------------------------------------------------------------------------------
    def save(self, directory: str | Path, prm: str | None = None, extra: dict | None = None) -> Path:
        """A helper folder: ``tiered_policy.npz``, ``discretizer.json`` and ``helper.json`` naming the kinds,
        their prices and caps and the solved budget (what ``serve-gate`` and ``HelperGate.load`` read)."""
        from trajectories.files import write_json_atomic

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.discretizer.save(directory / "discretizer.json")
        self.table.save(directory / POLICY_FILE)
        if self.classifier is not None:
            self.classifier.save(directory / "classifier")
        trained = (extra or {}).get("trained_on") or self.trained_on
        config = {"kind": KIND, "backend": self.backend, "decide_after": self.decide_after, "kinds": list(self.kinds),
                  "prices": self.prices, "caps": self.caps, "cost_budget": self.solved_budget}
        config |= {"actors": self.actors} if self.actors else {}
        config |= recorded_path(directory, prm) if prm else {"prm": None}
        config |= {"trained_on": trained} if trained else {}
        config |= identity.recorded(trained.get("horizon") if trained else None, self.classifier, None, prm)
        config |= extra or {}
        config["classifier_files"] = identity.classifier_files(directory)
        write_json_atomic(config, directory / CONFIG_FILE)
        return directory

    @classmethod
    def load_folder(cls, directory: Path, config: dict, budget: float | None = None, prm: bool | str = True,
                    device: str | None = None, allow_fallback: bool = True,
                    backend: str | None = None) -> TieredHelperGate:
        """The gate of a tiered helper folder (``HelperGate.load`` comes here when ``helper.json`` names kinds);
        ``backend="tiered_table"`` plays the solved table of a folder whose classifier decides."""
        from tabular_rl import Discretizer
        from tabular_rl.tiered import TieredSolution

        config_path = directory / CONFIG_FILE
        solution = TieredSolution.load(directory / POLICY_FILE)
        prices = {k: p / solution.resources.scale for k, p in zip(solution.kinds, solution.resources.prices)}
        recorded = config["prices"]  # stored_values checked: a finite price > 0 for every kind it names
        if list(solution.kinds) != config["kinds"] or any(not math.isclose(p, recorded.get(k, -1.0), abs_tol=1e-9)
                                                          for k, p in prices.items()):
            raise ValueError(f"{config_path}: kinds {config['kinds']} and prices {config['prices']} differ from "
                             f"{POLICY_FILE}'s ({list(solution.kinds)}, {prices}): the folder mixes two solves; "
                             "write it again.")
        classifier = None
        if (backend or config["backend"]) == CLASSIFIER_BACKEND:
            from helper.gates.kind_classifier import KindClassifier

            classifier = KindClassifier.load(directory / "classifier")
        identity.check_files(config_path, config, classifier, None)
        scorer, degraded = folder_scorer(prm if isinstance(prm, str) else resolve_recorded(directory, config, "prm"),
                                         prm, device, config_path, config, allow_fallback, "conservative rule")
        gate = cls(solution, Discretizer.load(directory / "discretizer.json"), scorer, budget, config.get("caps"),
                   config.get("decide_after", "state"), config.get("trained_on"), classifier, config.get("actors"))
        gate.degraded, gate.horizon = degraded, identity.horizon_of(config)
        # ``helpgate calibrate``'s guarantee.json, as the one-kind gate reads it (these files, deciding as this does).
        gate.guarantee = _guarantee(directory, on_fallback=scorer is None)
        return gate

    def __repr__(self) -> str:
        return (f"TieredHelperGate(kinds={list(self.kinds)}, prices={self.prices}, budget={self.budget}, "
                f"caps={self.caps}, prm={'yes' if self.scorer is not None else 'no'})")

