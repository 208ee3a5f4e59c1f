"""The evidence verifier against today's verifiers, out of fold by product group, on the same rows (paired).

    python benchmarks/verifier/prm_evidence.py runs/gpu2/runs/gpu-cf1 runs/gpu2/runs/gpu-cf2 runs/gpu/runs/gpu-cf0 \\
        --out runs/verifier-evidence

Each RUN folder holds ``trajectories/``: a collection in proposal mode over the groups it covers (the cross-fitted
pipeline's collection: every shared ProductQA group; or the main job's, on the generated catalog). Per RUN (a seed),
each variant's PRM is trained by the pipeline's PRM stage settings on all its rows, 5 folds by product group
(``prm train`` writes the out-of-fold scores), and the variants are compared on those scores:

- ``frozen``: today's default (frozen SmolLM2, 8 layers, + the agent's signals);
- ``visible, no hidden``: the proposal's visible form (``--prm-proposal-features --prm-hidden False``), the best
  until now;
- ``evidence, no hidden``: that plus the proposal checked against the record (``prm.inputs.evidence``);
- ``question vector, no hidden``: the visible form plus the sentence encoder's vector of the question;
- ``evidence + question vector, no hidden``: both, the candidate named before seeds 1 and 2 were collected (it was
  explored on seed 0's rows, so seed 0 is not evidence for it: read seeds 1 and 2);
- ``evidence + question vector + hidden``: the same beside the frozen backbone's hidden state.

Printed: AUROC per seed and pooled with intervals that resample seeds, then groups, then episodes (paired
differences from ``frozen`` under the same draws); the same within the proposal's visible kinds (``yes``, a
search); by the dataset's question type (an annotation: analysis only); the training seconds per variant and the
evidence features' seconds per decision (cold: every text embedded once); with ``--latency N``, one decision's
milliseconds through each variant's ``PrmScorer`` (what a served gate adds per request).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import polars as pl  # noqa: E402

from benchmarks.verifier.grouped_auroc import cells, intervals, seeds_and_pooled  # noqa: E402
from benchmarks.verifier.prm_visible import folder_name, kind_table, train_and_score, with_kinds  # noqa: E402

NO_HIDDEN = {"proposal_features": True, "hidden": False}
VARIANTS = {
    "frozen": {},
    "visible, no hidden": NO_HIDDEN,
    "evidence, no hidden": {**NO_HIDDEN, "evidence_features": True},
    "question vector, no hidden": {**NO_HIDDEN, "question_vector": True},
    "evidence + question vector, no hidden": {**NO_HIDDEN, "evidence_features": True, "question_vector": True},
    "evidence + question vector + hidden": {"proposal_features": True, "evidence_features": True,
                                            "question_vector": True},
}
CANDIDATE = "evidence + question vector, no hidden"


def out_of_fold(run: Path, out: Path, names: list[str]) -> pl.DataFrame:
    """The run's used rows with every variant's out-of-fold score as a column, the outcome and the fold."""
    keys = ["episode_id", "step"]
    rows = pl.read_parquet(run / "trajectories" / "*.parquet")
    for i, name in enumerate(names):
        oof = pl.read_parquet(out / folder_name(name) / "validation_scores.parquet").select(
            *keys, "outcome", "used", pl.col("prm_score").alias(name))
        rows = rows.join(oof if i == 0 else oof.select(*keys, name), on=keys, how="inner")
    return rows.filter("used").sort(keys)


def evidence_seconds(frame: pl.DataFrame) -> float:
    """Seconds per decision of the evidence features with a fresh encoder cache (every text embedded once)."""
    from agile.executor.memory import Embedder
    from prm.inputs.evidence import frame_evidence_features

    encode = Embedder().encode
    started = time.perf_counter()
    frame_evidence_features(frame, encode)
    return (time.perf_counter() - started) / max(frame.height, 1)


def latency(out: Path, names: list[str], frame: pl.DataFrame, decisions: int) -> dict[str, dict[str, float]]:
    """Milliseconds (p50, p99) of one ``PrmScorer.score`` call per variant (the PRM's cost in a served gate), each
    decision a fresh episode, the sentence encoder's cache empty at the start; the first call of each (model and
    encoder loading) is not timed."""
    import numpy as np

    from agile.protocol import Action, Observation
    from prm.scoring.scorer import PrmScorer
    from prm.verifiers.model import ProcessRewardModel

    rows = list(frame.head(decisions + 1).iter_rows(named=True))
    found = {}
    from prm.inputs.evidence import embedded_encoder

    for name in names:
        embedded_encoder.cache_clear()  # each variant starts with an empty sentence cache, as a fresh server does
        scorer = PrmScorer(ProcessRewardModel.load(out / folder_name(name)))
        times = []
        for i, row in enumerate(rows):
            observation = Observation(f"latency-{name}-{i}", row["env"], row["task_id"], 0, row["state_text"], 1)
            started = time.perf_counter()
            scorer.score(observation, proposal=Action(row["proposal_text"]))
            if i:
                times.append(1000 * (time.perf_counter() - started))
        found[name] = {"p50_ms": round(float(np.percentile(times, 50)), 1),
                       "p99_ms": round(float(np.percentile(times, 99)), 1)}
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders with trajectories/ (one seed each)")
    parser.add_argument("--out", type=Path, default=Path("runs/verifier-evidence"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="verifiers to compare; the first is the reference of the paired differences")
    parser.add_argument("--latency", type=int, default=0,
                        help="also time this many single decisions through each variant's scorer (the first run's)")
    args = parser.parse_args(argv)
    names = list(args.variants)
    frames, timing = [], {}
    for run in args.runs:
        out = args.out / run.name
        timing[run.name] = {name: seconds["train_s"] for name, seconds in
                            train_and_score(run, out, names, test=False, variants=VARIANTS).items()}
        frame = with_kinds(out_of_fold(run, out, names))
        timing[run.name]["evidence_s_per_decision"] = round(evidence_seconds(frame), 4)
        frames.append(frame.with_columns(pl.lit(run.name).alias("seed_run")))
    report = {}
    print(f"\n## AUROC of the proposal's rightness, out of fold by group, paired (difference: each - {names[0]})\n")
    print("| rows | seed | rows (right) | groups | " + " | ".join(f"{n} [95%]" for n in names) + " | "
          + " | ".join(f"{n} - {names[0]} [95%]" for n in names[1:]) + " |")
    print("|---" * (4 + 2 * len(names) - 1) + "|")
    kinds = {"all": None, "within yes": ["yes"],
             "within a search": ["search: rows, none", "search: rows, ids", "search: no rows", "search: SQL error"]}
    for where, chosen in kinds.items():
        parts = [f.filter(pl.col("kind").is_in(chosen)) if chosen else f for f in frames]
        for seed, frame, levels in seeds_and_pooled([p for p in parts if p.height]):
            if frame["outcome"].n_unique() < 2:
                continue
            found = intervals(frame, names, levels)
            report[f"{where}/{seed}"] = found
            print(f"| {where} | {seed} | {frame.height} ({int(frame['outcome'].sum())}) | {frame['group'].n_unique()} | "
                  + " | ".join(cells(found, names)) + " |")
    pooled = pl.concat(frames, how="diagonal_relaxed")
    for line in kind_table(pooled, names, "### By the proposal's visible kind (seeds pooled)"):
        print(line)
    for line in kind_table(pooled.with_columns(pl.col("qtype").alias("kind")), names,
                           "### By the dataset's question type (an annotation: analysis only; seeds pooled)"):
        print(line)
    print(f"\nseconds (training per variant; evidence features per decision): {json.dumps(timing)}")
    if args.latency:
        timing["scorer_ms"] = latency(args.out / args.runs[0].name, names, frames[0], args.latency)
        print(f"one decision through each variant's scorer, ms (p50 / p99): {json.dumps(timing['scorer_ms'])}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps({"auroc": report, "timing": timing}, indent=2, default=float))


if __name__ == "__main__":
    main()
