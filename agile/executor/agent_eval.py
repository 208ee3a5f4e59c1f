"""Evaluate the AGILE agent on ProductQA groups: accuracy, advice rate, total score per group.

One episode per group (its first ``questions_per_group`` questions, memory starting empty, as in
AGILE's evaluation), all groups batched together, greedy decoding. Two ways to decide advice are
reported side by side:

- **policy**: the LLM's own ``[SeekAdvice]`` decisions;
- **gate**: the ``[SeekAdvice]`` decision is taken away from the LLM and given to a gate (any
  object with ``should_intervene(observation, budget_left)``), within a budget of ``budget`` pieces
  of advice per episode (default: a quarter of the questions, rounded).

Ablations switch components off through ``ExecutorConfig`` (memory, tools, advice, reflection).
The gate is given (``run_eval(cfg, gate=...)``): ``agile`` knows no gate class; ``helpgate agile eval`` builds a
built-in gate of ``helper.gates`` or loads a helper (``helper.evaluation.agile_advice``).
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import tyro

from agile.envs.productqa import ProductGroup
from agile.executor.choice_head import ask_margins
from agile.executor.executor import Executor, ExecutorConfig, records_to_jsonl
from agile.executor.memory import Embedder, Memory
from agile.executor.scores import average, summarize
from agile.executor.policy import LLMPolicy, run_executors

ABLATIONS = {
    "full": {},
    "no_memory": {"use_memory": False},
    "no_tools": {"use_tools": False},
    "no_advice": {"use_advice": False},
    "no_reflection": {"use_reflection": False},
}
"""Ablation name -> the ExecutorConfig fields it switches off."""


@dataclass
class EvalConfig:
    """``helpgate agile eval``: accuracy / advice rate / total score per group, policy vs gate."""

    model: str = "smollm2"
    """Model to evaluate: smollm2 (prompt only), an SFT or PPO output folder, tiny, or an id."""
    data_root: Annotated[str, tyro.conf.arg(name="data")] = ""
    """ProductQA root holding train/ and test/; empty uses ../shared/productqa or $HELPGATE_PRODUCTQA."""
    split: Literal["train", "test", "all"] = "test"
    """Split whose groups are evaluated; all: both (train groups held out of training, named in groups,
    evaluated beside the test groups)."""
    groups: list[str] = field(default_factory=list)
    """Groups to evaluate; empty evaluates every group of the split."""
    questions_per_group: int = 50
    """Questions (sessions) from the start of each group's episode."""
    memory: Literal["embedding", "lexical"] = "embedding"
    """How the executor's memory retrieves: MiniLM sentence embeddings (AGILE's) or shared content words (no model;
    the pipeline's ``--memory``): evaluate with the memory the agent and its helper were trained with."""
    episodes_per_group: int = 1
    """Episodes each group plays, each of ``questions_per_group`` questions with memory starting empty: episode e
    plays questions e x q .. (e + 1) x q - 1 (more sessions per group at the same horizon)."""
    advice_cost: float = 0.3
    """Advice cost c in total score = accuracy - c * advice rate."""
    ablations: list[str] = field(default_factory=lambda: ["full"])
    """Any of full, no_memory, no_tools, no_advice, no_reflection."""
    budget: int | None = None
    """Advice the gate may give per episode (default: a quarter of the questions per group, rounded)."""
    policy_run: bool = True
    """Evaluate the policy's own advice too; off runs the gate's run alone (the policy's row is the
    same for every gate of one model, so a comparison of gates needs it once)."""
    gold_features: bool = False
    """Give the gate the dataset's question type as type_<name> features (an ablation; for a helper
    distilled with --gold-features)."""
    restate_question: bool = False
    """The executor states the question again right before the agent's choice
    (``ExecutorConfig.restate_question``; as the PPO agent evaluated was trained)."""
    list_advice_with_gate: bool = False
    """The system text lists ``[SeekAdvice]`` when a gate decides too (``ExecutorConfig.list_advice_with_gate``):
    the agent reads the same context as when it chooses itself."""
    yes_no_threshold: float = 0.0
    """Constrained only: the agent answers a yes/no-phrased question "yes" above this log-odds of yes against no
    (``ExecutorConfig.yes_no_threshold``; as the agent evaluated was trained and collected)."""
    ask_shift: float = 0.0
    """Constrained only: added to ``[SeekAdvice]``'s score at every choice (after a choice head): the agent's own
    advice at another rate, by a threshold on its ask score (``agile.executor.choice_head.shift_for_rate``)."""
    max_new_tokens: int = 96
    """Longest turn the agent may write."""
    decoding: Literal["free", "constrained"] = "constrained"
    """constrained (as collection's default: the function and answer form chosen by log-probability; no SFT
    needed) or free (the policy writes its turns token by token, as an SFT / PPO model is trained to)."""
    batch_size: int = 8
    """Prompts per generate call."""
    seed: int = 0
    """Seed (random gate)."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    cpu_threads: int = 0
    """torch CPU threads; 0 keeps torch's default (1 is fastest on a busy shared machine)."""
    out: str = "runs/agile_eval"
    """Where eval.json, eval.csv and the session log go."""


