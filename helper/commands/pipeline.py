"""``helpgate pipeline``: collect → PRM train → score → solve → distill → sweep, in one folder.

    helpgate pipeline --out runs/demo            # embedded defaults: 12.8 min on an idle 2-core CPU
    helpgate pipeline --out runs/demo --quick    # a first look, about 4 min
    helpgate pipeline --out runs/demo --decide-after state      # the gate decides before the agent proposes

Every stage writes its own sub-folder of ``--out`` and is an ordinary command of its own
(``helpgate collect|prm train|prm score|solve|distill|sweep``), so any stage can be re-run alone
on the same folder. A finished stage leaves ``<stage>/.done``; running the pipeline again skips
finished stages (``--redo`` runs them all again), so a killed pipeline resumes where it stopped; run
with other settings, a finished stage they would change is refused in one line (``helper.commands.resume``).
Each finished stage is also recorded in ``<out>/provenance.json`` (command line, commit, machine,
start time, wall time: ``helper.provenance``).

With a plug-in environment the PRM's target and pooling and the solve's binning default to ``auto``: the prm
stage first tries every candidate on the training collection's folds (``helper.commands.choose``: out-of-fold PRM
scores, then the solve cross-validated over the same folds) and keeps the one whose held-out success is highest;
the choice and every candidate's figure go to ``<out>/choose/choice.json`` and ``pipeline.json``'s ``choice``.

``--cross-fit K`` (ProductQA): every group of the data a test group once, from one collection: per fold an ordinary
run of these stages in ``<out>/fold{k}/`` on the other folds' groups, and the folds' sweeps pooled in
``<out>/sweep/`` (``helper.commands.cross_fit``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from agile.budget import largest_budget
from helper.commands.resume import STAGES, forget_finished, stale_stage
from helper.data.environment import ENV_FIELD, EnvSpec
from helper.provenance import write_stage
from helper.stored_config import flat
from trajectories.files import write_json_atomic

__all__ = ["STAGES", "PipelineConfig", "run"]


@dataclass
class PipelineConfig:
    out: str = "runs/demo"
    """Folder that receives every stage's files."""
    quick: bool = False
    """A first look: fewer episodes, smaller budgets (about 4 minutes on a 2-core CPU: 3.7 measured on ProductQA's
    executor)."""
    spec: ENV_FIELD = field(default_factory=lambda: EnvSpec(agent="smollm2", questions_per_episode=4))
    """The environment and its actors (``EnvSpec``; its fields are flags of their own: --env, --agent, --data,
    ...), the same for collection (train split) and the sweep (test split)."""
    episodes: int | None = None
    """Training episodes to collect (default: 64, 960 on TextWorld, or 16 with --quick)."""
    eval_episodes: int | None = None
    """Held-out episodes per method and budget in the sweep (default: 16, or 8 with --quick)."""
    budgets: list[int] | None = None
    """Intervention budgets C per episode the helper is solved for; collection runs with the largest, and the
    sweep plays C = 0 and each of them. Default: 1 up to always-intervene's interventions
    (agile.budget.largest_budget: questions per episode for ProductQA; for TextWorld collection and solve go
    up to the longest quest and the sweep up to always-intervene's mean interventions)."""
    prm_model: str = "smollm2"
    """Backbone of the process reward model (the embedded SmolLM2, 'tiny', a HF id or a folder), or encoder[:NAME]:
    a cross-encoder fine-tuned whole (the embedded all-MiniLM-L6-v2, or a local encoder folder)."""
    prm_lora: bool = False
    """Train LoRA adapters on the PRM's causal backbone with its head, one copy per fold (see `prm train --lora`)."""
    decide_after: Literal["state", "proposal"] | None = None
    """When the helper (and every score-reading baseline) decides: before the base agent acts (state), or
    after reading its proposal (proposal: the agent proposes first, the PRM's tag goes after the proposal,
    and a kept proposal is played). Default: proposal for ProductQA, where a question's proposal is a cheap
    call of the base agent next to a human's answer and says most about the agent's mistake; state for
    TextWorld and plug-in environments (a move's proposal says little before its outcome). Pass state where
    the base agent costs as much as the help."""
    prm_target: Literal["soft", "hard", "process", "proposal", "fatal", "mc", "auto"] | None = None
    """PRM training label (see `helpgate prm train --target`), or auto: chosen on the training folds
    (helper.commands.choose). Default: with --decide-after proposal, proposal (was the proposal right?);
    otherwise ProductQA scores each question on its own, so process (will the base agent answer this one
    right?); TextWorld: soft (the episode's Monte-Carlo success from this prefix); a plug-in environment: auto."""
    prm_layers: int | None = None
    """Keep only the first this many backbone layers for the PRM's features (0: all of them).
    Default: 8 for the embedded SmolLM2 (a quarter of its 30 layers, a quarter of the cost), all otherwise."""
    prm_state_features: bool | None = None
    """The PRM's head also reads the environment's state features (prm train --state-features: progress, steps since
    progress, steps left, ...), which mean the same in every game. Default: on for TextWorld, where the text alone
    does not rank held-out games (benchmarks/RESULTS.md); for a plug-in environment whose observations carry
    features, chosen on the training folds with the target, pooling and bins (with and without); off elsewhere."""
    prm_hidden: bool | None = None
    """The PRM's head reads the backbone's hidden state (prm train --no-hidden turns it off: the head then reads only
    the signals and state features). Default: off for TextWorld, where the text ranks held-out games below chance
    and the state features alone rank them best (benchmarks/RESULTS.md); on elsewhere."""
    prm_proposal_features: bool = False
    """The PRM's head also reads the proposal's visible form (prm train --proposal-features: whether it searched,
    found rows, answered yes / no / an id, the question's phrasing, ...), the same in every product group. With
    --prm-hidden False it reads only those and the agent's signals, with no backbone pass: on shared ProductQA's
    train groups, out of fold by group, 0.765 against the default's 0.736 (three seeds; benchmarks/RESULTS.md)."""
    prm_word_features: bool | None = None
    """The PRM's head reads the state text's words alone (prm.inputs.words; with the step targets). Default: on a
    plug-in environment left to choose, the training folds try it beside the backbone's heads."""
    prm_fold_mean: bool = False
    """The gate's PRM head is the mean of the fold heads that wrote the training rows' scores (prm train
    --fold-mean), not one head fitted on every episode: new steps are scored on the scale the solve's cells and the
    thresholds' levels were set on."""
    prm_evidence_features: bool = False
    """The PRM's head also reads the proposal checked against the record (prm train --evidence-features: the
    product details, schema values and memory the sentence encoder retrieves for the question, against the
    answer or the SQL; benchmarks/RESULTS.md, the evidence verifier)."""
    prm_question_vector: bool = False
    """The PRM's head also reads the sentence encoder's vector of the question (prm train --question-vector)."""
    prm_pooling: Literal["last", "mean", "auto"] | None = None
    """The PRM's step feature: the hidden state at the step's tag (last), its mean over the step's tokens, or
    auto (chosen on the training folds). Default: auto for a plug-in environment, else last."""
    prm_folds: int | None = None
    """PRM folds: training rows get out-of-fold scores (1: a held-out split, and training rows get
    the in-sample scores of the head fitted on them; for the ablation only). Default: 5, or 3 with
    --quick (its 16 episodes leave three or four per fold at 5)."""
    bins: int = 6
    """PRM-score bins of the tabular MDP."""
    binning: Literal["quantile", "uniform", "supervised", "auto"] | None = None
    """How the bins are cut (helpgate solve --binning): equal-count, equal-width, where the agent's own step
    outcome changes (supervised), or auto (chosen on the training folds). Default: auto for a plug-in
    environment, else quantile."""
    counterfactual: bool = False
    """Collect with cloned branches at every decision (collect --counterfactual: the base agent / an intervention
    here, then the base agent alone), which the mc target learns from; costs about horizon + 1 times the agent
    calls of a plain collection."""
    solve_time_axis: str = "start"
    """Count each episode's steps from its start or its end (solve --time-axis, an experiment's option)."""
    solve_pessimism: float = 0.0
    """Standard errors of its estimated own gain an intervention must clear (solve --pessimism, an experiment's option):
    an intervention whose gain rests on thin data is not taken. 0: the point estimates."""
    rl_use_prm: bool = False
    """Give the online_rl baseline the PRM score too: one PRM pass per training decision, which
    with an LLM backbone costs more than the rest of the pipeline on a CPU."""
    backend: Literal["features", "text"] = "features"
    """Helper classifier: gradient boosting on features, or a sequence classifier on the state text."""
    methods: list[str] | None = None
    """Methods of the sweep stage (default: all, less online_rl with an LLM agent; see `helpgate sweep --help`).
    Fewer methods, a shorter sweep: for an ablation that changes only some of them."""
    help_kinds: list[str] = field(default_factory=list)
    """Several kinds of help, each NAME:PRICE or NAME=ACTOR:PRICE (e.g. compute:1 stronger=runs/sft/model:2 human:4;
    who answers each: collect --help-kinds): the
    helper then chooses which to call, --budgets are costs per episode in the unit of the prices (required), and the
    sweep plays it against one helper per kind, a cascade and a random kind (helper.evaluation.tiered_sweep). A cap
    on a kind's calls: run the stages one by one (collect and solve take --help-caps)."""
    seed: int = 0
    """Seed of collection (evaluation uses seed + 1000 on the test groups)."""
    cross_fit: int | None = None
    """Folds of product groups (ProductQA): one collection over every group of the data's train/ and test/, then per
    fold the PRM, solve, distill and sweep on the other folds' groups, the sweep on the fold's own (--eval-episodes
    per fold); the folds' sweeps pooled in <out>/sweep (helper.commands.cross_fit). Default: 4 for ProductQA, 0 with
    a quick run and elsewhere; 0: the data's own train / test split."""
    redo: bool = False
    """Run every stage again even if its folder is marked finished."""

    def check_kinds(self) -> None:
        """Refuse, in one line, what a run with several kinds of help cannot do (before anything is written)."""
        if not self.help_kinds:
            return
        if not self.budgets or not any(b > 0 for b in self.budgets):
            raise ValueError("--help-kinds: give the cost budgets per episode to solve for, in the unit of the prices, "
                             "e.g. --budgets 2 4 8")
        if self.cross_fit:
            raise ValueError(f"--cross-fit {self.cross_fit} with --help-kinds: a run with several kinds of help uses "
                             "the data's own train / test split; pass --cross-fit 0")
        if self.backend != "features":
            raise ValueError(f"--backend {self.backend} with --help-kinds: the helper that chooses among kinds is "
                             "distilled with --backend features")

    def fold_count_cross_fit(self) -> int:
        """``cross_fit``, or its default for this environment (none with --quick or --help-kinds)."""
        if self.cross_fit is not None:
            return int(self.cross_fit)
        return 0 if self.quick or self.help_kinds else self.spec.kind.cross_fit_folds

    def decide_mode(self) -> str:
        """``decide_after``, or its default for this environment."""
        return self.decide_after or self.spec.kind.decide_after

    def prm_target_name(self) -> str:
        if self.prm_target:
            return self.prm_target
        if self.decide_mode() == "proposal":
            return "proposal"
        if self.spec.kind.question_sessions:
            return "process"
        return "auto" if self.spec.plugin else "soft"

    def pooling_name(self) -> str:
        """``prm_pooling``, or its default: auto for a plug-in environment (an encoder has one), else last."""
        from prm.verifiers.backbones import is_encoder

        if self.prm_pooling:
            return self.prm_pooling
        return "auto" if self.spec.plugin and not is_encoder(self.prm_model) else "last"

    def binning_name(self) -> str:
        """``binning``, or its default: auto for a plug-in environment, else quantile."""
        return self.binning or ("auto" if self.spec.plugin else "quantile")

    def chooses(self) -> bool:
        """Whether the target, the pooling or the binning is left to the training folds."""
        return "auto" in (self.prm_target_name(), self.pooling_name(), self.binning_name())

    def prm_layer_count(self) -> int | None:
        from prm.verifiers.backbones import is_encoder

        if is_encoder(self.prm_model):
            return None  # an encoder is fine-tuned whole
        if self.prm_layers is None:
            return 8 if self.prm_model == "smollm2" else None
        return self.prm_layers or None

    def prm_train_config(self, trajectories, out, **changes):
        """The PRM stage's ``prm train`` settings (``changes`` override fields, for ablations)."""
        from prm.training import train as prm_train

        target = changes.pop("target", self.prm_target_name())
        settings = prm_train.TrainConfig(**{**dict(
            # The gate scores a decision before the action is taken: the tag goes after the state, or
            # after the base agent's proposal when the gate reads it.
            data=str(trajectories), out=str(out), model=self.prm_model, head="value", tag_after=self.decide_mode(),
            target=target,
            # A process (fatal) label is the base agent's own correctness (survival) at that step; rows where
            # the human answered say nothing about it.
            base_only=target in ("process", "fatal"),
            seed=self.seed, device=self.spec.device, layers=self.prm_layer_count(), folds=self.fold_count(),
            state_features=self.state_features(), hidden=self.hidden_inputs() and not self.prm_word_features,
            proposal_features=self.prm_proposal_features,
            evidence_features=self.prm_evidence_features, question_vector=self.prm_question_vector,
            pooling=self.pooling_name(), fold_mean=self.prm_fold_mean, word_features=bool(self.prm_word_features),
            lora=self.prm_lora,
        ), **changes})
        if "auto" in (settings.target, settings.pooling):
            raise ValueError("prm_train_config: resolve --prm-target / --prm-pooling auto first (helper.commands.choose)")
        return settings

    def hidden_inputs(self) -> bool:
        if self.prm_hidden is not None:
            return self.prm_hidden
        return self.spec.kind.prm_hidden

    def state_features(self) -> bool:
        if self.prm_state_features is not None:
            return self.prm_state_features
        return self.spec.kind.prm_state_features

    def chooses_state_features(self) -> bool:
        """Whether the training folds choose if the PRM reads the state features: a plug-in environment, left to
        choose, its verifier a causal backbone (the features feed the value head beside its hidden state)."""
        from prm.verifiers.backbones import is_encoder

        return (self.prm_state_features is None and self.spec.plugin and self.chooses()
                and not self.prm_lora and not is_encoder(self.prm_model))

    def chooses_word_features(self) -> bool:
        """Whether the training folds may choose a head on the state text's words alone (``prm.inputs.words``),
        beside the backbone's: a plug-in environment left to choose its verifier (a built-in env's text is the
        agent's long context, where a word says little), the value head on a frozen causal backbone."""
        from prm.verifiers.backbones import is_encoder

        return (self.spec.plugin and self.chooses() and self.prm_hidden is None and self.prm_state_features is None
                and self.prm_word_features is None and not self.prm_lora and not is_encoder(self.prm_model))

    def fold_count(self) -> int:
        return self.prm_folds if self.prm_folds is not None else (3 if self.quick else 5)

    def sizes(self) -> tuple[int, int]:
        train = self.episodes or (16 if self.quick else self.spec.kind.train_episodes)
        held_out = self.eval_episodes or (8 if self.quick else 16)
        return train, held_out


