"""Every method of ``helpgate sweep``: one class each, one interface, one registry (``METHODS``).

The sweep makes one instance of each requested method, in registry order, on one ``SweepContext``
(the held-out environment, the helper, the PRM scorer, the training rows, what earlier methods
measured) and calls

- ``prepare(ctx)``: train or load what the method needs; returns None, or the reason it is
  skipped (written to ``summary.json``);
- ``run(ctx)``: by default, for each of ``budgets(ctx)``, ``build(ctx, C)`` gives the gate that
  ``helper.evaluation.play.evaluate_gate`` plays on the held-out episodes with budget ``C``;
- ``training_calls(ctx)``: strong-model and human calls spent to train it.

``name`` is the key ``--methods`` takes; ``row`` is the method's name in ``sweep.csv`` (the
same, except for the oracle where it is not an upper bound: ``oracle_1step``).

- ``never`` (C = 0) and ``always`` (C = the horizon: every decision): the PGR references.
- ``helper``: the helper (``HelperGate``): under each cap C the member its training folds chose for C
  (``helper.solve.select``: the solved table, its variants or the threshold on the same score), else the
  distilled classifier.
- ``helper_priced``: the helper with no cap, priced to spend s interventions an episode for each s of the budgets
  (rows keyed by s): among the family's tables priced on the training model to spend about s and the threshold
  members, the best success on the training folds among those whose mean spend there stays within s
  (``helper.solve.select.priced_members``), played with the whole horizon as its budget. It is the at-a-spend side
  of every comparison with a threshold-type baseline's no-cap curve (``helper.evaluation.spend``).
- ``random``: intervene with a per-decision probability set so that its mean interventions per
  episode match the helper's at the same C on the same episodes: first the helper's interventions
  over the helper's own decisions per episode, then corrected by what random actually used (the
  cap at C and episode lengths move it: a safeguarded search on the rate), up to
  ``random_rounds`` runs, keeping the closest.
- ``first_k``: the first C decisions.
- ``prm_threshold``: intervene when the PRM score is at or below a level: under each cap C the level with the
  best success under C on the training rows' ``prm_score`` column (as ``prm score`` wrote it: out of fold), read
  on training folds each fitted without it (``helper.gates.threshold_levels``: the helper's own threshold
  members and evaluator), and with no cap at the levels that spend 1, 2, ... an episode (rows
  ``prm_threshold_nocap``, ``helper.evaluation.spend``). It decides when the helper does (``decide_after``: a PRM
  trained with ``--tag-after proposal`` scores the base agent's proposal, for both).
- ``router``: a classifier of the base agent's failure from what a deployed agent sees (no PRM,
  no budget, no dataset annotation such as the question type unless the sweep runs the
  ``--gold-features`` ablation), its levels chosen like
  ``prm_threshold``'s on its out-of-fold predictions for the training rows. In ``proposal`` mode
  (the sweep's ``decide_after``) it decides after the proposal too: it learns whether the
  proposal is right (``proposal_reward``, logged at every row) and also reads the proposal's
  signals (``proposal_signals``, as ``p_<key>`` features).
- ``knn``: the share of the ``--knn-k`` nearest training decision points (by the sentence encoder, on what a
  deployed agent sees: the state text, and the proposal in ``proposal`` mode) that failed by the PRM's own
  training target, its levels chosen like ``prm_threshold``'s on out-of-fold scores of the training rows (folds
  of task groups, as the router's; ``helper.gates.knn``).
- ``online_rl``: ``helper.gates.online_rl.train(env, cfg, scorer) -> (policy, report)``, then
  ``OnlineRLGate(policy, C, scorer)``; a report with ``save_curve(path)`` writes
  ``online_rl_curve.png`` beside the sweep.
- ``oracle``: from one counterfactual run of the held-out episodes (the outcome with the base
  agent vs. an intervention at each decision, the rest played by the base agent), per episode the
  C decisions with the largest positive gain. Where decisions are independent and replayable
  (ProductQA, simulator agent, no memory boost, the human as strong actor) a gain does not
  depend on the other decisions and success is never's plus the sum of the chosen gains, so this
  is the exact hindsight optimum: an upper bound on every gate with budget C, episode by episode.
  Elsewhere one decision changes the value of the next, the same ranking is only a heuristic and
  its row is ``oracle_1step``, never used as an upper bound.
- ``exact_optimal``: ProductQA's simulator agent with no memory boost only: backward induction on
  the true model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from helper.gates import simple as B
from agile.budget import largest_budget
from helper.gates import exact_optimal as exact
from helper.gates.training_folds import router_fold_groups
from helper.data.environment import Environment
from helper.evaluation.play import evaluate_gate
from helper.evaluation.metrics import ALWAYS, ORACLE, ORACLE_1STEP
from helper.gates.helper_gate import resolve_recorded
from helper.gates.registry import GATES
from trajectories.number_maps import number_map_keys, number_maps
from trajectories.shards import read_shard, read_trajectories

ZERO_CALLS = {"strong": 0, "human": 0}
ANNOTATION_PREFIXES = ("type_",)
"""Feature keys that are dataset annotations (the question type): router features only in the
``--gold-features`` ablation, never by default (training rows collected with them stay usable)."""


@dataclass
class SweepContext:
    """What every method of one sweep shares, and what the methods measured so far."""

    cfg: object
    """The ``helper.evaluation.sweep.SweepConfig``."""
    env: Environment
    out: Path
    helper: object | None = None
    """The loaded ``HelperGate`` (when helper or prm_threshold is requested)."""
    helper_config: dict = field(default_factory=dict)
    scorer: object | None = None
    """The PRM scorer (``score(observation) -> float``): the helper's, or the caller's."""
    rows: list[dict] = field(default_factory=list)
    per_episode: list[dict] = field(default_factory=list)
    records: dict[str, dict[int, list]] = field(default_factory=dict)
    """Per row name, per budget: the run's records (one list per episode)."""
    extra: dict = field(default_factory=dict)
    """Per-method reports that go into summary.json (e.g. the online learner's stopping point)."""
    decide_after: str = "state"
    """When the score-reading methods decide: on the state, or after the base agent's proposal."""
    _train_rows: pl.DataFrame | None | bool = False
    playing: "Method | None" = None
    """The method now playing: every gate played under its row is checked to be of its ``Method.gate``'s class."""

    def evaluate(self, row: str, gate_for_budget: Callable[[int], object], budgets, keep: bool = True,
                 counterfactual: bool = False, cap: int | None = None):
        """Play the held-out episodes with ``gate_for_budget(C)`` for each budget; keep the rows. ``cap``: every run's
        episode budget instead of C (a method set to spend C on average, with no cap)."""
        if self.playing is not None and row == self.playing.row:
            gate_for_budget = _checked(gate_for_budget, row, self.playing.gate)
        result = evaluate_gate(self.env, gate_for_budget, budgets, row, self.cfg.ci_resamples, counterfactual, cap)
        if keep:
            self.rows.extend(result[0])
            self.per_episode.extend(result[1])
            self.records.setdefault(row, {}).update(result[2])
        return result

    def usage(self, row: str) -> dict[int, float]:
        """Mean interventions per episode of a method already run, per budget."""
        return {r["budget"]: r["interventions"] for r in self.rows if r["method"] == row}

    def decisions(self, row: str) -> dict[int, float]:
        """Mean decisions per episode of a method already run, per budget (measured, not the horizon)."""
        return {c: float(np.mean([len(episode) for episode in records]))
                for c, records in self.records.get(row, {}).items()}

    @property
    def budgets(self) -> list[int]:
        """``--budgets``; by default 0 up to ``agile.budget.largest_budget``: always-intervene's mean
        interventions, rounded up, once it has played (ProductQA's questions per episode, TextWorld's
        mean winning-or-longest episode under always), else the horizon."""
        if self.cfg.budgets is not None:
            return sorted({int(c) for c in self.cfg.budgets})
        used = self.usage(ALWAYS)
        return list(range(largest_budget(self.env.horizon, max(used.values()) if used else None) + 1))

    @property
    def offline_calls(self) -> dict:
        calls = self.helper_config.get("training_calls", {})
        return {k: calls.get(k, 0) for k in ("strong", "human")}

    def train_rows(self) -> pl.DataFrame | None:
        """Training rows: ``--train-data``, else the labels of the solve folder the helper came from."""
        if self._train_rows is False:
            self._train_rows = None
            if self.cfg.train_data:
                path = Path(self.cfg.train_data)
                if path.is_dir() and (path / "labels.parquet").is_file():  # a solve folder: its labelled rows
                    path = path / "labels.parquet"
                if path.is_file():
                    self._train_rows = read_shard(path, require=("episode_id", "step"))
                else:
                    self._train_rows = read_trajectories(path, require=("episode_id", "step"), allow_incomplete=bool(
                        getattr(self.cfg, "allow_incomplete", False)))
            else:
                source = resolve_recorded(self.cfg.helper, self.helper_config, "labels_from")
                if source and (Path(source) / "labels.parquet").exists():
                    self._train_rows = read_shard(Path(source) / "labels.parquet", require=("episode_id", "step"))
        return self._train_rows


