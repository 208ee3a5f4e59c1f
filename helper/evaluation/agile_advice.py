"""``helpgate agile eval --helper DIR``: a distilled ``HelperGate`` decides the agent's advice.

``agile`` never imports ``helper``; this command joins them. Without ``--helper`` it is plain
``agile eval``: the policy's own ``[SeekAdvice]`` beside a built-in gate of ``helper.gates`` (``--gate``, an
experiment's option; ``make_gate``). With it, the rows of
the gate run (``mode`` = ``gate:HelperGate``) come from the helper, so the table shows the policy's
own advice and the helper's side by side. Two kinds of helper:

- solved at an advice cost (``helpgate solve --advice-cost c``): the price decides, no budget caps
  it (unless ``--budget`` is given); ``--advice-cost`` should be the same c, else a warning says so;
- solved for a hard budget: ``--budget`` pieces of advice per episode (the rate version, e.g. the
  PPO agent's advice rate times the questions), by default a quarter of the questions per group.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agile.executor.agent_eval import EvalConfig, gate_run_budget, run_eval
from agile.executor.executor import ENV_NAME as EXECUTOR_ENV
from helper.gates.registry import GATES
from helper.gates.trained_on import PRICED, describe


@dataclass
class AgileEvalConfig(EvalConfig):
    gate: Literal["none", "novelty", "random", "uniform", "first_k", "not_yes_no"] = "novelty"
    """Built-in gate evaluated beside the policy's own advice; none skips the gate run."""
    gate_threshold: float = 0.6
    """NoveltyGate: advice when the best memory match has a cosine below this."""
    gate_p: float = 0.25
    """RandomGate: advice probability."""
    helper: str | None = None
    """Folder of a distilled helper (helpgate distill); its HelperGate replaces the built-in gate (--budget
    then defaults to every question for a helper solved at an advice cost: the price decides)."""


def make_gate(cfg: AgileEvalConfig):
    """The built-in gate ``cfg.gate`` from ``helper.gates.registry.GATES`` (None for ``none``)."""
    options = {"novelty": {"threshold": cfg.gate_threshold},
               "random": {"p": cfg.gate_p, "seed": cfg.seed, "draws": "sequential"},
               "uniform": {"seed": cfg.seed},
               # AGILE's non-adaptive baseline: the budget spent on the episode's first questions.
               "first_k": {"k": gate_run_budget(cfg)},
               "not_yes_no": {}}
    return GATES[cfg.gate](**options[cfg.gate]) if cfg.gate in options else None


def helper_budget(cfg: AgileEvalConfig, trained: dict) -> int:
    """The helper run's advice budget per episode (module docstring)."""
    if cfg.budget is None and trained.get("method") == PRICED:
        return cfg.questions_per_group  # every question may be advised: the price decides
    return gate_run_budget(cfg)


def run(cfg: AgileEvalConfig, log=print) -> list[dict]:
    gate, budget = make_gate(cfg), None
    if cfg.helper:
        from helper.gates.helper_gate import CONFIG_FILE, HelperGate

        config_path = Path(cfg.helper) / CONFIG_FILE
        trained = json.loads(config_path.read_text()).get("trained_on") or {} if config_path.is_file() else {}
        cost = trained.get("advice_cost")
        if cost is not None and not math.isclose(cost, cfg.advice_cost):
            warnings.warn(f"{cfg.helper}: helper solved for advice cost {cost:g}; evaluated with advice cost "
                          f"{cfg.advice_cost:g}. Differs: advice_cost; distill one at this cost "
                          "(helpgate solve --advice-cost).", stacklevel=2)
        envs = trained.get("env") or []
        if envs and EXECUTOR_ENV not in envs:
            # Refused before the policy runs: such a helper reads features the executor never writes.
            raise ValueError(f"{cfg.helper}: {describe(trained)}, not on ProductQA's executor (env {EXECUTOR_ENV}); "
                             "train one on the executor's own sessions (helpgate pipeline --agent MODEL) or leave "
                             "--helper out.")
        budget = helper_budget(cfg, trained)
        gate = HelperGate.load(cfg.helper, budget=budget, device=cfg.device or None)
    return run_eval(cfg, gate=gate, log=log, budget=budget)
