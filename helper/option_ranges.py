"""The range of every numeric option of every command, in one table, checked before any work starts.

``helpgate`` parses a command's config dataclass (``helper.config_cli``) and then calls ``check``:
every ``int`` / ``float`` field (and each number of a list field), of the command's own config and
of its nested ones (the ``EnvSpec`` flags), is looked up here by its name (one word per concept
across commands: ``--episodes`` is the same range wherever it is an option) and a value outside
its range is refused in one line, ``--bins 0: bins=0 must be >= 1``, exit code 2, before a model
loads or a folder is written. ``None`` (an unset optional field: its default) is not checked.

Ranges say what can work at all, not what is wise; a finer check that needs the data (a budget
past the longest episode, tables that would not fit in memory) stays with the command.
``tests/helper/test_option_ranges.py`` holds every numeric field of every command to an entry here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

MAX_EPISODES = 1_000_000
"""Episodes a command plays or collects at most (``agile.budget.MAX_EPISODES``: the live episodes a gate tracks)."""
MAX_SEED = 2**32 - 1
"""numpy's legacy seeding (``np.random.seed``, used by ``transformers.set_seed``) takes seeds below 2^32."""


@dataclass(frozen=True)
class Range:
    """Allowed values: ``low`` and ``high`` included unless ``above`` / ``below`` (None: no bound)."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    """``low`` itself is excluded (a rate, a learning rate: > 0)."""
    below: bool = False
    """``high`` itself is excluded (a held-out share: < 1)."""

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or (value < self.high if self.below else value <= self.high)

    def text(self) -> str:
        low = None if self.low is None else f"{'>' if self.above else '>='} {_shown(self.low)}"
        high = None if self.high is None else f"{'<' if self.below else '<='} {_shown(self.high)}"
        if low and high:
            return (f"in [{_shown(self.low)}, {_shown(self.high)}]" if not (self.above or self.below)
                    else f"{low} and {high}")
        return low or high or "a finite number"


def _shown(bound: float) -> str:
    """A bound as a reader writes it: 1,000,000 rather than 1e+06."""
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


COUNT = Range(1)
"""A count of things that must exist: at least one."""
NONNEG = Range(0)
SHARE = Range(0, 1)
"""A probability or share."""
RATE = Range(0, above=True)
"""A learning rate, a scale: above 0."""
SEED = Range(0, MAX_SEED)
EPISODES = Range(1, MAX_EPISODES)

RANGES: dict[str, Range] = {
    # the environment (EnvSpec) of collect, evaluate, sweep and pipeline
    "questions_per_episode": Range(1, 10_000), "sim_accuracy": SHARE, "memory_boost": SHARE,
    "max_new_tokens": Range(1, 100_000), "tw_games": COUNT, "tw_quest_lengths": Range(1, 1000), "tw_rooms": COUNT,
    "tw_objects": COUNT, "tw_sim_p": SHARE, "consistency_samples": Range(0, 1000),
    # sizes of runs
    "episodes": EPISODES, "eval_episodes": EPISODES, "max_episodes": EPISODES, "rl_val_episodes": EPISODES,
    "rl_train_episodes": EPISODES, "questions_per_group": Range(1, 100_000), "episodes_per_group": Range(1, 100_000),
    "episodes_per_iteration": COUNT, "iterations": COUNT, "rollouts_per_task": COUNT, "shard_size": Range(1, 1_000_000),
    "max_rows": COUNT,
    # budgets (interventions per episode) and horizons
    "budget": NONNEG, "budgets": NONNEG, "solved_budget": NONNEG, "horizon": COUNT,
    # seeds
    "seed": SEED, "agent_seed": SEED,
    # probabilities and shares
    "explore_p": SHARE, "success_threshold": SHARE, "val_fraction": Range(0, 1, above=True, below=True),
    "test_fraction": Range(0, 1, below=True), "advice_share": SHARE, "gate_threshold": SHARE, "gate_p": SHARE,
    "level": Range(0, 1, above=True, below=True), "lora_dropout": Range(0, 1, below=True),
    "similarity_threshold": Range(-1, 1), "gamma": SHARE, "lam": SHARE,
    "eps": Range(0, 1, above=True, below=True), "delta": Range(0, 1, above=True, below=True), "success_at": SHARE,
    # the tabular solve
    "bins": Range(1, 100_000), "step_buckets": Range(0, 100_000), "smoothing": NONNEG, "shaping": Range(),
    "advice_cost": NONNEG, "pessimism": NONNEG, "solve_pessimism": NONNEG, "memory_limit_gb": RATE,
    # models, batches and tokens
    "batch_tokens": COUNT, "max_length": COUNT, "step_tokens": COUNT, "text_max_length": COUNT, "max_tokens": COUNT,
    "batch_size": COUNT, "text_batch_size": COUNT, "micro_batch_size": COUNT, "minibatch_size": COUNT,
    "rollout_batch_size": COUNT, "layers": COUNT, "prm_layers": NONNEG, "history": NONNEG, "folds": Range(1, 1000),
    "cross_fit": Range(0, 1000), "knn_k": COUNT, "prices": Range(2, 100_000),
    "prm_folds": Range(1, 1000), "lora_r": COUNT, "lora_alpha": COUNT, "lora_layers": NONNEG, "max_turns": COUNT,
    # training
    "head_components": NONNEG, "ask_shift": Range(), "yes_no_threshold": Range(),
    "l2": NONNEG, "head_steps": COUNT, "epochs": RATE, "text_epochs": COUNT, "update_epochs": COUNT, "lr": RATE,
    "head_lr": RATE, "text_lr": RATE, "rl_lr": RATE, "weight_decay": NONNEG, "max_grad_norm": RATE,
    "max_steps": Range(-1), "kl_coef": NONNEG, "proxy_beta": NONNEG, "clip_eps": RATE, "value_clip_eps": RATE,
    "vf_coef": NONNEG, "temperature": NONNEG, "stop_when_flat": NONNEG, "flat_tolerance": NONNEG,
    "rl_timesteps": COUNT, "rl_n_steps": COUNT, "rl_eval_every": COUNT, "random_rounds": COUNT,
    # bootstrap and reports
    "ci_resamples": Range(1, 10_000_000), "resamples": Range(1, 10_000_000),
    # machines and servers
    "ray_workers": COUNT, "cpu_threads": NONNEG, "log_every": COUNT, "port": Range(1, 65_535),
    "max_body_bytes": COUNT, "idle_episode_s": RATE,
    # plug-ins' limits
    "plugin_timeout_s": RATE, "plugin_max_steps": COUNT,
}
"""Every numeric option of every command, by field name, and its range (see the module docstring)."""

NOTES: dict[str, str] = {
    "max_steps": " (-1: no limit)", "cross_fit": " (0: off)", "prm_layers": " (0: all of them)", "step_buckets": " (0: none)",
    "episodes": f" (at most {MAX_EPISODES:,}: the live episodes a gate tracks)",
    "seed": " (numpy seeds are below 2^32)", "agent_seed": " (numpy seeds are below 2^32)",
}
"""What a bound means, where the number alone does not say."""


def _numbers(value) -> list:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def numeric_fields(config) -> list[tuple[str, object]]:
    """``(name, value)`` of every field holding a number or numbers, nested configs included."""
    out = []
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += numeric_fields(value)
        elif _numbers(value):
            out.append((item.name, value))
    return out


def check(config) -> None:
    """Refuse the first numeric option of ``config`` outside its range (``ValueError``, one line)."""
    if not dataclasses.is_dataclass(config):
        return
    for name, value in numeric_fields(config):
        rule = RANGES.get(name)
        if rule is None:
            continue
        bad = [v for v in _numbers(value) if not (math.isfinite(v) and rule.holds(v))]
        if bad:
            flag = "--" + name.replace("_", "-")
            shown = " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in bad[:3])
            each = "each " if isinstance(value, (list, tuple)) else ""
            raise ValueError(f"{flag} {shown}: {name}={value!r} must {each}be {rule.text()}{NOTES.get(name, '')}.")