def _checked(gate_for_budget: Callable[[int], object], row: str, gate: str) -> Callable[[int], object]:
    """``gate_for_budget``, refusing a gate that is not of the registry entry ``gate`` (a method's declaration)."""
    expected = GATES[gate]

    def build(budget: int):
        built = gate_for_budget(budget)
        if not isinstance(built, expected):
            raise TypeError(f"method {row!r} declares gate {gate!r} ({expected.__name__}) but built a "
                            f"{type(built).__name__}: name the right entry of helper.gates.registry.GATES.")
        return built
    return build


NEEDS = ("helper", "prm", "train_rows", "proposal")
"""What a method may need beyond the held-out environment and the budget C: the distilled helper, a PRM
scorer (the helper's or the caller's), training rows, the sweep's ``decide_after`` mode (it reads the
base agent's proposal in ``proposal`` mode)."""


class Method:
    """One method of the sweep (see the module docstring for the protocol)."""

    name = "method"
    gate = ""
    """The entry of ``helper.gates.registry.GATES`` whose class every gate it plays is (the sweep checks it)."""
    needs: frozenset[str] = frozenset()
    """Which of ``NEEDS`` it reads from the ``SweepContext``; the sweep loads the helper for a method that
    needs the helper or the PRM."""

    def __init__(self):
        self.row = self.name

    def prepare(self, ctx: SweepContext) -> str | None:
        return None

    def budgets(self, ctx: SweepContext) -> list[int]:
        return ctx.budgets

    def build(self, ctx: SweepContext, budget: int):
        raise NotImplementedError

    def run(self, ctx: SweepContext) -> None:
        ctx.evaluate(self.row, lambda c: self.build(ctx, c), self.budgets(ctx))

    def training_calls(self, ctx: SweepContext) -> dict:
        return dict(ZERO_CALLS)


