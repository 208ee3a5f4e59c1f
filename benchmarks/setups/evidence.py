"""The sweep evidence: one set-up, several seeds, every method, paired against the helper.

    python benchmarks/setups/evidence.py simulator --seeds 0 1 2 --out runs/evidence
    python benchmarks/setups/evidence.py productqa --seeds 0 1 2 --out runs/evidence     # shared data, SmolLM2
    python benchmarks/setups/evidence.py textworld --seeds 0 1 2 --out runs/evidence
    python benchmarks/setups/evidence.py main --seeds 0 1 2 --decide-after proposal  # `helpgate pipeline`'s own set-up

Each seed is one ``helpgate pipeline`` run (``runs/evidence/<setup>[-<decide-after>]/seed<S>``: its own training
episodes, PRM with out-of-fold scores, solve, distill and a sweep on held-out episodes; a finished
run is reused). The tables pool the seeds:

- per method and budget C: mean success over seeds, the helper's success minus the method's on the
  same episodes (each seed's held-out episodes, pooled) with its 95% interval, and mean interventions
  per episode. The interval is ``helper.evaluation.metrics``' hierarchical bootstrap, as ``helpgate report``'s:
  seeds, then groups within a seed, then episodes within a group; where an ``episodes.csv`` has no
  group column (runs before it), ``pooled_difference``: episodes resampled within each seed;
- per method: APGR, its share completed rather than measured, CPT(50%), CPT(80%) (means over
  seeds) and training strong + human calls.

Set-ups (sizes chosen before any run, never on the test groups):

- ``simulator``: the generated catalog, the simulator agent (known dynamics), the trained SmolLM2
  PRM (not the simulator's own probability); ``exact_optimal`` is the reference.
- ``productqa``: ``../shared/productqa`` train groups -> test groups, SmolLM2 base agent and PRM.
- ``textworld``: generated games, the simulator agent, held-out games.
- ``main``: the main job's defaults (generated catalog, SmolLM2 agent and PRM, 64 training and 16
  held-out episodes): what a user sees after ``helpgate pipeline --seed S``.

``--decide-after`` (default: the pipeline's) sets when the helper and every score-reading baseline
decide; a run with it named has its own folder (``<setup>-<mode>``). ``--compare-modes`` then puts
the helper of ``<setup>-proposal`` beside the helper of ``<setup>-state`` (both run first): success
per C paired on the same held-out episodes, APGR and the PRM's out-of-fold AUROC.

    python benchmarks/setups/evidence.py main --seeds 0 1 2 --compare-modes

``--episodes N`` gives each seed N training episodes instead of the set-up's (its own folder,
``<setup>[-mode]-e<N>``): the live counterpart of ``benchmarks/setups/transfer.py``'s pooled helper.

    python benchmarks/setups/evidence.py productqa --seeds 0 1 2 --decide-after proposal --episodes 192

``--compare-gold`` is the gold-features ablation: the methods that read features, run once with the
dataset's question type among them (``--gold-features``) and once without, on the same episodes.

    python benchmarks/setups/evidence.py productqa --seeds 0 1 2 --decide-after proposal --compare-gold
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
SETUPS = {
    # online_rl reads the PRM score here, as the helper does (a PRM pass per training decision: cheap
    # next to an LLM agent's, affordable with the simulator agent).
    "simulator": dict(agent="simulator", episodes=64, eval_episodes=64, rl_use_prm=True),
    "productqa": dict(agent="smollm2", data=str(Path(__file__).resolve().parents[3] / "shared" / "productqa"),
                      episodes=64, eval_episodes=32),
    "textworld": dict(env="textworld", agent="simulator", prm_layers=2, episodes=96, eval_episodes=24),
    "main": dict(),
}
NOT_COMPARED = ("never", "always", "counterfactual", "helper")
EPISODE_INTERVALS = False
"""``--episode-intervals``: every interval resamples episodes within seeds (the interval before groups), to
show where a verdict depends on resampling seeds and groups."""


def interval_note() -> str:
    if EPISODE_INTERVALS:
        return "95% bootstrap interval of episodes within seeds (--episode-intervals: no seed or group resampled)"
    return ("95% bootstrap interval over seeds, then groups, then episodes (episodes within seeds where "
            "episodes.csv has no group)")


def setup_folder(out: Path, setup: str, decide_after: str | None, episodes: int | None = None) -> Path:
    name = setup if decide_after is None else f"{setup}-{decide_after}"
    return out / (name if episodes is None else f"{name}-e{episodes}")


def run_seed(folder: Path, setup: str, seed: int, decide_after: str | None, episodes: int | None = None,
             **switches) -> Path:
    from helper.commands.pipeline import PipelineConfig, run
    from helper.stored_config import config_of

    mode = {} if decide_after is None else {"decide_after": decide_after}
    sizes = SETUPS[setup] | ({} if episodes is None else {"episodes": episodes})
    run(config_of(PipelineConfig, out=str(folder), seed=seed, **sizes, **mode, **switches))
    return folder


def pooled_difference(helper: list[np.ndarray], other: list[np.ndarray], resamples: int = 2000) -> tuple:
    """Mean helper - other over all paired episodes, and a 95% interval resampling within each seed."""
    diffs = [h - o for h, o in zip(helper, other)]
    rng = np.random.default_rng(0)
    means = np.empty(resamples)
    sizes = np.array([d.size for d in diffs], dtype=float)
    for r in range(resamples):
        means[r] = sum(d[rng.integers(0, d.size, d.size)].sum() for d in diffs) / sizes.sum()
    low, high = np.quantile(means, [0.025, 0.975])
    return float(np.concatenate(diffs).mean()), float(low), float(high)


def paired_difference(first: list[pd.DataFrame], method: str, second: list[pd.DataFrame], other: str,
                      budget: int) -> tuple:
    """``method`` (in ``first``) minus ``other`` (in ``second``) at ``budget``, each seed's episodes.csv
    paired by episode id, pooled over seeds; the interval resamples seeds, then groups, then episodes
    (``pooled_difference`` where an episodes.csv has no group column)."""
    from helper.evaluation.metrics import paired_hierarchical_difference

    pairs, seeds, groups = [], [], []
    for k, (a, b) in enumerate(zip(first, second)):
        rows = a[(a.method == method) & (a.budget == budget)].set_index("episode_id")
        h = rows["success"]
        o = b[(b.method == other) & (b.budget == budget)].set_index("episode_id")["success"]
        h, o = h.align(o, join="inner")
        pairs.append((h.to_numpy(), o.to_numpy()))
        seeds += [k] * len(h)
        groups += rows["group"].astype(str).loc[h.index].tolist() if "group" in rows.columns else [None] * len(h)
    if EPISODE_INTERVALS or None in groups:
        return pooled_difference([h for h, _ in pairs], [o for _, o in pairs])
    return paired_hierarchical_difference(np.concatenate([h for h, _ in pairs]),
                                          np.concatenate([o for _, o in pairs]), [seeds, groups])


def tables(folders: list[Path], sweep: str = "sweep") -> str:
    sweeps = [pd.read_csv(f / sweep / "sweep.csv") for f in folders]
    episodes = [pd.read_csv(f / sweep / "episodes.csv") for f in folders]
    summaries = [json.loads((f / sweep / "summary.json").read_text()) for f in folders]
    budgets = sorted(int(b) for b in sweeps[0].loc[sweeps[0].method == "helper", "budget"] if b > 0)
    methods = [m for m in dict.fromkeys(k for s in summaries for k in s["methods"]) if m not in ("never", "always")]
    lines = ["| method | " + " | ".join(f"C={c}" for c in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for method in methods:
        cells = []
        for c in budgets:
            rows = [s[(s.method == method) & (s.budget == c)] for s in sweeps]
            if any(r.empty for r in rows):
                cells.append("–")
                continue
            success = np.mean([r.success.item() for r in rows])
            used = np.mean([r.interventions.item() for r in rows])
            cell = f"{success:.3f} ({used:.2f})"
            if method != "helper":
                mean, low, high = paired_difference(episodes, "helper", episodes, method, c)
                cell += f" Δ {mean:+.3f} [{low:+.3f}, {high:+.3f}]"
            cells.append(cell)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: success, mean over seeds (interventions per episode); Δ = helper minus method on the "
              f"same episodes, pooled over seeds, {interval_note()}.", "",
              "| method | APGR | extrapolated share | CPT(50%) | CPT(80%) | training strong / human calls |",
              "|---|---|---|---|---|---|"]

    def mean_of(method, key):
        values = [s["methods"][method].get(key) for s in summaries if method in s["methods"]]
        values = [v for v in values if v is not None]
        seeds = "" if len(values) == len(summaries) else f" ({len(values)} of {len(summaries)} seeds)"
        return f"{np.mean(values):.3f}{seeds}" if values else "none"

    for method in methods:
        # A method a seed skipped (its reason is in that summary's "skipped") counts over the others.
        calls = [s["methods"][method].get("training_calls") or {} for s in summaries if method in s["methods"]]
        strong = np.mean([c.get("strong", 0) for c in calls])
        human = np.mean([c.get("human", 0) for c in calls])
        lines.append(f"| {method} | {mean_of(method, 'apgr')} | {mean_of(method, 'apgr_extrapolated_share')} | "
                     f"{mean_of(method, 'cpt50')} | {mean_of(method, 'cpt80')} | {strong:.0f} / {human:.0f} |")
    lines += ["", prm_table(folders)]
    if any("online_rl" in summary for summary in summaries):
        lines += ["", online_rl_table(summaries)]
    never = np.mean([s.loc[s.method == "never", "success"].mean() for s in sweeps])
    always = np.mean([s.loc[s.method == "always", "success"].max() for s in sweeps])
    lines += ["", f"{len(folders)} seeds; never = {never:.3f}, always = {always:.3f} (means over seeds)."]
    return "\n".join(lines)


def online_rl_table(summaries: list[dict]) -> str:
    """Per seed: how online_rl's training ended and the training calls at which its learning curve
    first reached the helper's validation success at each C (``summary.json`` -> ``online_rl``)."""
    lines = ["| online_rl, seed | stopped | timesteps | training calls | helper's validation success | "
             "training calls to reach it, per C |", "|---|---|---|---|---|---|"]
    for k, summary in enumerate(summaries):
        rl = summary.get("online_rl") or {}
        calls = (summary.get("methods", {}).get("online_rl", {}).get("training_calls") or {})
        reached = rl.get("calls_to_reach_helper") or {}
        helper = rl.get("helper_validation_success") or {}
        lines.append(f"| {k} | {rl.get('stopped', '')} | {rl.get('timesteps', '')} | "
                     f"{calls.get('strong', 0) + calls.get('human', 0)} | "
                     + " ".join(f"C={c}:{v:.3f}" for c, v in sorted(helper.items(), key=lambda x: int(x[0]))) + " | "
                     + " ".join(f"C={c}:{'not reached' if v is None else v}"
                                for c, v in sorted(reached.items(), key=lambda x: int(x[0]))) + " |")
    return "\n".join(lines)


