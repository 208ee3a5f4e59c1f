"""``HelperGate``: the distilled helper, one call per decision point.

    from helper import HelperGate

    gate = HelperGate.load("runs/demo/helper", budget=2)     # PRM, classifier, config
    if gate.should_intervene(observation):                   # before the agent acts
        action = strong_actor(observation)                   # or ask a human
    else:
        action = agent(observation)

A helper whose PRM was trained with ``--tag-after proposal`` decides after the base agent's
proposal (``gate.decide_after == "proposal"``, stored as ``decide_after`` in ``helper.json``):
``gate.should_intervene(observation, proposal=agent(observation))`` keeps the proposal or calls
for help; ``run_episodes`` does this by itself for such a gate.

It is an ``agile.protocol.Gate``: ``run_episodes(episodes, agent, gate=gate, budget=2)`` works
unchanged (the loop passes its own ``budget_left``; the gate also keeps its own count per
``observation.episode_id``, see ``agile.budget``). It never answers True once the episode's
budget is spent, whatever the order of the calls, and it is safe to call from many threads. A
count restarts only for a new ``episode_id`` or after ``gate.end_episode(episode_id)`` /
``gate.reset()`` (``run_episodes`` ends each episode when it finishes).

Under a cap C that ``helpgate distill`` chose a member for (``helper.solve.select``: the solved table, one of its
variants, or the threshold on the same score, whichever did best on the training folds; ``members/``),
``load(dir, budget=C)`` and ``with_budget(C)`` play that member through the table backend (``gate.member`` names
it); a cap with no member, or a backend named at load time, plays the backend below.

Which help: ``gate.choose(observation)`` names the kind of help to call, or None for the agent; a one-kind
helper's kind is ``"intervene"`` (``choose(...) is not None`` is ``should_intervene(...)``). A folder whose
``helper.json`` names several kinds (``backend: tiered_table``) loads as a ``TieredHelperGate``
(``helper.gates.tiered_helper_gate``): the solved tiered table, each kind at its price under a cost budget and caps.

Backends (chosen by ``helpgate distill --backend``; ``table`` can be forced at load time):

- ``features``: a gradient-boosting / logistic-regression classifier on the PRM score, step,
  progress, budget left and the observation's numeric features;
- ``text``: a sequence classifier on the state text with the step and budget written in (it
  needs no PRM);
- ``table``: no classifier, the solved policy table itself (PRM score -> discretizer -> table).

Fallback when no PRM score can be computed (no PRM in the helper folder, the PRM failed to load,
or scoring raised / returned NaN): the features and table backends use the *fallback classifier*,
the same model trained without the score feature, which distill always saves. If even that is
missing, the conservative rule applies: intervene only when the interventions left cover every
remaining decision (spending them then cannot take them from a later, better use).
``gate.stats()`` counts decisions and fallbacks.

On its first decision the gate compares the use with what it was trained on (``helper.gates.trained_on``,
stored by distill): a larger budget, a longer horizon or another env warns once, naming the fields;
an observation that has none of the features the classifier reads is refused (``ValueError``).

Every value of ``helper.json`` is range-checked before anything is loaded (``helper.gates.stored_values``:
a NaN threshold, a negative budget, a horizon of 0 are refused naming the field). A helper folder is
one unit (``helper.gates.identity``): ``helper.json`` records the training horizon, the
classifiers' feature names and a fingerprint of the PRM, and ``load`` refuses a folder whose files
disagree with them, naming the field. A PRM that loads but is not the recorded one is always
refused (``UntrustedPrm``; ``prm=False`` runs on the fallback instead). A recorded PRM that is
missing or does not load takes the fallback above with a warning and ``gate.degraded`` saying why,
or is refused with ``allow_fallback=False`` (what ``serve-gate`` does unless ``--allow-fallback``).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from pathlib import Path

from agile.budget import ScoredGate, TooManyEpisodes
from helper import stored_config
from agile.protocol import Observation
from helper.gates import identity, stored_values
from helper.gates.features import SCORE_FEATURE, FeatureClassifier, observation_features
from helper.gates.identity import UntrustedPrm
from helper.gates.trained_on import mismatch
from trajectories.files import read_json_object

BACKENDS = ("features", "text", "table")


def folder_owner(backend: str | None) -> type | None:
    """The subclass of ``HelperGate`` whose folders name ``backend`` (None: HelperGate's own backends)."""
    pending = list(HelperGate.__subclasses__())
    while pending:
        cls = pending.pop()
        if backend in cls.folder_backends:
            return cls
        pending.extend(cls.__subclasses__())
    return None
CONFIG_FILE = "helper.json"
KIND = "helpgate.helper"


def folder_scorer(prm_path, prm: bool | str, device, config_path: Path, config: dict, allow_fallback: bool,
                  fallback: str) -> tuple[object | None, str | None]:
    """A helper folder's PRM scorer and, where it cannot load and ``allow_fallback`` lets the helper decide on its
    ``fallback`` rule, why (``degraded``); ``prm=False`` or no PRM path: no scorer."""
    if prm is False or not prm_path:
        return None, None
    try:
        return _load_scorer(prm_path, device, config_path, None if isinstance(prm, str) else config), None
    except _Unloadable as error:
        if not allow_fallback:
            raise UntrustedPrm(f"{config_path}: {error}; the helper would decide on its {fallback} "
                               "(no PRM score).") from error
        warnings.warn(f"{error}; the helper uses its {fallback} (no PRM score) for every decision.", stacklevel=3)
        return None, str(error)


class HelperGate(ScoredGate):
    """See the module docstring. Build with ``HelperGate.load(dir)`` (or the constructor in tests)."""

    name = "helper"
    folder_backends: tuple[str, ...] = ()
    """helper.json backends a subclass loads itself (``load_folder``): ``load`` hands such a folder to it, found among
    the subclasses, so this room never imports the rooms built on it (``helper/gates/__init__.py`` imports them)."""

    def __init__(self, backend: str = "features", classifier=None, fallback: FeatureClassifier | None = None,
                 scorer=None, table=None, discretizer=None, budget: int | None = None,
                 solved_budget: int | None = None, threshold: float = 0.5, decide_after: str | None = None,
                 trained_on: dict | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: choose one of {', '.join(BACKENDS)}")
        if backend in ("features", "text") and classifier is None:
            raise ValueError(f"backend={backend!r} needs a classifier")
        if backend == "table" and (table is None or discretizer is None):
            raise ValueError("backend='table' needs the solved table (Solution) and its discretizer")
        if solved_budget is None and table is not None:
            solved_budget = table.budget
        super().__init__(budget if budget is not None else solved_budget)
        self.backend = backend
        self.classifier = classifier
        self.fallback = fallback
        self.scorer = scorer
        self.table = table
        self.discretizer = discretizer
        self.solved_budget = solved_budget
        """Which solved table the helper learned from: the budget C it was solved for (``distill --solved-budget``,
        recorded as ``helper.json``'s ``solved_budget``); more budget left is read as this much."""
        if isinstance(threshold, (str, bool)) or not (math.isfinite(float(threshold)) and 0 <= threshold <= 1):
            # NaN compares False with every probability: a gate that never intervenes
            raise ValueError(f"threshold={threshold!r}: give a finite probability in [0, 1].")
        self.threshold = float(threshold)
        self._decision_state(decide_after, scorer, trained_on)
        self.degraded: str | None = None
        """Why decisions run on the fallback although the helper has a PRM (None: they do not)."""
        self.members: dict = {}
        """``{C: (table, discretizer, name)}``: the member each cap plays, chosen on the training folds
        (``helper.solve.select``); a cap not in it plays the backend above."""
        self.member: str | None = None
        """The member this gate plays (None: the backend's own model)."""
        self._plain = (backend, table, discretizer, solved_budget)
        self.guarantee: dict | None = None
        """The success guarantee ``helpgate calibrate`` wrote (``guarantee.json``: target, confidence, the certified
        budget and its calibration success and spend); None where the folder has none."""

    def _decision_state(self, decide_after: str | None, scorer, trained_on: dict | None) -> None:
        """What every gate of a helper folder holds beside its model: the mode (the PRM decides it: its score reads
        the proposal or it does not), the counters ``stats`` reports, and what distill saw."""
        self.decide_after = decide_after or getattr(scorer, "decide_after", "state")
        if self.decide_after not in ("state", "proposal"):
            raise ValueError(f"decide_after={self.decide_after!r}: use 'state' or 'proposal'.")
        self._stats_lock = threading.Lock()
        self._stats = {"decisions": 0, "fallbacks": 0, "score_errors": 0}
        self._warned = False
        self.trained_on = trained_on or {}
        """What distill saw (env, horizon, budget, method): compared with the first use."""
        self.horizon: int | None = self.trained_on.get("horizon")
        """Decision points of the longest training episode (``serve-gate``'s horizon)."""
        self._use_checked = [False]  # a list: gates made by with_budget share it (one warning for all)

    kinds: tuple[str, ...] = ("intervene",)
    """The kinds of help this gate chooses among; a one-kind helper's one is its intervention
    (``helper.gates.tiered_helper_gate.TieredHelperGate`` names several, each at its price)."""

    # -- decision --------------------------------------------------------------------------------
    def choose(self, observation: Observation, budget_left: int | None = None, calls_left: dict | None = None,
               proposal=None) -> str | None:
        """Which help to call here (None: the agent acts). A one-kind helper's answer is ``should_intervene``'s:
        its one kind or None; ``calls_left`` of that kind binds as ``budget_left`` does (every call costs 1)."""
        kind = self.kinds[0]
        if calls_left and kind in calls_left:
            budget_left = int(calls_left[kind]) if budget_left is None else min(int(budget_left), int(calls_left[kind]))
        return kind if self.should_intervene(observation, budget_left, proposal) else None

    def should_intervene(self, observation: Observation, budget_left: int | None = None, proposal=None) -> bool:
        self._check_use(observation)
        return super().should_intervene(observation, budget_left, proposal)

    def _check_use(self, observation: Observation) -> None:
        """Warn once if this use differs from the training data; refuse a meaningless one."""
        if self._use_checked[0]:
            return
        names = self.classifier.feature_names if self.backend == "features" else ()
        text = mismatch(self.trained_on, observation, self.budget, names)
        with self._stats_lock:
            if self._use_checked[0]:
                return
            self._use_checked[0] = True
        if text:
            warnings.warn(text, stacklevel=3)

    def wants(self, observation: Observation, budget_left: int, proposal=None) -> bool:
        return self.intervene_probability(observation, budget_left, proposal) >= self.threshold

    def intervene_probability(self, observation: Observation, budget_left: int, proposal=None) -> float:
        """The backend's P(intervene) at this decision with ``budget_left`` (no budget bookkeeping);
        ``proposal``: the base agent's proposal, read when ``decide_after == "proposal"``."""
        # The classifier never saw more budget than it was solved for; more left acts like that much.
        # (``is not None``: a helper solved for budget 0 clips to 0, it does not skip the clip.)
        left = min(int(budget_left), self.solved_budget) if self.solved_budget is not None else int(budget_left)
        self._check_use(observation)
        self._count("decisions")
        if self.backend == "text":
            from helper.gates.text_classifier import format_input

            text = format_input(observation.state_text, observation.step, observation.horizon, left)
            return float(self.classifier.predict_proba([text])[0])
        score = self._score(observation, proposal)
        if math.isnan(score):
            return self._fallback(observation, left)
        if self.backend == "table":
            step = self.discretizer.table_step([observation.step], [observation.horizon])  # tabular_rl.aligned
            state = self.discretizer.transform([score], step)
            return float(self.table.intervene_prob(step, state, [left])[0])
        row = observation_features(observation, left, score, self.classifier.feature_names)
        return float(self.classifier.predict_proba(row)[0])

    def with_budget(self, budget: int) -> HelperGate:
        """A gate sharing this one's models (PRM, classifiers) and ``stats`` with its own budget: the member chosen
        for that cap where the folder has one (``helper.solve.select``), else the backend's own model."""
        backend, table, discretizer, solved_budget = self._plain
        member = self.members.get(int(budget)) if budget is not None else None
        if member is not None:
            backend, table, discretizer, solved_budget = "table", member[0], member[1], member[0].budget
        gate = HelperGate(backend, self.classifier, self.fallback, self.scorer, table, discretizer,
                          budget, solved_budget, self.threshold, self.decide_after, self.trained_on)
        gate.members, gate._plain, gate.member = self.members, self._plain, None if member is None else member[2]
        gate._stats, gate._stats_lock = self._stats, self._stats_lock
        gate.degraded, gate.horizon, gate.guarantee = self.degraded, self.horizon, self.guarantee
        if budget is None or self.budget is None or budget <= self.budget:
            gate._use_checked = self._use_checked  # a larger budget is a new use, checked on its own
        return gate

    @property
    def unscored(self) -> bool:
        """Whether it decides on its fallback classifier although it reads a PRM score (no PRM loaded)."""
        return self.scorer is None and reads_score(self._plain[0], self.classifier, self.members)

    def stats(self) -> dict[str, int]:
        with self._stats_lock:
            return dict(self._stats)

    # -- internals ---------------------------------------------------------------------------------
    def _count(self, key: str) -> None:
        with self._stats_lock:
            self._stats[key] += 1

    def _score(self, observation: Observation, proposal=None) -> float:
        if self.scorer is None:
            return math.nan
        try:
            if self.decide_after == "proposal":
                return float(self.scorer.score(observation, proposal))
            return float(self.scorer.score(observation))
        except TooManyEpisodes:  # episodes not being ended: the caller's to fix, as the budget's own refusal
            raise
        except Exception as error:  # noqa: BLE001 - any PRM failure must fall back, never stop the agent
            self._count("score_errors")
            if not self._warned:
                self._warned = True
                warnings.warn(f"PRM scoring failed ({error!r}); the helper falls back to its no-score "
                              "classifier for such decisions.", stacklevel=3)
            return math.nan

    def _fallback(self, observation: Observation, left: int) -> float:
        self._count("fallbacks")
        if self.fallback is not None:
            row = observation_features(observation, left, math.nan, self.fallback.feature_names)
            return float(self.fallback.predict_proba(row)[0])
        steps_left = max(int(observation.horizon) - int(observation.step), 1)
        return 1.0 if left >= steps_left else 0.0

    # -- persistence --------------------------------------------------------------------------------
    def save(self, directory: str | Path, prm: str | None = None, extra: dict | None = None) -> Path:
        """Write a helper folder that ``HelperGate.load`` restores.

        ``prm`` is the PRM folder to reference (stored relative to the helper folder when it lies
        inside it, absolute otherwise); ``extra`` goes into ``helper.json`` (training report).
        """
        from trajectories.files import write_json_atomic

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.classifier is not None:
            self.classifier.save(directory / "classifier")
        if self.fallback is not None:
            self.fallback.save(directory / "fallback")
        if self.table is not None:
            self.discretizer.save(directory / "discretizer.json")
            self.table.save(directory / "policy.npz")
        prm_ref = recorded_path(directory, prm) if prm else {"prm": None}
        trained = (extra or {}).get("trained_on") or self.trained_on
        config = {"kind": KIND, "backend": self.backend, "solved_budget": self.solved_budget,
                  "threshold": self.threshold, "decide_after": self.decide_after} | prm_ref
        config |= {"trained_on": trained} if trained else {}
        config |= identity.recorded(trained.get("horizon"), self.classifier, self.fallback, prm) | (extra or {})
        config["classifier_files"] = identity.classifier_files(directory)  # the files just saved, not an older one's
        write_json_atomic(config, directory / CONFIG_FILE)
        return directory

    @classmethod
    def load(cls, directory: str | Path, budget: int | None = None, backend: str | None = None,
             prm: bool | str = True, device: str | None = None, allow_fallback: bool = True) -> HelperGate:
        """Restore a helper folder written by ``helpgate distill``.

        ``budget``: per-episode interventions (default: the largest budget it was trained for).
        ``backend``: override the saved backend (``table`` follows the solved table directly).
        ``prm``: False skips the PRM (every decision takes the fallback), a path loads that PRM
        instead of the one the folder names (the caller's choice: its fingerprint is not compared).
        ``allow_fallback``: a recorded PRM that is missing or does not load degrades to the
        fallback with a warning (True) or raises ``UntrustedPrm`` (False).
        """
        directory = Path(directory)
        config_path = directory / CONFIG_FILE
        if not config_path.exists():
            raise FileNotFoundError(f"{config_path}: not found. Create the helper folder with `helpgate distill`.")
        config = stored_config.renamed(read_json_object(config_path, "helpgate distill", "re-run `helpgate distill`"),
                                       CONFIG_FILE, config_path)
        if config.get("kind") != KIND:
            raise ValueError(f"{config_path}: kind={config.get('kind')!r}, expected {KIND!r}")
        stored_values.check(config_path, config)  # before any file of the folder is loaded
        owner = folder_owner(config.get("backend"))
        if owner is not None:  # a subclass's folder (several kinds of help, each at its price: tiered_gate)
            if backend not in (None, owner.folder_backends[0], config["backend"]):
                raise ValueError(f"backend={backend!r}: {config_path} is a tiered helper (kinds "
                                 f"{config.get('kinds')}); leave the backend out, or play its table: "
                                 f"{owner.folder_backends[0]}.")
            return owner.load_folder(directory, config, budget, prm, device, allow_fallback, backend)
        if not (backend or config.get("backend")):
            raise ValueError(f"{config_path}: no 'backend' field (features, text or table); re-run `helpgate distill`.")
        backend_override, backend = backend, backend or config["backend"]
        classifier = fallback = table = discretizer = None
        if backend == "features":
            classifier = FeatureClassifier.load(directory / "classifier")
        elif backend == "text":
            from helper.gates.text_classifier import TextClassifier

            classifier = TextClassifier.load(directory / "classifier", device=device)
        if (directory / "fallback").exists():
            fallback = FeatureClassifier.load(directory / "fallback")
        if (directory / "policy.npz").exists():
            from tabular_rl import Discretizer, Solution

            discretizer = Discretizer.load(directory / "discretizer.json")
            table = Solution.load(directory / "policy.npz", discretizer)
        from helper.gates.member_files import load_members

        members = load_members(directory) if backend_override is None else {}
        identity.check_files(config_path, config, classifier, fallback)
        missing = identity.missing_fields(config)
        if missing:
            warnings.warn(f"{config_path} records no {', '.join(missing)} (written by an older helpgate): loaded "
                          "without those checks. Re-run `helpgate distill` to record them.", stacklevel=2)
        prm_path = prm if isinstance(prm, str) else resolve_recorded(directory, config, "prm")
        needs_score = reads_score(backend, classifier, members)
        scorer, degraded = folder_scorer(prm_path if needs_score else None, prm,
                                         device, config_path, config, allow_fallback, "fallback classifier")
        decide_after = config.get("decide_after", "state")
        if scorer is not None and scorer.decide_after != decide_after:
            raise ValueError(f"{config_path}: decide_after={decide_after!r}, but the PRM at {prm_path} was trained "
                             f"with tag_after={scorer.tag_after!r}; load the PRM the helper was distilled with.")
        gate = cls(backend, classifier, fallback, scorer, table, discretizer, budget, config.get("solved_budget"),
                   config.get("threshold", 0.5), decide_after, config.get("trained_on"))
        gate.degraded = degraded
        gate.horizon = identity.horizon_of(config)
        gate.guarantee = _guarantee(directory, on_fallback=needs_score and scorer is None)
        gate.members = members
        return gate.with_budget(gate.budget) if gate.budget in members else gate

    def __repr__(self) -> str:
        return (f"HelperGate(backend={self.backend!r}, budget={self.budget}, solved_budget={self.solved_budget}, "
                f"prm={'yes' if self.scorer is not None else 'no'}, decide_after={self.decide_after!r})")


def reads_score(backend: str, classifier, members: dict) -> bool:
    """Whether a helper's decisions read the PRM score: a member or the table plays it, or the classifier reads it."""
    return bool(members) or backend == "table" or SCORE_FEATURE in getattr(classifier, "feature_names", ())


def recorded_path(directory: str | Path, path: str | Path, key: str = "prm") -> dict[str, str]:
    """How a helper folder records a folder it depends on: relative to itself, so a run folder moved
    or copied whole keeps working, and absolute as a second try for a helper folder moved alone."""
    target = Path(path).resolve()
    relative = os.path.relpath(target, Path(directory).resolve())
    return {key: relative, f"{key}_absolute": str(target)}


def resolve_recorded(directory: str | Path, config: dict, key: str = "prm") -> str | None:
    """The recorded folder ``key`` of a helper folder: the relative path if it exists, else the
    absolute one, else the relative one (so the caller's message names where it was expected)."""
    recorded = config.get(key)
    if not recorded:
        return None
    first = Path(os.path.normpath(Path(directory) / recorded))  # an absolute `recorded` stays as it is
    candidates = [first] + ([Path(config[f"{key}_absolute"])] if config.get(f"{key}_absolute") else [])
    return str(next((c for c in candidates if c.exists()), first))


def _guarantee(directory: Path, on_fallback: bool = False) -> dict | None:
    """The folder's ``guarantee.json`` when it measured these helper files deciding as this gate does (on the PRM's
    score, or on the fallback classifier: ``on_fallback``); one that measured others, or that cannot be read, is
    ignored with a one-line warning naming the file (a re-distilled helper needs a new calibration)."""
    from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint, read_guarantee

    path = directory / GUARANTEE_FILE
    try:
        record = read_guarantee(directory)
    except (ValueError, OSError) as error:
        warnings.warn(f"{error} Going on without a guarantee.", stacklevel=3)
        return None
    if record is not None and record.get("helper_fingerprint") != helper_fingerprint(directory):
        warnings.warn(f"{path} was calibrated on other helper files (helper_fingerprint differs); "
                      "it is ignored. Re-run `helpgate calibrate`.", stacklevel=3)
        return None
    if record is not None and bool(record.get("fallback")) != on_fallback:
        how = ("on the fallback classifier (no PRM), and this gate reads its PRM" if record.get("fallback") else
               "with its PRM, and this gate decides on its fallback classifier (no PRM score)")
        warnings.warn(f"{path} was certified {how}: it does not cover this gate and is ignored. Re-run "
                      "`helpgate calibrate` on the gate you serve.", stacklevel=3)
        return None
    return record


class _Unloadable(Exception):
    """A recorded PRM folder that is missing or does not load (its message names the folder)."""


def _load_scorer(path: str, device: str | None, config_path: Path, config: dict | None):
    """The PRM scorer at ``path``; its fingerprint is compared with ``config``'s (None: not compared)."""
    from prm.scoring.scorer import PrmScorer

    if not (Path(path) / "prm_config.json").exists():
        raise _Unloadable(f"could not load the PRM at {path} (no prm_config.json there)")
    if config is not None:
        identity.check_prm(config_path, config, path)  # before loading: a wrong PRM is never run
    try:
        from prm.verifiers.load import load_prm

        return PrmScorer(load_prm(path, device=device, merge_lora=True))
    except Exception as error:  # noqa: BLE001 - a broken PRM degrades to the documented fallback
        raise _Unloadable(f"could not load the PRM at {path} ({error})") from error
