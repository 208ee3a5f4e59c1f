"""The AGILE advice comparison as report rows: the helper against PPO's own ``[SeekAdvice]`` and, at a fixed
budget, against NoveltyGate and random, from the evaluation folders ``benchmarks/agents/agile_join.py`` wrote.

That script writes ``join.json`` into its helpers' folder (``join/`` or ``join-proposal/``): per advice cost c,
the PPO agent's and the helper's evaluation folders (``sessions.jsonl``: one line per session with ``group``,
``episode_id``, ``index``, ``correct``, ``advised``) and both routes' training human calls; per budget B (and
episodes per group), the folders of the helper, NoveltyGate and random placing B pieces of advice per episode.
Each run adds its comparisons to the file, so a budget-only run beside the cost runs lands in the same table.
``helpgate report agile=FOLDER`` reads it: each comparison is the mean over the sessions both routes played of the difference in total score
(correct - c x advised), with an interval that resamples product groups, then sessions within them
(``hierarchical_weights``). The same name given to several folders (one per seed) pools them, seeds
the outer level.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from helper.evaluation import metrics as M

JOIN_FILE = "join.json"
RULE = "rule: ask unless yes/no-phrased"
"""The phrasing rule's name in the AGILE rows (``helper.gates.simple.PhrasingGate``, a reference line)."""
PPO_AT_HELPER_RATE = "PPO at the helper's rate"
"""PPO's own advice moved to the helper's advice rate by a threshold on its ask score (``EvalConfig.ask_shift``)."""


def is_join_folder(path: Path) -> bool:
    return (Path(path) / JOIN_FILE).is_file()


def load_sessions(eval_dir: Path) -> list[dict]:
    """The session log of one evaluation (``sessions.jsonl``), one dict per session."""
    path = Path(eval_dir) / "sessions.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: not found; the evaluation it names did not finish (run python "
                         "benchmarks/agents/agile_join.py again).")
    return [json.loads(line) for line in path.read_text().splitlines()]


def session_key(record: dict) -> tuple:
    """What pairs a session across evaluations: its group, episode and place in the episode."""
    return record["group"], record.get("episode_id", ""), record["index"]


def session_scores(sessions: Path | list[dict], advice_cost: float) -> dict[tuple, float]:
    """Total score (correct - c x advised) of every session of one evaluation (its folder or its log), by
    ``session_key``."""
    records = load_sessions(sessions) if isinstance(sessions, (str, Path)) else sessions
    return {session_key(r): float(r["correct"]) - advice_cost * float(r["advised"]) for r in records}


def paired_difference(a: dict, b: dict, resamples: int = 4000, seed: int = 0,
                      level: float = 0.95, levels: int = 1) -> tuple[float, float, float, int]:
    """Mean of a - b over the sessions both played, its interval and the count. The interval resamples the
    first ``levels`` parts of the session key, outermost first, then sessions: product groups by default;
    ``levels=2`` with keys ``(seed, group, ...)`` resamples seeds, then groups, then sessions; where several
    seeds played the same groups (the join's fixed test groups), seeds and groups are drawn apart
    (``metrics.seed_group_weights``), so a group's effect shared by every seed is not counted as independent."""
    keys = sorted(set(a) & set(b))
    if not keys:
        raise ValueError("the two evaluations share no session (other groups or questions): nothing to pair")
    diff = np.array([a[k] - b[k] for k in keys])
    weights = M.seed_group_weights([[key[depth] for key in keys] for depth in range(levels)], resamples, seed)
    means = (weights * diff).sum(axis=1) / weights.sum(axis=1)
    low, high = M.percentile_interval(means, level)
    return float(diff.mean()), float(low), float(high), len(keys)