def evaluate(model, tokenizer, groups: list[ProductGroup], questions_per_group: int,
             exec_cfg: ExecutorConfig, embedder: Embedder, gate=None, max_new_tokens: int = 96,
             batch_size: int = 8, decoding: str = "free", episodes_per_group: int = 1, choice_head=None,
             ask_shift: float = 0.0) -> dict:
    """Run ``episodes_per_group`` greedy episodes per group (``EvalConfig.episodes_per_group``); returns
    per-group and averaged metrics and the records."""
    start = time.perf_counter()
    policy = LLMPolicy(model, tokenizer, max_new_tokens, greedy=True, batch_size=batch_size, decoding=decoding,
                       choice_head=choice_head)
    if ask_shift:
        if policy.constrained is None:
            raise ValueError(f"ask_shift={ask_shift} moves the constrained policy's [SeekAdvice] score: set "
                             "decoding='constrained', or ask_shift=0.")
        policy.constrained.ask_shift = float(ask_shift)
    # A gate that reads the agent's proposal decides outside the executor, which cannot show one.
    reads_proposals = getattr(gate, "decide_after", "state") == "proposal"
    if reads_proposals:
        from agile.executor.episode import ExternalAdvice
    q = questions_per_group
    short = [g.name for g in groups if len(g.questions) < episodes_per_group * q]
    if short:
        raise ValueError(f"episodes_per_group={episodes_per_group} x questions_per_group={q}: groups {short} have "
                         "fewer questions; ask for fewer episodes or questions.")
    # The first episode keeps the id it had before groups played several, so earlier logs pair with new ones.
    executors = [Executor(g, g.questions[e * q:(e + 1) * q], tokenizer, Memory(embedder), exec_cfg,
                          gate=ExternalAdvice() if reads_proposals else gate,
                          episode_id=f"eval-{g.name}" + (f"-{e}" if e else ""))
                 for g in groups for e in range(episodes_per_group)]
    if reads_proposals:
        _run_reading_proposals(executors, questions_per_group, exec_cfg, gate, policy)
    else:
        run_executors(executors, policy)
    # The same episode ids are played again by the next ablation: a gate that counts its budget
    # per episode must start them afresh (see agile.protocol.Gate).
    if gate is not None and hasattr(gate, "end_episode"):
        for executor in executors:
            gate.end_episode(executor.episode_id)
    by_group: dict[str, list] = {}
    for e in executors:
        by_group.setdefault(e.group.name, []).extend(e.records)
    per_group = {name: summarize([r.correct for r in records], [r.advised for r in records], exec_cfg.advice_cost)
                 for name, records in by_group.items()}
    records = [r for e in executors for r in e.records]
    margins = ask_margins(policy.constrained.choices) if policy.constrained is not None else []
    return {"groups": per_group, "average": average(list(per_group.values())), "records": records,
            "seconds": time.perf_counter() - start, "generated_tokens": policy.generated_tokens,
            "ask_margins": margins}


def _run_reading_proposals(executors, questions_per_group, exec_cfg, gate, policy) -> None:
    """A gate that reads the agent's proposal (``decide_after = "proposal"``): the sessions go
    through the episode loop (``agile.rollout.run_episodes``), which lets the LLM write each session
    on a copy of the executor, shows that proposal to the gate, and replays it when kept; the same
    episodes and decision points as the gate inside the executor."""
    from agile.executor.episode import AgileAgent, AgileEpisode
    from agile.rollout import run_episodes

    episodes = [AgileEpisode(e, policy, e.episode_id) for e in executors]
    budget = exec_cfg.budget if exec_cfg.budget is not None else questions_per_group
    run_episodes(episodes, AgileAgent(policy), None, gate=gate, budget=budget, decide_after="proposal")


DEFAULT_ADVICE_SHARE = 0.25
"""The gate run's default budget as a share of the questions per group (rounded: 2 of 10, 12 of 50)."""


def gate_run_budget(cfg: EvalConfig) -> int:
    """The gate run's advice per episode: ``cfg.budget``, or a quarter of the questions, rounded."""
    if cfg.budget is not None:
        if cfg.budget < 0:
            raise ValueError(f"budget={cfg.budget}: give the advice allowed per episode, >= 0.")
        return cfg.budget
    return max(int(round(DEFAULT_ADVICE_SHARE * cfg.questions_per_group)), 0)