class Never(Method):
    name = "never"
    gate = "never"

    def budgets(self, ctx):
        return [0]

    def build(self, ctx, budget):
        return B.NeverGate(budget)


class Always(Method):
    name = ALWAYS
    gate = "always"

    def budgets(self, ctx):
        return [ctx.env.horizon]

    def build(self, ctx, budget):
        return B.AlwaysGate(budget)


class Helper(Method):
    name = "helper"
    gate = "helper"
    needs = frozenset({"helper", "proposal"})

    def prepare(self, ctx):
        return None if ctx.helper is not None else "no helper loaded"

    def build(self, ctx, budget):
        return ctx.helper.with_budget(budget)

    def training_calls(self, ctx):
        return ctx.offline_calls


class HelperPriced(Method):
    name = "helper_priced"
    gate = "helper"
    needs = frozenset({"helper", "prm", "train_rows", "proposal"})

    def prepare(self, ctx):
        from helper.gates.helper_gate import HelperGate
        from helper.solve.select import priced_members

        # The solve folder the helper came from, or --train-data when that is one.
        candidates = [resolve_recorded(ctx.cfg.helper, ctx.helper_config, "labels_from"), ctx.cfg.train_data]
        source = next((Path(c) for c in candidates if c and (Path(c) / "solution.json").exists()), None)
        if ctx.helper is None or ctx.scorer is None or source is None:
            return "needs a helper with a PRM and its solve folder (solution.json; --train-data may name it)"
        solved = json.loads((source / "solution.json").read_text()).get("config", {})
        if solved.get("advice_cost") is not None:
            return "the helper was solved at an advice cost (no budget): it is priced already"
        self.cap = int(ctx.env.horizon)
        self.targets = [c for c in ctx.budgets if c > 0]
        chosen, report = priced_members(source, self.targets, self.cap)
        self.gates = {s: HelperGate("table", scorer=ctx.scorer, table=m.solution, discretizer=m.discretizer,
                                    budget=self.cap, solved_budget=m.solution.budget,
                                    decide_after=ctx.helper.decide_after) for s, m in chosen.items()}
        ctx.extra["helper_priced"] = report
        return None

    def run(self, ctx):
        # No cap: each target spend's member plays with the whole horizon as its budget; its rows keyed by the target.
        ctx.evaluate(self.row, lambda s: self.gates[s], self.targets, cap=self.cap)

    def training_calls(self, ctx):
        return ctx.offline_calls


