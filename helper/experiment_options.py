"""Which config fields serve an experiment (a measurement, an ablation, a rejected idea), not the product.

They stay fields of the product's config dataclasses with their defaults, so a run folder stored by an older
release (``pipeline.json``, a sweep's ``summary.json``) still reads, and keyword arguments in Python still take
them. Only the command line differs: ``helpgate`` hides them (``command_view``) and refuses one in one line naming
the experiments' entry (``experiment_flag``); ``python benchmarks/experiment.py CMD ...`` parses the same configs
with every field shown. ``EXPERIMENT_OPTIONS`` is the one list, by the class that declares each field.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable

EXPERIMENT_ENTRY = "python benchmarks/experiment.py"
"""The command that parses a command's config with its experiment options shown (same subcommands)."""

SIMULATOR = "a simulator's research knob"
ABLATION = "an ablation"
MEASURED = "measured, not the product's default (benchmarks/RESULTS.md)"
TUNING = "a tuning knob of the benchmarks' runs; the default is what the product runs"
BASELINE = "a knob of a baseline the sweep measures against"
DIAGNOSTIC = "a diagnostic of a measurement"
SUBSET = "a subset of the groups: a measurement's (the product uses every group of the split)"
_ENV_SPEC = {
    "sim_accuracy": SIMULATOR, "memory_boost": SIMULATOR, "tw_sim_p": SIMULATOR,
    "gold_features": ABLATION + ": a deployed agent never has the question type",
    "tw_quest_length_feature": ABLATION + ": a generator setting a deployed agent does not know",
    "restate_question": ABLATION + " of the executor's prompt",
    "list_advice_with_gate": ABLATION + " of the executor's prompt",
    "yes_no_threshold": "an executor research knob, used in no run",
    "consistency_samples": MEASURED + ": it lowered the PRM",
    "memory": MEASURED + ": lexical retrieval against AGILE's embeddings", "max_new_tokens": TUNING,
    "tw_rooms": "a TextWorld benchmark set-up", "tw_objects": "a TextWorld benchmark set-up",
    "tw_games": "a TextWorld benchmark set-up", "tw_quest_lengths": "a TextWorld benchmark set-up",
}
_PRM_INPUTS = {"proposal_features": MEASURED, "evidence_features": MEASURED + " (the evidence verifier)",
               "question_vector": MEASURED, "state_features": MEASURED + "; on by default for TextWorld",
               "hidden": MEASURED + "; off by default for TextWorld", "pooling": MEASURED, "signals": ABLATION,
               "fold_mean": MEASURED + " (the arithmetic chain)",
               "word_features": "chosen by the pipeline's training folds on a plug-in env (prm.inputs.words)"}
_SFT_TUNING = ("micro_batch_size", "lora_alpha", "lora_dropout", "max_grad_norm", "cpu_threads", "save", "weight_decay",
               "log_every", "max_steps", "data_file", "batch_size", "advice_share")
_PPO_TUNING = ("micro_batch_size", "lora_alpha", "max_grad_norm", "cpu_threads", "save", "max_new_tokens",
               "update_epochs", "minibatch_size", "rollout_batch_size", "max_turns", "temperature", "lora_layers",
               "gamma", "lam", "value_clip_eps", "whiten_advantages", "similarity_threshold", "stop_when_flat",
               "flat_tolerance")
_EXECUTOR_ABLATIONS = {"restate_question": ABLATION + " of the executor's prompt",
                       "list_advice_with_gate": ABLATION + " of the executor's prompt",
                       "yes_no_threshold": "an executor research knob, used in no run"}
