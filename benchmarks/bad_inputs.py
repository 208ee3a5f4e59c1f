"""Bad inputs and what the CLI says to each: a markdown table for RESULTS ("Errors a user can act on").

    python benchmarks/bad_inputs.py                 # builds everything in a temporary folder
    python benchmarks/bad_inputs.py --keep runs/bad # keeps the folder for a look

Good inputs are made first with the project's own commands on tiny sizes (a simulator collection,
a PRM on the random-initialised ``tiny`` backbone, its scores, a solve, a helper). Each bad input
is derived from them and handed to the real command in a fresh process (``python -m helper.cli``
or ``python -m helper.collect``), offline. The table gives the exit code and the message: one line
for a user error (exit 2), the warning for an input the command handles and goes on with (exit
0), ``TRACEBACK`` and the exception's last line for an input that still ends in a traceback.
Takes about a minute on a 2-core CPU (more the first time the embedded SmolLM2 is converted).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}


def build_good(root: Path) -> dict[str, Path]:
    """A trajectory folder, a tiny PRM, the scored folder, a solve folder and a helper folder."""
    from agile.envs.catalog_generator import default_catalog_dir
    from helper.collect import CollectConfig
    from helper.collect import run as collect
    from helper.distill import DistillConfig
    from helper.distill import run as distill
    from helper.solve_command import SolveConfig
    from helper.solve_command import run as solve
    from prm.score import ScoreConfig, run_score
    from prm.train import TrainConfig, run_train

    catalog = default_catalog_dir(seed=0)
    paths = {name: root / name for name in ("trajectories", "prm", "scored", "solve", "helper")}
    collect(CollectConfig(data=str(catalog), out=str(paths["trajectories"]), episodes=24,
                          questions_per_episode=4, shard_size=12, explore_p=[0.0, 0.3, 0.6], seed=3))
    run_train(TrainConfig(data=str(paths["trajectories"]), out=str(paths["prm"]), model="tiny",
                          progress=False))
    run_score(ScoreConfig(data=str(paths["trajectories"]), model=str(paths["prm"]),
                          out=str(paths["scored"]), progress=False))
    solve(SolveConfig(data=str(paths["scored"]), budget=[1, 2], bins=3, out=str(paths["solve"])))
    distill(DistillConfig(labels=str(paths["solve"]), prm=str(paths["prm"]), out=str(paths["helper"])))
    paths["catalog"] = catalog
    return paths


def variant(good: Path, out: Path, change) -> Path:
    """A copy of the trajectory folder ``good`` whose shards are passed through ``change``."""
    shutil.copytree(good, out)
    for shard in sorted(out.glob("*.parquet")):
        change(pl.read_parquet(shard)).write_parquet(shard)
    return out


def bad_inputs(root: Path, good: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(what is wrong, command line) for every case."""
    scored, bad = good["scored"], root / "bad"
    bad.mkdir()

    def scored_variant(name, change):
        return str(variant(scored, bad / name, change))

    empty = bad / "empty"
    empty.mkdir()
    corrupt = Path(shutil.copytree(scored, bad / "corrupt"))
    next(iter(sorted(corrupt.glob("*.parquet")))).write_bytes(b"PAR1 this is not a parquet file")
    helper_missing = Path(shutil.copytree(good["helper"], bad / "helper-missing"))
    (helper_missing / "discretizer.json").unlink()
    helper_tampered = Path(shutil.copytree(good["helper"], bad / "helper-tampered"))
    biggest = max((p for p in helper_tampered.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
    other_backbone = Path(shutil.copytree(good["prm"], bad / "prm-other-backbone"))
    config = other_backbone / "prm_config.json"
    # The tiny PRM's head read by the embedded SmolLM2 backbone: widths differ.
    text = re.sub(r'"backbone": "[^"]*"', '"backbone": "smollm2"', config.read_text())
    config.write_text(text.replace('"backbone_saved": true', '"backbone_saved": false'))
    (other_backbone / "features.npz").unlink(missing_ok=True)  # no cached features: the backbone must run
    foreign = bad / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a trajectory folder")
    jsonl = bad / "sft.jsonl"
    jsonl.write_text('{"input_ids": [1, 2, 3], "action_mask": [0, 1\n')
    catalog = str(good["catalog"])
    collect = ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "4"]

    def long_state(frame):
        first = frame["episode_id"][0]
        return frame.with_columns(pl.when(pl.col("episode_id") == first).then(pl.lit("word " * 40_000))
                                  .otherwise(pl.col("state_text")).alias("state_text"))

    return [
        ("shard without the `success` column", ["solve", "--data", scored_variant("no-success", lambda f: f.drop("success"))]),
        ("`step` stored as text", ["solve", "--data", scored_variant("step-text", lambda f: f.with_columns(pl.col("step").cast(pl.Utf8)))]),
        ("`prm_score` NaN", ["solve", "--data", scored_variant("nan", lambda f: f.with_columns(pl.lit(float("nan")).alias("prm_score")))]),
        ("`prm_score` +inf on one row", ["solve", "--data", scored_variant("inf", lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(float("inf")).otherwise(pl.col("prm_score")).alias("prm_score")))]),
        ("`prm_score` -inf on one row", ["solve", "--data", scored_variant("-inf", lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(float("-inf")).otherwise(pl.col("prm_score")).alias("prm_score")))]),
        ("`success` outside [0, 1]", ["solve", "--data", scored_variant("success-7", lambda f: f.with_columns(pl.lit(7.0).alias("success")))]),
        ("negative budget", ["solve", "--data", str(scored), "--budget", "-1"]),
        ("huge budget (10^9)", ["solve", "--data", str(scored), "--budget", "1000000000", "--out", str(bad / "solve-huge")]),
        ("budget not a number", ["solve", "--data", str(scored), "--budget", "two"]),
        ("empty data folder", ["solve", "--data", str(empty)]),
        ("data folder that does not exist", ["prm", "score", "--data", str(bad / "nowhere"), "--model", str(good["prm"])]),
        ("shard with zero rows", ["solve", "--data", scored_variant("zero-rows", lambda f: f.head(0))]),
        ("corrupt Parquet shard", ["solve", "--data", str(corrupt)]),
        ("helper folder missing discretizer.json", ["evaluate", "--helper", str(helper_missing), "--episodes", "2", "--out", str(bad / "ev1")]),
        (f"helper folder with {biggest.name} cut in half", ["evaluate", "--helper", str(helper_tampered), "--episodes", "2", "--out", str(bad / "ev2")]),
        ("PRM folder of another backbone", ["prm", "score", "--data", str(scored), "--model", str(other_backbone), "--out", str(bad / "sc1")]),
        ("over-long episode (a 200k-character state)", ["prm", "score", "--data", scored_variant("long", long_state), "--model", str(good["prm"]), "--out", str(bad / "sc2")]),
        ("unknown environment name", [*collect, "--env", "minecraft", "--out", str(bad / "c1")]),
        ("unknown model name", [*collect, "--agent", "llm", "--model", "no-such/model", "--out", str(bad / "c2")]),
        ("negative episode count", ["collect", "--data", catalog, "--episodes", "-3", "--out", str(bad / "c3")]),
        ("explore_p outside [0, 1]", [*collect, "--explore-p", "1.5", "--out", str(bad / "c4")]),
        ("ProductQA root that does not exist", ["collect", "--data", str(bad / "no-catalog"), "--out", str(bad / "c5")]),
        ("output folder holding other files", [*collect, "--out", str(foreign)]),
        ("resume with another budget", ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "24", "--shard-size", "12", "--explore-p", "0", "0.3", "0.6", "--seed", "3", "--budget", "5", "--out", str(good["trajectories"])]),
        ("corrupt SFT data file", ["agile", "sft", "--model", "tiny", "--data-file", str(jsonl), "--out-dir", str(bad / "sft"), "--no-save"]),
        ("unknown command", ["sovle", "--data", str(scored)]),
    ]


