"""``helpgate agile eval --helper DIR``: a distilled ``HelperGate`` decides the agent's advice.

``agile`` never imports ``helper``; this command joins them. Without ``--helper`` it is plain
``agile eval`` (the policy's own ``[SeekAdvice]`` beside a built-in gate). With it, the rows of
the gate run (``mode`` = ``gate:HelperGate``) come from the helper, given the same per-episode
advice budget as a built-in gate (``--gate-budget`` × questions per group), so the table shows
the policy's own advice and the helper's side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from agile.executor.evaluate import EvalConfig, run_eval


@dataclass
class AgileEvalConfig(EvalConfig):
    helper: str | None = None
    """Folder of a distilled helper (helpgate distill); its HelperGate replaces the built-in gate."""


def run(cfg: AgileEvalConfig, log=print) -> list[dict]:
    gate = None
    if cfg.helper:
        from helper.gate import HelperGate

        budget = max(int(round(cfg.gate_budget * cfg.questions_per_group)), 0)
        gate = HelperGate.load(cfg.helper, budget=budget, device=cfg.device or None)
    return run_eval(cfg, gate=gate, log=log)