def prm_table(folders: list[Path]) -> str:
    """The PRM's out-of-fold AUROC per seed, pooled and per question type (what the helper's score ranks)."""
    metrics = [json.loads((f / "prm" / "metrics.json").read_text()) for f in folders]
    types = sorted({t for m in metrics for t in (m.get("oof_auroc_per_type") or {})})
    lines = ["| PRM, out of fold | target | AUROC pooled | " + " | ".join(types) + " | in-fold |",
             "|---|---|---|" + "---|" * len(types) + "---|"]
    fmt = lambda v: "–" if v is None else f"{v:.3f}"

    def cell(m, t):  # AUROC (positives / rows) where the counts were recorded
        counts = (m.get("oof_rows_per_type") or {}).get(t)
        value = fmt((m.get("oof_auroc_per_type") or {}).get(t))
        return value if counts is None else f"{value} ({counts['positives']}/{counts['rows']})"

    for folder, m in zip(folders, metrics):
        lines.append(f"| {folder.name} | {m.get('target')} | {fmt(m.get('oof_auroc'))} | "
                     + " | ".join(cell(m, t) for t in types) + f" | {fmt(m.get('in_fold_auroc'))} |")
    pooled = [m["oof_auroc"] for m in metrics if m.get("oof_auroc") is not None]
    if pooled:
        lines.append(f"| mean | | {np.mean(pooled):.3f} | " + " | ".join(
            fmt(np.mean([v for m in metrics if (v := (m.get("oof_auroc_per_type") or {}).get(t)) is not None]))
            for t in types) + " | |")
    lines += ["", "Per type: AUROC (positive outcomes / rows) where counted; a type with one or two "
              "positives has no ranking to measure."]
    return "\n".join(lines)