def _stage(out: Path, name: str, redo: bool, work) -> None:
    marker = out / name / ".done"
    if marker.exists() and not redo:
        print(f"[pipeline] {name}: already finished ({marker}), skipping")
        return
    print(f"\n[pipeline] === {name} ===", flush=True)
    started, start = time.time(), time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    write_json_atomic({"seconds": round(seconds, 2)}, marker)
    write_stage(out, name, started, seconds)
    print(f"[pipeline] {name}: {seconds:.1f} s", flush=True)


def _horizon(cfg: PipelineConfig) -> int:
    """The most interventions always-intervene uses in an episode: every question of a ProductQA
    session; in TextWorld the expert wins in the quest's length of moves, so the longest quest; a
    plug-in environment's longest horizon among the training episodes it builds."""
    from helper.data.plugins import PluginSource

    spec = cfg.spec
    if spec.plugin:
        source = PluginSource(spec.env, "train")
        source.episodes(range(cfg.sizes()[0]), cfg.seed)
        return source.max_horizon
    return spec.kind.most_interventions(spec)


def _solved_budgets(cfg: PipelineConfig) -> list[int] | None:
    """``--budgets`` checked, sorted, without 0 (the sweep adds never's C = 0 by itself); None: the default."""
    if cfg.budgets is None:
        return None
    solved = sorted({int(c) for c in cfg.budgets if c != 0})
    if not solved or solved[0] < 0:
        raise ValueError(f"budgets={cfg.budgets}: give one or more budgets >= 1 to solve for, e.g. --budgets 1 2 3, "
                         "or leave them out for 1 up to always-intervene's interventions.")
    return solved


