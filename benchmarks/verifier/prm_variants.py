"""Which PRM ranks the base agent's mistakes best: the pipeline's PRM stage re-run on finished runs'
trajectories with other backbone depths, history windows or trained verifiers, out-of-fold AUROC side by side.

    python benchmarks/verifier/prm_variants.py runs/evidence/productqa-proposal/seed0 runs/evidence/productqa-proposal/seed1 \\
        --variants layers=8 layers=16 layers=30 layers=8,history=0 mode=state --out runs/prm-variants

Each run folder is one ``helpgate pipeline`` output; its PRM stage is re-run exactly as the pipeline
ran it (``PipelineConfig.prm_train_config``: same target, tag, folds by group, seed) with the variant's
fields changed (``mode=state``: the PRM a state-mode run trains, on the same decision points), into ``OUT/<run>/<variant>/`` (a finished one is read back, not trained again).
Trained verifiers (``prm.training.finetune``, one copy per fold, same folds by group):

    python benchmarks/verifier/prm_variants.py RUN... --variants layers=8 lora=1,layers=4,history=0 model=encoder

``lora=1`` trains LoRA adapters (``lora_r=``, ``epochs=``, ``lr=``, ``step_tokens=`` also apply), ``model=encoder``
(or ``model=encoder:FOLDER``) fine-tunes a cross-encoder whole (``prm.verifiers.encoder``; the run's layer cut does
not apply).
Prints, per variant: out-of-fold AUROC per run and their mean, per question type and per step
(means over runs), the training time and, for trained verifiers, the seconds per fold; with ``--intervals``, each
variant's AUROC per run and pooled with 95% intervals over groups, then episodes, paired against the first variant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.verifier.grouped_auroc import cells, intervals, labelled, seeds_and_pooled  # noqa: E402
from helper.commands.pipeline import PipelineConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402
from prm.training import train as prm_train  # noqa: E402
from prm.verifiers.backbones import is_encoder  # noqa: E402

INT_FIELDS = {"layers", "history", "folds", "epochs", "lora_r", "step_tokens", "max_length"}
FLOAT_FIELDS = {"lr", "head_lr"}
DECIDE_MODES = ("state", "proposal")


def mode_fields(mode: str) -> dict:
    """The PRM fields the pipeline's PRM stage sets in this decide-after mode (its own definition)."""
    train = PipelineConfig(decide_after=mode).prm_train_config("", "")
    return {"tag_after": train.tag_after, "target": train.target, "base_only": train.base_only}


def parse_variant(text: str) -> dict:
    """``layers=16,history=0`` -> {"layers": 16, "history": 0}; ``layers=0`` keeps every layer;
    ``mode=state`` trains the PRM the state mode's pipeline would (tag, target and rows)."""
    out = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key == "mode" and value in DECIDE_MODES:
            out.update(mode_fields(value))
            continue
        if key == "lora" and value in ("0", "1"):
            out["lora"] = value == "1"
            continue
        if key == "model" and value:
            out["model"] = value
            continue
        if key in FLOAT_FIELDS:
            try:
                out[key] = float(value)
                continue
            except ValueError:
                pass
        if key not in INT_FIELDS or not value.lstrip("-").isdigit():
            raise SystemExit(f"--variants {text!r}: use fields {sorted(INT_FIELDS)} with integer values, "
                             f"{sorted(FLOAT_FIELDS)} with numbers, lora=0|1, model=NAME, "
                             f"or mode={'|'.join(DECIDE_MODES)}; e.g. layers=16,history=0.")
        out[key] = int(value)
    if out.get("layers") == 0 or is_encoder(out.get("model", "")):
        out["layers"] = None  # all layers (an encoder is fine-tuned whole)
    return out


def run_name(run: Path) -> str:
    return f"{run.parent.name}-{run.name}"


def variant_folder(run: Path, variant: str, out: Path) -> Path:
    return out / run_name(run) / variant.replace("=", "").replace(",", "-").replace("/", "_").replace(":", "_")