_RAY = {"ray_address": TUNING + " (Ray's own default: the running cluster)", "ray_workers": TUNING}
EXPERIMENT_OPTIONS: dict[str, dict[str, str]] = {
    # class name -> field -> why it is an experiment's (a field is looked up through the class's bases)
    "EnvSpec": _ENV_SPEC,
    "EnvConfig": {"agent_seed": "a measurement's second seed (the base agent's draws)",
                  "split": "episodes of the training split: a measurement's (the product plays held-out ones)"},
    "PipelineConfig": {**{f"prm_{name}": why for name, why in _PRM_INPUTS.items()
                          if name != "signals"},
                       "prm_lora": MEASURED, "prm_folds": ABLATION + " only",
                       "counterfactual": "records the mc target's branches",
                       "rl_use_prm": BASELINE, "solve_pessimism": TUNING, "solve_time_axis": MEASURED,
                       "binning": MEASURED, "prm_layers": MEASURED + ": 8 of SmolLM2's 30, a quarter of the cost",
                       "bins": TUNING,
                       "backend": "not measured: the sweep plays the members the training folds chose (distill "
                                  "--backend is the user's)"},
    "CollectConfig": {"counterfactual": "records counterfactual outcomes for measurements", **_RAY,
                      "model": "a second spelling of --agent MODEL (--agent llm --model MODEL)"},
    "TrainConfig": {**_PRM_INPUTS, "head": MEASURED + ": the tag head", "base_only": ABLATION, "group_by": DIAGNOSTIC,
                    "feature_cache": "to try other targets or heads", "bins": DIAGNOSTIC, "head_steps": TUNING,
                    "history": MEASURED, "lora_dropout": TUNING, "lora_alpha": TUNING, "success_threshold": TUNING,
                    "max_episodes": "for quick measurements", "val_fraction": ABLATION + " (--folds 1)", "l2": TUNING,
                    "calibration": MEASURED, "head_lr": TUNING, "step_tokens": TUNING, "batch_tokens": TUNING,
                    "max_length": TUNING},
    "ScoreConfig": {"batch_tokens": TUNING, "max_length": TUNING, "resume": TUNING, **_RAY},
    "ExportConfig": {"success_threshold": TUNING, "base_only": ABLATION, "format": "one choice only (trl)"},
    "SolveConfig": {**dict.fromkeys(("step_buckets", "smoothing", "backoff", "shaping", "pessimism"), TUNING),
                    "time_axis": MEASURED,
                    "objective": MEASURED + ": the summed reward against success"},
    "DistillConfig": {"test_fraction": DIAGNOSTIC, "max_rows": "for quick measurements", "members": MEASURED,
                      "model": MEASURED + ": logistic regression against gradient boosting",
                      **{f"text_{name}": TUNING for name in ("epochs", "batch_size", "lr", "max_length")}},
    "CalibrateConfig": {"backend": "another backend than the helper's: a measurement", "prices": TUNING,
                        "success_at": TUNING},
    "EvaluateConfig": {"backend": "another backend than the helper's: a measurement",
                       "prm": "another PRM than the helper's: a measurement", "ci_resamples": TUNING},
    "SweepConfig": {"rl_use_prm": BASELINE, "rl_timesteps": BASELINE, "random_rounds": BASELINE, "knn_k": BASELINE,
                    "knn_encoder": BASELINE, "rl_n_steps": BASELINE, "rl_eval_every": BASELINE,
                    "rl_val_episodes": BASELINE, "rl_lr": BASELINE, "rl_train_episodes": BASELINE,
                    "helper_backend": "another backend than the helper's: a measurement",
                    "prm": "another PRM than the helper's: a measurement", "ci_resamples": TUNING, "title": TUNING},
    "ReportConfig": {"seed": "the bootstrap's draws: a measurement's second seed"},
    "ServeConfig": {"seed": "the tiny test model's weights", "log_level": TUNING},
    "ServeGateConfig": {"log_level": TUNING, "ledger_sync": TUNING},
    "SFTConfig": {**dict.fromkeys(_SFT_TUNING, TUNING), "groups": SUBSET},
    "PPOConfig": {**dict.fromkeys(_PPO_TUNING, TUNING), "restate_question": _EXECUTOR_ABLATIONS["restate_question"],
                  "yes_no_threshold": _EXECUTOR_ABLATIONS["yes_no_threshold"],
                  "estimator": MEASURED + " (distinct: not shown to matter)",
                  "rollouts_per_task": MEASURED + " (with --estimator)", "groups": SUBSET, "clip_eps": TUNING,
                  "vf_coef": TUNING,
                  "decoding": "constrained PPO: an experiment's (it needs --estimator loop or grpo)",
                  "choice_head": MEASURED, "freeze_lm": MEASURED + " (with --choice-head)",
                  "head_lr": MEASURED + " (with --choice-head)", "head_components": MEASURED + " (with --choice-head)"},
    "AgileEvalConfig": {**dict.fromkeys(("cpu_threads", "max_new_tokens", "batch_size", "episodes_per_group"), TUNING),
                        **_EXECUTOR_ABLATIONS, "ablations": ABLATION + "s of the executor", "gold_features": ABLATION,
                        "ask_shift": "a measurement of the policy's own advice rate",
                        "policy_run": "a comparison of gates: a measurement", "gate_threshold": BASELINE,
                        "gate_p": BASELINE, "gate": BASELINE + " (a built-in gate beside the policy's advice)",
                        "memory": MEASURED + ": lexical retrieval against AGILE's embeddings", "groups": SUBSET},
}
"""Every experiment option, by the config class that declares it, with the reason it is one."""