def solved_budgets(cfg: PipelineConfig) -> list[int]:
    """The budgets the helper is solved for: ``--budgets`` less 0, else 1 up to always-intervene's interventions."""
    return _solved_budgets(cfg) or list(range(1, largest_budget(_horizon(cfg)) + 1))


def collect_stage(cfg: PipelineConfig, out: Path, budget: int) -> None:
    """The collect stage: ``<out>/trajectories`` from the train split, with ``budget`` (the largest solved)."""
    from helper.data import collect
    from helper.data.plugins import AGENT_GROUP, is_plugin

    spec = cfg.spec
    llm = spec.agent != "simulator"
    # Collection names an LLM base agent as llm + its --model (the manifest records it so).
    collect_agent = spec.agent if is_plugin(spec.agent, AGENT_GROUP) else ("llm" if llm else "simulator")
    config = collect.CollectConfig(
        spec=replace(spec, agent=collect_agent), split="train", model=spec.agent,
        explore_p=[0.0, 0.2, 0.4, 0.6], episodes=cfg.sizes()[0], budget=budget,
        seed=cfg.seed, out=str(out / "trajectories"), shard_size=16, decide_after=cfg.decide_after,
        counterfactual=cfg.counterfactual, help_kinds=list(cfg.help_kinds),
    )
    _stage(out, "collect", cfg.redo, lambda: collect.run(config))