def message(stderr: str) -> str:
    """The one line a user reads: the error line, a tyro box flattened, or a traceback's last line."""
    lines = [line for line in stderr.replace("\r", "\n").splitlines()
             if line.strip() and not re.search(r"\d+%\|", line)]
    if any(line.startswith("Traceback") for line in lines):
        return "TRACEBACK: " + lines[-1].strip()
    errors = re.findall(r"((?:helpgate|collect-offline-trajectories)[\w ]*: error: .*)", "\n".join(lines))
    if errors:
        return errors[-1].strip()
    warnings = [line for line in lines if re.search(r"\w+Warning: ", line)]
    if warnings:  # handled with a warning (the command went on)
        return "warning: " + re.split(r"\w+Warning: ", warnings[-1], maxsplit=1)[1].strip()
    if any(line.startswith("╭") for line in lines):  # tyro's box for a bad flag or value
        text = " ".join(re.sub(r"[╭╮╰╯│─]+", " ", line).strip() for line in lines)
        return " ".join(re.split(r"For full helptext", text)[0].split())
    return lines[-1].strip() if lines else ""


def run_case(argv: list[str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "helper.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **OFFLINE}, timeout=600, check=False)
    return done.returncode, message(done.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="Build in this folder and keep it (default: a temporary folder).")
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    root = Path(args.keep or tempfile.mkdtemp(prefix="helpgate-bad-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        good = build_good(root)
        cases = bad_inputs(root, good)
        print("| # | bad input | command | exit | message |")
        print("|---|---|---|---|---|")
        refused = 0
        for number, (what, command) in enumerate(cases, start=1):
            code, text = run_case(command)
            refused += code == 2 and not text.startswith("TRACEBACK")
            shown = " ".join(command).replace(str(good["catalog"]), "CATALOG").replace(str(root), "…")
            text = text.replace(str(root), "…").replace("|", "\\|")
            print(f"| {number} | {what} | `helpgate {shown}` | {code} | {text} |", flush=True)
        print(f"\n{refused} of {len(cases)} bad inputs end in exit code 2 with a message and no traceback.")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