def run_eval(cfg: EvalConfig, gate=None, model=None, tokenizer=None, log=print,
             budget: int | None = None) -> list[dict]:
    """Evaluate ``cfg.model`` (or the given model) per ablation, with its own advice and, when ``gate`` is given,
    with that gate (``helpgate agile eval`` builds it: ``helper.evaluation.agile_advice``); writes eval.json /
    eval.csv.

    ``budget``: the gate run's advice per episode (default: ``gate_run_budget(cfg)``)."""
    import torch

    from agile.envs.productqa import default_productqa_root, load_split
    from agile.executor.choice_head import load_choice_head
    from agile.executor.episode import model_folder
    from agile.models import load_causal_lm

    if cfg.episodes_per_group < 1:
        raise ValueError(f"episodes_per_group={cfg.episodes_per_group}: play at least one episode per group.")
    unknown = [a for a in cfg.ablations if a not in ABLATIONS]
    if unknown:
        raise ValueError(f"EvalConfig.ablations has {unknown}; choose from {', '.join(ABLATIONS)}.")
    if cfg.cpu_threads > 0:
        torch.set_num_threads(cfg.cpu_threads)
    if model is None:
        model, tokenizer = load_causal_lm(cfg.model, device=cfg.device or None)
    # A PPO model trained with a choice head keeps it beside its weights; it moves the constrained choice.
    choice_head = load_choice_head(model_folder(cfg.model)) if cfg.decoding == "constrained" else None
    root = cfg.data_root or default_productqa_root()
    splits = ("train", "test") if cfg.split == "all" else (cfg.split,)
    groups = [g for split in splits for g in load_split(root, split) if not cfg.groups or g.name in cfg.groups]
    if not groups:
        raise ValueError(f"no {cfg.split} group of {root} matches groups={cfg.groups}.")
    if cfg.memory == "lexical":
        from agile.executor.lexical import LexicalEmbedder

        embedder = LexicalEmbedder()
    else:
        embedder = Embedder()
    gate_name = type(gate).__name__ if gate is not None else ""
    base = ExecutorConfig(advice_cost=cfg.advice_cost, gold_features=cfg.gold_features,
                          restate_question=cfg.restate_question, list_advice_with_gate=cfg.list_advice_with_gate,
                          yes_no_threshold=cfg.yes_no_threshold)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, logs, margins = [], [], {}
    for ablation in cfg.ablations:
        exec_cfg = replace(base, **ABLATIONS[ablation])
        modes = [("policy", None, exec_cfg)] if cfg.policy_run or gate is None else []
        if gate is not None and exec_cfg.use_advice:
            modes.append((f"gate:{gate_name}", gate,
                          replace(exec_cfg, budget=budget if budget is not None else gate_run_budget(cfg))))
        for mode, g, ecfg in modes:
            result = evaluate(model, tokenizer, groups, cfg.questions_per_group, ecfg, embedder, g,
                              cfg.max_new_tokens, cfg.batch_size, cfg.decoding, cfg.episodes_per_group, choice_head,
                              cfg.ask_shift)
            if mode == "policy" and result["ask_margins"]:
                margins[ablation] = result["ask_margins"]
            for name, m in [*result["groups"].items(), ("average", result["average"])]:
                rows.append({"model": cfg.model, "ablation": ablation, "mode": mode, "group": name,
                             **m, "advice_cost": cfg.advice_cost})
            logs.append(records_to_jsonl(result["records"]))
            a = result["average"]
            log(f"eval {cfg.model} {ablation} {mode}: accuracy {a['accuracy']:.3f} advice "
                f"{a['advice_rate']:.3f} total {a['total_score']:.3f} ({result['seconds']:.0f}s)")
    (out / "eval.json").write_text(json.dumps({"config": asdict(cfg), "rows": rows}, indent=1))
    with (out / "eval.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "sessions.jsonl").write_text("".join(logs))
    if margins:  # the agent's own ask score against its best other function, per choice (rate matching)
        (out / ASK_MARGINS_FILE).write_text(json.dumps(margins))
    return rows


ASK_MARGINS_FILE = "ask_margins.json"
"""``run_eval``'s record of the agent's own ask margins (``agile.executor.choice_head.ask_margins``), per
ablation, where it chose by itself with ``[SeekAdvice]`` offered."""


def markdown_table(rows: list[dict]) -> str:
    """Rows of ``run_eval`` as a Markdown table (accuracy / advice rate / total score)."""
    lines = ["| model | ablation | mode | group | n | accuracy | advice rate | total score |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ablation']} | {r['mode']} | {r['group']} | {int(r['n'])} "
                     f"| {r['accuracy']:.3f} | {r['advice_rate']:.3f} | {r['total_score']:.3f} |")
    return "\n".join(lines)