class FirstK(Method):
    name = "first_k"
    gate = "first_k"

    def build(self, ctx, budget):
        return B.FirstKGate(budget)


class Random(Method):
    name = "random"
    gate = "random"
    tolerance = 0.02
    """Interventions per episode within which random's mean counts as matching the helper's."""

    def run(self, ctx):
        target, decisions = ctx.usage("helper"), ctx.decisions("helper")
        for budget in ctx.budgets:
            if budget in target:
                goal = target[budget]
                rate = min(1.0, goal / max(decisions.get(budget, ctx.env.horizon), 1.0))
            else:  # no helper in this sweep: C decisions out of the horizon
                goal, rate = None, min(1.0, budget / ctx.env.horizon)
            best, best_used, low, high = None, math.inf, 0.0, 1.0
            for round_ in range(max(1, int(ctx.cfg.random_rounds))):
                result = ctx.evaluate(self.row, lambda c, p=rate: B.RandomGate(p, c, seed=ctx.cfg.seed), [budget],
                                      keep=False)
                used = result[0][0]["interventions"]
                if best is None or abs(used - goal) < abs(best_used - goal):
                    best, best_used = result, used
                if goal is None or abs(used - goal) <= self.tolerance:
                    break
                # Interventions grow with the rate (the draws are fixed per decision): keep a bracket;
                # one proportional step first (it undoes most of what the cap at C and the episode
                # lengths did), then bisection, which also converges where the cap saturates.
                low, high = (rate, high) if used < goal else (low, rate)
                step = rate * goal / used if used > 0 else 2 * rate + 1e-3
                new = step if round_ == 0 and low < step < high else (low + high) / 2
                if rate == 1.0 and used < goal or abs(new - rate) < 1e-6:
                    break  # out of random's reach (the helper spends more than the cap lets random)
                rate = new
            ctx.rows.extend(best[0])
            ctx.per_episode.extend(best[1])
            ctx.records.setdefault(self.row, {}).update(best[2])