def trained(run: Path, variant: str, out: Path) -> dict:
    """metrics.json of the variant's PRM on this run (trained now unless already there)."""
    folder = variant_folder(run, variant, out)
    if (folder / "metrics.json").exists():
        return json.loads((folder / "metrics.json").read_text())
    cfg = config_of(PipelineConfig, json.loads((run / "pipeline.json").read_text()), run / "pipeline.json")
    return prm_train.run_train(cfg.prm_train_config(run / "trajectories", folder, progress=False,
                                                    **parse_variant(variant)))


def mean_of(dicts: list[dict]) -> dict:
    keys = sorted({k for d in dicts for k in d}, key=lambda k: (len(k), k))
    return {k: float(np.nanmean([d.get(k, np.nan) for d in dicts])) for k in keys}


def table(results: dict[str, list[dict]], runs: list[Path]) -> str:
    lines = ["| variant | " + " | ".join(run_name(r) for r in runs) + " | mean | per type (mean) | per step (mean) | "
             "training s (mean) | s per fold (mean) |", "|---" * (len(runs) + 6) + "|"]
    for variant, metrics in results.items():
        aurocs = [m["oof_auroc"] for m in metrics]
        types = mean_of([m.get("oof_auroc_per_type") or {} for m in metrics])
        steps = mean_of([{k: v["auroc"] for k, v in m["validation"].get("per_step", {}).items()} for m in metrics])
        lines.append(
            f"| {variant} | " + " | ".join(f"{a:.3f}" for a in aurocs) + f" | **{np.mean(aurocs):.3f}** | "
            + ", ".join(f"{k.removesuffix('_qa')} {v:.3f}" for k, v in types.items()) + " | "
            + " / ".join(f"{v:.2f}" for v in steps.values()) + f" | {np.mean([m['seconds'] for m in metrics]):.0f} | "
            + fold_seconds(metrics) + " |")
    return "\n".join(lines)


def fold_seconds(metrics: list[dict]) -> str:
    """Mean seconds to train one fold's copy (trained verifiers only; a frozen head's folds cost nothing)."""
    found = [m["fine_tune"]["mean_fold_seconds"] for m in metrics
             if (m.get("fine_tune") or {}).get("mean_fold_seconds")]
    return f"{np.mean(found):.0f}" if found else "—"


def partial_table(run: Path, variants: list[str], out: Path) -> str:
    """Trained verifiers stopped before their last fold: AUROC over the held-out folds they finished
    (``fold_scores/``), beside the first variant's out-of-fold AUROC on exactly those rows (paired)."""
    import polars as pl

    from prm.training.quality import auroc

    keys = ["episode_id", "step"]
    reference = pl.read_parquet(variant_folder(run, variants[0], out) / "validation_scores.parquet").filter("used")
    lines = [f"| variant ({run_name(run)}) | folds done | rows | AUROC on them | {variants[0]} on the same rows | "
             "s per fold |", "|---" * 6 + "|"]
    for variant in variants[1:]:
        parts = sorted((variant_folder(run, variant, out) / "fold_scores").glob("fold*.parquet"))
        if not parts:
            lines.append(f"| {variant} | 0 | | | | |")
            continue
        done = pl.concat([pl.read_parquet(p) for p in parts]).filter("used")
        paired = done.join(reference.select(*keys, pl.col("prm_score").alias("ref")), on=keys)
        folds = sorted(done["fold"].unique().to_list())
        lines.append(f"| {variant} | {len(folds)} ({', '.join(map(str, folds))}) | {paired.height} | "
                     f"{auroc(paired['prm_score_raw'].to_numpy(), paired['outcome'].to_numpy()):.3f} | "
                     f"{auroc(paired['ref'].to_numpy(), paired['outcome'].to_numpy()):.3f} | "
                     f"{done.group_by('fold').agg(pl.col('seconds').first())['seconds'].mean():.0f} |")
    return "\n".join(lines)