def experiment_fields(cls: type) -> set[str]:
    """The experiment options among ``cls``'s own fields (declared by it or a base; not its nested configs')."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {name for klass in cls.__mro__ for name in EXPERIMENT_OPTIONS.get(klass.__name__, {})} & names


def _nested(cls: type) -> dict[str, tuple[type, tuple]]:
    """Fields of ``cls`` holding a nested config: name -> (its dataclass, the Annotated metadata around it)."""
    out = {}
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        annotated = typing.get_origin(hint) is typing.Annotated
        inner, meta = (hint.__origin__, hint.__metadata__) if annotated else (hint, ())
        if isinstance(inner, type) and dataclasses.is_dataclass(inner):
            out[name] = (inner, meta)
    return out


def all_experiment_flags(cls: type) -> set[str]:
    """The field names of every experiment option on ``cls``'s command line, its nested configs' included."""
    return experiment_fields(cls) | {name for inner, _ in _nested(cls).values() for name in all_experiment_flags(inner)}


def _as(instance, cls: type):
    """``instance`` relabelled as ``cls`` (a view and its base share their fields, so nothing is rebuilt and no
    ``__post_init__`` runs twice); nested configs likewise."""
    for name, (inner, _) in _nested(cls).items():
        value = getattr(instance, name)
        if dataclasses.is_dataclass(value) and type(value) is not inner:
            object.__setattr__(instance, name, _as(value, inner))
    object.__setattr__(instance, "__class__", cls)
    return instance


@functools.cache
def command_view(cls: type, hide: bool = True, hint: Callable[[str], object] | None = None) -> type:
    """``cls`` as a command line parses it: a subclass whose experiment options are ``tyro.conf.Suppress``-ed (not
    flags, their defaults kept) where ``hide``, and whose fields carry the tyro metadata ``hint(name)`` gives (a range
    in the help), nested configs likewise; ``cls`` itself where nothing changes. The view keeps ``cls``'s module
    and qualified name, so tyro reads the fields' docstrings from ``cls``'s source."""
    import tyro

    hints = typing.get_type_hints(cls, include_extras=True)
    nested, hidden = _nested(cls), experiment_fields(cls) if hide else set()
    changed = []
    for item in dataclasses.fields(cls):
        if item.name in nested:
            inner, meta = nested[item.name]
            view = command_view(inner, hide, hint)
            if view is inner:
                continue
            default = item.default_factory if item.default is dataclasses.MISSING else (lambda d=item.default: d)
            changed.append((item.name, typing.Annotated[(view, *meta)] if meta else view,
                            dataclasses.field(default_factory=lambda make=default, view=view: _as(make(), view))))
            continue
        extra = (tyro.conf.Suppress,) if item.name in hidden else tuple(filter(None, [hint and hint(item.name)]))
        if extra:
            changed.append((item.name, typing.Annotated[(hints[item.name], *extra)],
                            dataclasses.field(default=item.default, default_factory=item.default_factory)))
    if not changed:
        return cls
    view = dataclasses.make_dataclass(cls.__name__, changed, bases=(cls,),
                                      frozen=cls.__dataclass_params__.frozen)
    view.__module__, view.__qualname__ = cls.__module__, cls.__qualname__
    if not (cls.__doc__ or "").startswith(f"{cls.__name__}("):  # dataclass's own signature doc: tyro skips the view's
        view.__doc__ = cls.__doc__
    return view


def as_config(instance, cls: type):
    """A config parsed through ``command_view(cls, ...)``, as an instance of ``cls`` itself (it pickles by reference,
    and ``type(config)`` is the command's class)."""
    return _as(instance, cls)


def experiment_flag(argv: list[str], cls: type, command: str) -> str | None:
    """The one-line refusal of the first experiment option in ``argv`` of ``command`` (None when there is none)."""
    flags = {f"--{prefix}{name.replace('_', '-')}" for name in all_experiment_flags(cls) for prefix in ("", "no-")}
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in flags:
            return (f"{flag} is an experiment's option, not the product's: run {EXPERIMENT_ENTRY} {command} "
                    f"{flag} ... instead.")
    return None