class ThresholdMethod(Method):
    """A threshold on a score, at full strength under each cap (its level chosen on the training folds for the
    best success under that cap, ``helper.gates.threshold_levels.capped_levels``) and, with no cap, at the
    spends that draw its curve past the priced helper's (``helper.evaluation.spend.play_free``)."""
    gate = "threshold"

    decide_after = "state"

    def score_fn(self, ctx):
        raise NotImplementedError

    def set_levels(self, ctx, rows: pl.DataFrame, train_score: np.ndarray) -> None:
        from helper.gates.threshold_levels import capped_levels

        self.train_score = np.asarray(train_score, dtype=np.float64)
        self.decisions = float(rows.group_by("episode_id").len()["len"].mean())
        self.thresholds, report = capped_levels(rows, self.train_score, ctx.budgets)
        ctx.extra.setdefault(self.name, {})["capped_levels"] = report

    def build(self, ctx, budget):
        return B.ScoreThresholdGate(self.score_fn(ctx), self.thresholds[budget], budget, name=self.name,
                                    decide_after=self.decide_after)

    def run(self, ctx):
        from helper.evaluation.spend import play_free

        super().run(ctx)
        play_free(ctx, self)


class PrmThreshold(ThresholdMethod):
    name = "prm_threshold"
    needs = frozenset({"prm", "train_rows", "proposal"})

    def prepare(self, ctx):
        rows = ctx.train_rows()
        if ctx.scorer is None or rows is None or "prm_score" not in rows.columns:
            return "needs a PRM (the helper names none) and scored training rows"
        self.decide_after = getattr(ctx.scorer, "decide_after", "state")
        # The column as `prm score` wrote it: out of fold, so the level is not chosen on scores of a model that
        # saw those episodes.
        self.set_levels(ctx, rows, rows["prm_score"].to_numpy())
        return None

    def score_fn(self, ctx):
        return ctx.scorer.score

    def training_calls(self, ctx):
        return ctx.offline_calls


NEEDS_TRAINING_ROWS = "needs training rows (--train-data, or a helper distilled from a solve folder)"
"""Why a method that learns from the training rows is skipped without them."""


class Router(ThresholdMethod):
    name = "router"
    needs = frozenset({"train_rows", "proposal"})
    folds = 5

    def prepare(self, ctx):
        from sklearn.model_selection import GroupKFold

        from helper.gates.features import FeatureClassifier, feature_keys, frame_features
        from prm.data.labels import has_process_rewards

        rows = ctx.train_rows()
        if rows is None:
            return NEEDS_TRAINING_ROWS
        gold = ctx.cfg.spec.gold_features
        keys = [k for k in feature_keys(rows) if gold or not k.startswith(ANNOTATION_PREFIXES)]
        self.names = ["step", "horizon", "progress", "steps_left"] + [f"f_{k}" for k in keys]
        self.decide_after = ctx.decide_after
        proposals = self.decide_after == "proposal"
        if proposals and ("proposal_reward" not in rows.columns or rows["proposal_reward"].null_count()):
            return "decide_after='proposal' needs training rows with proposal_reward (collect --decide-after proposal)"
        self.signals = _signal_keys(rows) if proposals else []
        X = np.hstack([frame_features(rows, self.names), _signal_matrix(rows, self.signals)])
        if proposals:
            # Every row logged whether the base agent's proposal was right, intervened or not.
            base = np.ones(rows.height, dtype=bool)
            fail = (rows["proposal_reward"].to_numpy() < 0.5).astype(int)
        else:
            # It learns the base agent's failures from the rows where the base agent acted, and is
            # calibrated on every decision (the gate is asked at every one). A failure is a step the
            # env did not reward where it rewards steps (a question answered, a game's progress: on
            # TextWorld this ranked better than the episode's outcome, RESULTS), else a step of an
            # episode that failed (only the end is rewarded: every step would "fail").
            base = (rows["actor"] == "base").to_numpy()
            outcome = "reward" if has_process_rewards(rows) else "success"
            fail = (rows[outcome].to_numpy() < 0.5).astype(int)
        if len(set(fail[base])) < 2:
            return "the base agent's training rows all succeed or all fail: nothing to route on"
        seed = ctx.cfg.seed
        self.columns = self.names + [f"p_{k}" for k in self.signals]
        ctx.extra["router"] = {"features": self.columns}  # what it read, in summary.json
        self.model = FeatureClassifier("gbm", self.columns, random_state=seed).fit(X[base], fail[base])
        # Calibrate on out-of-fold predictions: in-sample predictions of a boosted model are over-confident, and
        # the threshold would not fire as often as planned. Folds hold whole task groups (as the PRM's,
        # prm.data.folds), so the threshold is set on groups the fold's model did not see, as the test groups
        # are; whole episodes where there are fewer groups than folds (said in summary.json).
        groups, by = router_fold_groups(rows, self.folds)
        ctx.extra["router"]["calibration_folds_by"] = by
        oof = np.full(len(fail), np.nan)
        folds = min(self.folds, len(np.unique(groups)))
        for train, test in GroupKFold(n_splits=folds).split(X, fail, groups):
            train = train[base[train]]
            if len(set(fail[train])) < 2:
                continue
            model = FeatureClassifier("gbm", self.columns, random_state=seed).fit(X[train], fail[train])
            oof[test] = 1.0 - model.predict_proba(X[test])
        self.set_levels(ctx, rows, oof)
        return None

    def predicted_success(self, observation, proposal=None) -> float:
        from helper.gates.features import observation_features

        signals = getattr(proposal, "signals", None) or {}
        row = np.hstack([observation_features(observation, 0, np.nan, self.names),
                         [[float(signals.get(k, np.nan)) for k in self.signals]]])
        return 1.0 - float(self.model.predict_proba(row)[0])

    def score_fn(self, ctx):
        return self.predicted_success

    def training_calls(self, ctx):
        return ctx.offline_calls