def helper_success(sweep: pd.DataFrame, budget: int) -> float:
    return sweep[(sweep.method == "helper") & (sweep.budget == budget)].success.item()


def modes_table(proposal: list[Path], state: list[Path]) -> str:
    """The helper deciding after the proposal against the helper deciding before it, seed by seed on
    the same held-out episodes (same seed, same episode ids)."""
    sweeps = {m: [pd.read_csv(f / "sweep" / "sweep.csv") for f in fs] for m, fs in (("proposal", proposal), ("state", state))}
    episodes = {m: [pd.read_csv(f / "sweep" / "episodes.csv") for f in fs] for m, fs in (("proposal", proposal), ("state", state))}
    budgets = sorted(int(b) for b in sweeps["proposal"][0].query("method == 'helper'").budget if 0 < b)
    lines = ["| helper | " + " | ".join(f"C={c}" for c in budgets) + " | APGR | PRM AUROC (out of fold) |",
             "|---|" + "---|" * (len(budgets) + 2)]
    for mode, folders in (("proposal", proposal), ("state", state)):
        cells = [f"{np.mean([helper_success(s, c) for s in sweeps[mode]]):.3f}" for c in budgets]
        apgr = np.mean([json.loads((f / "sweep" / "summary.json").read_text())["methods"]["helper"]["apgr"] for f in folders])
        auroc = np.mean([json.loads((f / "prm" / "metrics.json").read_text())["oof_auroc"] for f in folders])
        lines.append(f"| decide after the {mode} | " + " | ".join(cells) + f" | {apgr:.3f} | {auroc:.3f} |")
    cells = []
    for c in budgets:
        mean, low, high = paired_difference(episodes["proposal"], "helper", episodes["state"], "helper", c)
        cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
    lines.append("| proposal minus state (paired) | " + " | ".join(cells) + " | | |")
    lines += ["", f"{len(proposal)} seeds; success is the mean over seeds; the difference pairs each held-out "
              f"episode with itself, {interval_note()}."]
    return "\n".join(lines)