def run(cfg: PipelineConfig, collected=None, feature_cache: str | None = None) -> dict:
    """Every stage in ``cfg.out``; ``collected``: the collect stage's work instead of a collection (cross-fitting
    writes a fold's training rows from the shared collection); ``feature_cache``: a frozen-backbone feature cache
    shared with other runs of the same rows (cross-fitting's folds: each episode's features computed once)."""
    from helper.commands.choose import choose, load_choice
    from helper.evaluation import sweep
    from helper.solve import distill, solve_command
    from prm.scoring import score as prm_score
    from prm.training import train as prm_train
    from prm.verifiers.backbones import check_backbone, is_encoder

    cfg.check_kinds()
    cfg = replace(cfg, decide_after=cfg.decide_mode(), cross_fit=cfg.fold_count_cross_fit())
    check_backbone(cfg.prm_model, "--prm-model")  # before collection, not after it
    if cfg.prm_lora and is_encoder(cfg.prm_model):
        raise ValueError(f"--prm-lora with --prm-model {cfg.prm_model}: an encoder is fine-tuned whole; "
                         "drop --prm-lora.")
    cfg = replace(cfg, spec=replace(cfg.spec, agent_dtype=cfg.spec.resolved_dtype()))
    spec = cfg.spec
    spec.check()  # an unknown env or agent is refused before pipeline.json is written (a rerun would be held to it)
    solved = _solved_budgets(cfg)
    if cfg.prm_target == "mc" and not cfg.counterfactual:
        raise ValueError("--prm-target mc learns from the cloned branches of each decision; add --counterfactual "
                         "(episodes that can be cloned), or use --prm-target fatal.")
    if "decoding" in spec.kind.fields and spec.agent == "smollm2" and spec.decoding == "free":
        # An env that reads --decoding has its LLM agent write the executor's turns (ProductQA).
        # Measured: 0 of 135 base-agent answers right on ../shared/productqa (it writes questions, not calls).
        print("[pipeline] note: the untuned SmolLM2 rarely writes AGILE's function calls, so its answers may all be "
              "wrong and the PRM stage then refuses; pass --agent with an SFT model folder (`helpgate agile sft`).",
              flush=True)
    out = Path(cfg.out)
    stale = None if cfg.redo else stale_stage(out, cfg)
    if stale:
        raise ValueError(stale)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.redo:  # the old stages' markers go before the new settings are written (helper.commands.resume)
        forget_finished(out)
    write_json_atomic(flat(cfg), out / "pipeline.json")
    if cfg.cross_fit:
        from helper.commands import cross_fit

        return cross_fit.run(cfg, sys.modules[__name__])
    n_train, n_eval = cfg.sizes()
    llm = spec.agent != "simulator"
    trajectories = str(out / "trajectories")
    solved = solved_budgets(cfg)
    top = max(solved, default=0)
    rl_steps = max(1, n_train * (top + 1) // 2 // (2 if cfg.quick else 1))

    if collected is None:
        collect_stage(cfg, out, top)
    else:
        _stage(out, "collect", cfg.redo, collected)

    def train_prm() -> None:
        # Left to choose: every candidate tried on the training folds first; the chosen PRM then reads the
        # chosen pooling's cached features (no second backbone pass).
        changes = {"feature_cache": feature_cache} if feature_cache else {}
        if cfg.chooses():
            choice = choose(cfg, trajectories, out / "choose", solved)
            changes = dict(target=choice["target"], pooling=choice["pooling"],
                           state_features=choice.get("state_features", cfg.state_features()),
                           feature_cache=str(out / "choose" / f"features-{choice['pooling']}.npz"))
            if choice.get("word_features"):  # a head on the state's words alone (prm.inputs.words)
                changes.update(word_features=True, hidden=False)
        prm_train.run_train(cfg.prm_train_config(trajectories, out / "prm", **changes))

    _stage(out, "prm", cfg.redo, train_prm)
    binning = cfg.binning_name()
    if cfg.chooses():
        choice = load_choice(out / "choose")
        binning = choice["binning"]
        write_json_atomic(flat(cfg) | {"choice": choice}, out / "pipeline.json")
    _stage(out, "score", cfg.redo, lambda: prm_score.run_score(prm_score.ScoreConfig(
        data=trajectories, model=str(out / "prm"), device=spec.device,
    )))
    methods = sweep_methods(cfg, llm_agent(spec))
    _stage(out, "solve", cfg.redo, lambda: solve_command.run(solve_command.SolveConfig(
        data=trajectories, budgets=solved, bins=cfg.bins, binning=binning, pessimism=cfg.solve_pessimism,
        time_axis=cfg.solve_time_axis, kinds=list(cfg.help_kinds) or None,
        out=str(out / "solve"),
    )))
    _stage(out, "distill", cfg.redo, lambda: distill.run(distill.DistillConfig(
        labels=str(out / "solve"), prm=str(out / "prm"), out=str(out / "helper"), backend=cfg.backend,
        solved_budget=top, seed=cfg.seed, device=spec.device,  # the largest solved: its table holds every b <= top
    )))
    _stage(out, "sweep", cfg.redo, lambda: sweep.run(sweep.SweepConfig(
        spec=spec, helper=str(out / "helper"), out=str(out / "sweep"),
        # Given budgets: never's C = 0 and each of them; else the sweep's own default range.
        budgets=None if cfg.budgets is None else sorted({0, *solved}),
        split="test", episodes=n_eval, seed=cfg.seed + 1000, train_data=str(out / "solve"),
        decide_after=cfg.decide_after, methods=methods,
        random_rounds=3 if cfg.quick else 8,  # a first look matches random's spend more loosely
        # The online-RL baseline plays training episodes. With an LLM agent it plays at most as many
        # as the offline collection did (equal interaction with the environment; it is the slow part
        # on a CPU), half as many with --quick: a timestep is a decision with budget left, so an
        # episode of budget C has at least C of them, (top + 1) / 2 on average. A few PPO
        # updates and two small learning-curve points (start, end). With the simulator it trains
        # until its curve flattens.
        rl_timesteps=rl_steps if llm else (8192 if cfg.quick else 60_000),
        rl_n_steps=max(4, rl_steps // 16) if llm else 256,
        rl_eval_every=rl_steps if llm else (2048 if cfg.quick else 4096),
        rl_val_episodes=(2 if cfg.quick else 4) if llm else (64 if cfg.quick else 128),
        rl_use_prm=cfg.rl_use_prm,
    )))
    summary_path = out / "sweep" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    print(f"\n[pipeline] done: every stage's files are in {out}/ "
          f"(sweep table: {out / 'sweep' / 'sweep.csv'}, plot: {out / 'sweep' / 'sweep.png'})")
    return summary


def llm_agent(spec: EnvSpec) -> bool:
    """Whether the base agent is an LLM (local or behind an endpoint), not the simulator or a plug-in's agent."""
    from helper.data.plugins import AGENT_GROUP, is_plugin

    return not (spec.plugin or spec.agent == "simulator" or is_plugin(spec.agent, AGENT_GROUP))


def sweep_methods(cfg: PipelineConfig, llm: bool) -> list[str]:
    """The sweep's methods: ``--methods``, else every method, less ``online_rl`` with an LLM agent."""
    from helper.evaluation import sweep

    methods = list(cfg.methods or sweep.METHODS)
    if cfg.methods is None and llm and "online_rl" in methods:
        # An online learner given the pipeline's interaction (its training episodes, 120 decisions) learns nothing
        # with an LLM agent (the main job's fold 0: validation success 0.438 before and after, its rows equal
        # first_k's) and costs half the sweep (206 of 398 s): not a baseline at full strength, so not a default.
        # At full strength it is benchmarks/setups/online_rl_curve.py; --methods ... online_rl plays it here.
        methods.remove("online_rl")
        print("[pipeline] an LLM agent: online_rl is left out of the sweep (name it in --methods to play it)")
    return methods