class Knn(ThresholdMethod):
    name = "knn"
    needs = frozenset({"train_rows", "proposal"})
    folds = 5

    def prepare(self, ctx):
        from helper.gates import knn

        rows = ctx.train_rows()
        if rows is None:
            return NEEDS_TRAINING_ROWS
        # Failure as the run's PRM was trained to read it: the PRM the sweep scores with, else the helper's.
        recorded = Path(ctx.cfg.helper) / "helper.json"
        helper_config = ctx.helper_config or (json.loads(recorded.read_text()) if recorded.is_file() else {})
        prm = ctx.cfg.prm or (resolve_recorded(ctx.cfg.helper, helper_config, "prm") if helper_config else None)
        embedder = knn.load_embedder(ctx.cfg.knn_encoder, ctx.cfg.spec.device)
        try:
            self.scorer, oof, report = knn.fit(rows, embedder, ctx.cfg.knn_k, ctx.decide_after,
                                               knn.prm_label_settings(prm), self.folds)
        except knn.Unusable as error:
            return str(error)
        ctx.extra["knn"] = report | {"encoder": ctx.cfg.knn_encoder}
        self.decide_after = self.scorer.decide_after
        self.set_levels(ctx, rows, oof)
        return None

    def score_fn(self, ctx):
        return self.scorer.score

    def training_calls(self, ctx):
        return ctx.offline_calls


def _signal_keys(rows: pl.DataFrame) -> list[str]:
    """Sorted keys of the ``proposal_signals`` column (empty when absent)."""
    return number_map_keys(rows["proposal_signals"]) if "proposal_signals" in rows.columns else []


def _signal_matrix(rows: pl.DataFrame, keys: list[str]) -> np.ndarray:
    if not keys:
        return np.zeros((rows.height, 0))
    signals = number_maps(rows["proposal_signals"])
    return np.array([[d.get(k, np.nan) for k in keys] for d in signals], dtype=np.float64)