def write_manifest(folder: Path, costs: dict, budgets: list[dict], meta: dict) -> Path:
    """Add this run's comparisons to ``folder/join.json`` (entries of earlier runs with other settings stay).

    ``costs``: c -> {"ppo": dir, "helper": dir, "rule": dir, "ppo_at_helper_rate": dir, "ppo_calls": n,
    "helper_calls": m} ("rule": the agent asking on every question not phrased yes/no, a reference line;
    "ppo_at_helper_rate": PPO's own advice thresholded to the helper's rate; "at_ppo_rate": {"budget": B,
    "helper": dir, "novelty": dir, "random": dir, "first": dir}, the helper solved for B = PPO's advice per episode
    and the gates within the same B, which seeds pool whatever B each seed's PPO came to); ``budgets``: entries
    {"budget": B, "cost": c, "episodes_per_group": E, "helper": dir, "novelty": dir, "random": dir, "first": dir,
    "helper_calls": m} ("first": the B pieces spent on the episode's first questions, AGILE's non-adaptive baseline).
    An entry replaces an earlier one with the same c, or the same B, c and E."""
    path = Path(folder) / JOIN_FILE
    old = json.loads(path.read_text()) if path.is_file() else {}
    merged_costs = {**old.get("costs", {}), **{f"{c:g}": v for c, v in costs.items()}}

    def key(entry: dict) -> tuple:
        return entry["budget"], float(entry["cost"]), entry.get("episodes_per_group", 1)

    new_keys = {key(e) for e in budgets}
    merged_budgets = [e for e in old.get("budgets", []) if key(e) not in new_keys] + list(budgets)
    text = json.dumps({**old, **meta, "costs": merged_costs, "budgets": sorted(merged_budgets, key=key)},
                      indent=1, default=str)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def comparisons(folder: Path) -> dict[tuple, dict]:
    """The comparisons one join folder records, keyed by (setting, baseline), in the table's order."""
    manifest = json.loads((Path(folder) / JOIN_FILE).read_text())
    found = {}
    for cost, entry in sorted(manifest.get("costs", {}).items(), key=lambda item: float(item[0])):
        found[(f"c = {cost}", "PPO (own advice)")] = {
            "mine": entry["helper"], "theirs": entry["ppo"], "cost": float(cost),
            "calls": (entry["helper_calls"], entry["ppo_calls"])}
        if "rule" in entry:  # the phrasing rule, a reference line (joins before it have none)
            found[(f"c = {cost}", RULE)] = {
                "mine": entry["helper"], "theirs": entry["rule"], "cost": float(cost), "calls": (entry["helper_calls"], 0)}
        if "ppo_at_helper_rate" in entry:  # PPO thresholded to the helper's rate (joins before it have none)
            found[(f"c = {cost}", PPO_AT_HELPER_RATE)] = {
                "mine": entry["helper"], "theirs": entry["ppo_at_helper_rate"], "cost": float(cost),
                "calls": (entry["helper_calls"], entry["ppo_calls"])}
        at_rate = entry.get("at_ppo_rate")
        if at_rate:  # the helper within PPO's own advice per episode (joins before it have none)
            setting = f"c = {cost}, at PPO's rate"
            found[(setting, "PPO (own advice)")] = {
                "mine": at_rate["helper"], "theirs": entry["ppo"], "cost": float(cost),
                "calls": (entry["helper_calls"], entry["ppo_calls"])}
            for baseline in ("novelty", "random", "first"):
                found[(setting, baseline)] = {"mine": at_rate["helper"], "theirs": at_rate[baseline],
                                              "cost": float(cost), "calls": (entry["helper_calls"], 0)}
    for entry in manifest.get("budgets", []):
        episodes = entry.get("episodes_per_group", 1)
        setting = f"B = {entry['budget']}, c = {entry['cost']:g}" + (f", {episodes} episodes a group" if episodes > 1
                                                                      else "")
        for baseline in ("novelty", "random", "first"):
            if baseline not in entry:  # joins written before the non-adaptive route have none
                continue
            found[(setting, baseline)] = {"mine": entry["helper"], "theirs": entry[baseline],
                                          "cost": float(entry["cost"]), "calls": (entry["helper_calls"], 0)}
    return found


def join_rows(name: str, folders: Path | list[Path], resamples: int = 4000, seed: int = 0,
              level: float = 0.95) -> list[dict]:
    """One row per comparison of the joins in ``folders`` (one folder per seed of the same set-up; module
    docstring). A comparison that several seeds recorded pools their sessions, and its interval resamples seeds,
    then groups, then sessions; the row says how many seeds it pools."""
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    per_seed = [comparisons(folder) for folder in folders]
    order = list(dict.fromkeys(key for found in per_seed for key in found))
    rows = []
    for setting, baseline in order:
        present = [found[(setting, baseline)] for found in per_seed if (setting, baseline) in found]
        a, b, rates = {}, {}, [[], []]
        for s, entry in enumerate(present):
            logs = load_sessions(entry["mine"]), load_sessions(entry["theirs"])
            for scores, log, rate in zip((a, b), logs, rates):
                scores.update({(s, *key): value for key, value in session_scores(log, entry["cost"]).items()})
                rate += [float(r["advised"]) for r in log]
        mean, low, high, n = paired_difference(a, b, resamples, seed, level, levels=2)
        counts = [[str(entry["calls"][side]) for entry in present] for side in (0, 1)]
        calls = [side[0] if len(set(side)) == 1 else ", ".join(side) for side in counts]  # one per seed
        rows.append({"set-up": name, "seeds": len(present), "sessions": n, "setting": setting, "baseline": baseline,
                     "total helper / baseline": f"{np.mean(list(a.values())):.3f} / {np.mean(list(b.values())):.3f}",
                     "helper − baseline": f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]",
                     "advice rate helper / baseline": f"{np.mean(rates[0]):.3f} / {np.mean(rates[1]):.3f}",
                     "training human calls helper / baseline": f"{calls[0]} / {calls[1]}",
                     "verdict": M.verdict([(low, high)])})
    return rows


def join_notes(folders: dict[str, list[Path]], resamples: int, level: float) -> list[str]:
    notes = [f"AGILE advice: total score = accuracy - c x advice rate per session; helper − baseline on the same "
             f"sessions, [{100 * level:g}% bootstrap over product groups, then sessions; with several seeds of one set-up, "
             f"seeds and the groups they all played drawn apart, then sessions; {resamples} resamples]; "
             "verdict from that one interval. Training human calls: the offline collection's advice rows (the "
             "helper; one collection serves every c and B) against PPO's rollouts' [SeekAdvice]."]
    for name, members in folders.items():
        for folder in members:
            meta = json.loads((Path(folder) / JOIN_FILE).read_text())
            described = ", ".join(f"{k} {v}" for k, v in meta.items() if k not in ("costs", "budgets"))
            notes.append(f"- `{folder}` ({name}): {described}")
    return notes