def rank_mean_auroc(run: Path, variants: list[str], out: Path) -> float:
    """Out-of-fold AUROC of the mean rank of several variants' out-of-fold scores on one run's judged rows."""
    import polars as pl
    from scipy.stats import rankdata

    from prm.training.quality import auroc

    keys = ["episode_id", "step"]
    joined = None
    for i, variant in enumerate(variants):
        scores = pl.read_parquet(variant_folder(run, variant, out) / "validation_scores.parquet").filter("used")
        scores = scores.select(*keys, "outcome", pl.col("prm_score").alias(f"s{i}"))
        joined = scores if joined is None else joined.join(scores.drop("outcome"), on=keys)
    ranks = sum(rankdata(joined[f"s{i}"].to_numpy()) for i in range(len(variants)))
    return auroc(ranks, joined["outcome"].to_numpy())


def interval_table(runs: list[Path], variants: list[str], out: Path) -> str:
    """Each variant's out-of-fold AUROC with a 95% interval that resamples product groups (games), then episodes
    (runs as a level when pooled), and its paired difference from the first variant on the same rows."""
    import polars as pl

    keys = ["episode_id", "step"]
    frames = []
    for run in runs:
        joined = None
        for variant in variants:
            scores = pl.read_parquet(variant_folder(run, variant, out) / "validation_scores.parquet").filter("used")
            scores = scores.select(*keys, "task_id", "outcome", pl.col("prm_score").alias(variant))
            joined = scores if joined is None else joined.join(scores.select(*keys, variant), on=keys)
        frames.append(labelled(joined, run_name(run)))
    lines = ["| rows | " + " | ".join(f"{v} [95%]" for v in variants)
             + "".join(f" | {v} - {variants[0]} [95%]" for v in variants[1:]) + " |",
             "|---" * (2 * len(variants)) + "|"]
    for label, frame, levels in seeds_and_pooled(frames):
        lines.append(f"| {label} ({frame.height}) | " + " | ".join(cells(intervals(frame, variants, levels),
                                                                          variants)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished `helpgate pipeline` folders")
    parser.add_argument("--variants", nargs="+", default=["layers=8", "layers=16", "layers=0"],
                        help="comma-separated field=value changes to the PRM stage (layers=0: all layers)")
    parser.add_argument("--out", type=Path, default=Path("runs/prm-variants"))
    parser.add_argument("--partial", action="store_true",
                        help="read trained verifiers that are still running or were stopped: AUROC over their "
                             "finished folds, paired with the first variant's (which must be finished)")
    parser.add_argument("--intervals", action="store_true",
                        help="also print each variant's AUROC with an interval over groups, then episodes (runs "
                             "as a level when pooled) and its paired difference from the first variant")
    parser.add_argument("--rank-mean", action="store_true",
                        help="also score the mean rank of every variant's out-of-fold scores (an ensemble)")
    args = parser.parse_args(argv)
    for run in args.runs:
        if not (run / "pipeline.json").exists():
            raise SystemExit(f"{run / 'pipeline.json'}: not found; give folders written by `helpgate pipeline`.")
    for variant in args.variants:
        parse_variant(variant)  # every variant checked before the first hour of training
    if args.partial:
        text = "\n\n".join(partial_table(run, args.variants, args.out) for run in args.runs)
        print(text)
        return text
    results = {v: [trained(run, v, args.out) for run in args.runs] for v in args.variants}
    text = table(results, args.runs)
    if args.rank_mean:
        aurocs = [rank_mean_auroc(run, args.variants, args.out) for run in args.runs]
        text += (f"\n| rank mean of {' + '.join(args.variants)} | " + " | ".join(f"{a:.3f}" for a in aurocs)
                 + f" | **{np.mean(aurocs):.3f}** | | | |")
    if args.intervals:
        text += "\n\n" + interval_table(args.runs, args.variants, args.out)
    print(text)
    return text


if __name__ == "__main__":
    main()