class OnlineRL(Method):
    name = "online_rl"
    gate = "online_rl"

    def prepare(self, ctx):
        from helper.gates.online_rl import (
            OnlineRLConfig,
            calls_to_reach,
            save_learning_curve,
            train,
            validation_success,
        )

        cfg = ctx.cfg
        # Trained on every budget up to the sweep's largest (one policy reads budget_left, as the helper).
        rl_cfg = OnlineRLConfig(budgets=list(range(1, max(ctx.budgets[-1], 1) + 1)), total_timesteps=cfg.rl_timesteps,
                                n_steps=cfg.rl_n_steps, eval_every=cfg.rl_eval_every,
                                val_episodes=cfg.rl_val_episodes, lr=cfg.rl_lr, seed=cfg.seed,
                                train_episodes=cfg.rl_train_episodes)
        self.score = ctx.scorer if cfg.rl_use_prm else None
        self.policy, report = train(ctx.env, rl_cfg, self.score)
        self.report = report
        # The helper's success on the curve's validation episodes (its test rows are other groups).
        helper_success = (validation_success(ctx.env, rl_cfg, ctx.helper.with_budget)[0]
                          if ctx.helper is not None and "helper" in cfg.methods else None)
        save_learning_curve(report, ctx.out, helper_success)
        ctx.extra["online_rl"] = {
            "stopped": report.stopped, "timesteps": report.timesteps, "best_timesteps": report.best_timesteps,
            "validation_calls": report.validation_calls, "helper_validation_success": helper_success,
            "calls_to_reach_helper": calls_to_reach(report, helper_success) if helper_success else None}

    def build(self, ctx, budget):
        from helper.gates.online_rl import OnlineRLGate

        return OnlineRLGate(self.policy, budget, self.score)

    def training_calls(self, ctx):
        return self.report.calls | {"episodes": self.report.episodes}


def oracle_is_exact(cfg) -> bool:
    """Whether the counterfactual oracle is the hindsight optimum (see the module docstring)."""
    spec = cfg.spec
    return (spec.kind.exact_optimum and spec.agent == "simulator" and not spec.memory_boost
            and spec.strong == "human")


class Oracle(Method):
    name = ORACLE
    gate = "oracle"

    def prepare(self, ctx):
        self.row = ORACLE if oracle_is_exact(ctx.cfg) else ORACLE_1STEP
        # One counterfactual run (no intervention) gives every decision's gain in hindsight.
        _, _, records = ctx.evaluate("counterfactual", lambda c: B.NeverGate(c), [0], keep=False,
                                     counterfactual=True)
        flat = [r for episode in records[0] for r in episode]
        self.gains = ([r.episode_id for r in flat], [r.step for r in flat],
                      [r.cf_base_success for r in flat], [r.cf_intervene_success for r in flat])
        who = "human" if ctx.cfg.spec.strong in ("human", "human-cli") else "strong"
        self.calls = dict(ZERO_CALLS) | {who: len(flat)}

    def build(self, ctx, budget):
        gate = B.OracleGate.from_counterfactuals(*self.gains, budget=budget)
        gate.name = self.row
        return gate

    def training_calls(self, ctx):
        return self.calls


class ExactOptimal(Method):
    name = "exact_optimal"
    gate = "table"

    def prepare(self, ctx):
        from agile.envs.productqa import QUESTION_TYPES

        cfg = ctx.cfg.spec
        if not cfg.kind.exact_optimum:
            return (f"needs ProductQA's simulator (a model over question types); env={cfg.env!r} has no such "
                    "model")
        if cfg.agent != "simulator" or cfg.memory_boost:
            return "needs the simulator agent with memory_boost 0 (known, memoryless dynamics)"
        self.types = QUESTION_TYPES
        self.model = exact.simulator_model(ctx.env.type_sequences(), dict(zip(QUESTION_TYPES, cfg.sim_accuracy)),
                                       QUESTION_TYPES, ctx.env.horizon)
        return None

    def build(self, ctx, budget):
        from agile.envs.scripted_answers import question_type

        return exact.exact_optimal_gate(self.model, self.types, question_type, budget)


METHODS: dict[str, type[Method]] = {
    method.name: method
    for method in (Never, Always, Helper, HelperPriced, Random, FirstK, PrmThreshold, Router, Knn, OnlineRL, Oracle,
                   ExactOptimal)
}
"""The one registry of methods: name -> its class (what it ``needs``, ``prepare``, then ``build(ctx, C)``: its
gate, one of ``helper.gates.simple`` or the helper's, for budget C). The sweep iterates it in run order: the references
first (the default budgets come from always), the helper before random (random matches its interventions).
``helpgate sweep --methods`` takes its keys, and ``benchmarks/setups/solver_cv.py`` replays its gates."""