def gold_table(plain: list[Path], gold: list[Path], methods: tuple[str, ...]) -> str:
    """Each method with the dataset's question type as features against without, paired on the same
    held-out episodes (same seed), and the helper against each method within each arm."""
    sweeps = {a: [pd.read_csv(f / "sweep" / "sweep.csv") for f in fs] for a, fs in (("plain", plain), ("gold", gold))}
    episodes = {a: [pd.read_csv(f / "sweep" / "episodes.csv") for f in fs] for a, fs in (("plain", plain), ("gold", gold))}
    apgr = {a: [json.loads((f / "sweep" / "summary.json").read_text())["methods"] for f in fs]
            for a, fs in (("plain", plain), ("gold", gold))}
    budgets = sorted(int(b) for b in sweeps["plain"][0].query("method == 'helper'").budget if 0 < b)
    lines = ["| method | APGR plain | APGR gold | " + " | ".join(f"gold − plain C={c}" for c in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]
    for method in methods:
        means = {a: np.mean([m[method]["apgr"] for m in apgr[a]]) for a in apgr}
        cells = []
        for c in budgets:
            mean, low, high = paired_difference(episodes["gold"], method, episodes["plain"], method, c)
            cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        lines.append(f"| {method} | {means['plain']:.3f} | {means['gold']:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "| helper minus | " + " | ".join(f"C={c}" for c in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for arm in ("plain", "gold"):
        for method in methods:
            if method == "helper":
                continue
            cells = []
            for c in budgets:
                mean, low, high = paired_difference(episodes[arm], "helper", episodes[arm], method, c)
                cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
            lines.append(f"| {method} ({arm}) | " + " | ".join(cells) + " |")
    lines += ["", f"{len(plain)} seeds; APGR is the mean over seeds; differences pair each held-out episode "
              f"with itself, pooled over seeds, {interval_note()}."]
    return "\n".join(lines)


# What the question type can change: the methods that read features (online_rl equals first_k with an
# LLM agent at the pipeline's interaction budget, and prm_threshold reads the score alone).
GOLD_READERS = ("helper", "router")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("setup", choices=sorted(SETUPS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=Path("runs/evidence"))
    p.add_argument("--decide-after", choices=["state", "proposal"], default=None,
                   help="when score-reading methods decide (default: the pipeline's)")
    p.add_argument("--episodes", type=int, default=None,
                   help="training episodes per seed instead of the set-up's (its own folder, <setup>[-mode]-e<N>)")
    p.add_argument("--tables-only", action="store_true", help="only print the tables of finished runs")
    p.add_argument("--sweep", default="sweep",
                   help="the sweep folder of each run to tabulate (e.g. one written by benchmarks/setups/resweep.py)")
    p.add_argument("--episode-intervals", action="store_true",
                   help="intervals resampling episodes within seeds only (as before groups), for comparison")
    p.add_argument("--compare-modes", action="store_true",
                   help="the helper deciding after the proposal against deciding before it (runs both modes)")
    p.add_argument("--compare-gold", action="store_true",
                   help="the gold-features ablation: the feature-reading methods with the dataset's question "
                        "type as features against without (runs <setup>[-mode]-plain and -gold, those methods only)")
    args = p.parse_args()
    global EPISODE_INTERVALS
    EPISODE_INTERVALS = args.episode_intervals
    if args.compare_gold:
        root = setup_folder(args.out, args.setup, args.decide_after, args.episodes)
        arms = {}
        for arm in ("plain", "gold"):
            arms[arm] = [root.with_name(f"{root.name}-{arm}") / f"seed{s}" for s in args.seeds]
            if not args.tables_only:
                arms[arm] = [run_seed(f, args.setup, s, args.decide_after, episodes=args.episodes,
                                      gold_features=arm == "gold",
                                      methods=list(GOLD_READERS)) for f, s in zip(arms[arm], args.seeds)]
        text = gold_table(arms["plain"], arms["gold"], GOLD_READERS)
        (args.out / f"{root.name}-gold-ablation.md").write_text(text + "\n")
        print(f"\n### {root.name}: with the question type as features against without\n\n{text}")
        return
    if args.compare_modes:
        both = {}
        for mode in ("proposal", "state"):
            root = setup_folder(args.out, args.setup, mode, args.episodes)
            both[mode] = [root / f"seed{s}" for s in args.seeds]
            if not args.tables_only:
                both[mode] = [run_seed(f, args.setup, s, mode, episodes=args.episodes)
                              for f, s in zip(both[mode], args.seeds)]
        text = modes_table(both["proposal"], both["state"])
        (args.out / f"{args.setup}-modes.md").write_text(text + "\n")
        print(f"\n### {args.setup}: proposal against state\n\n{text}")
        return
    root = setup_folder(args.out, args.setup, args.decide_after, args.episodes)
    folders = [root / f"seed{s}" for s in args.seeds]
    if not args.tables_only:
        folders = [run_seed(f, args.setup, s, args.decide_after, episodes=args.episodes)
                   for f, s in zip(folders, args.seeds)]
    text = tables(folders, args.sweep)
    root.mkdir(parents=True, exist_ok=True)
    name = "evidence" if args.sweep == "sweep" else f"evidence-{args.sweep}"
    (root / f"{name}{'-episodes' if EPISODE_INTERVALS else ''}.md").write_text(text + "\n")
    print(f"\n### {root.name}\n\n{text}")


if __name__ == "__main__":
    main()
