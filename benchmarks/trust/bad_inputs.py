"""Bad inputs and what the CLI says to each: a markdown table for RESULTS ("Errors a user can act on").

    python benchmarks/trust/bad_inputs.py                 # builds everything in a temporary folder
    python benchmarks/trust/bad_inputs.py --keep runs/bad # keeps the folder for a look
    python benchmarks/trust/bad_inputs.py --only manifest # only the cases whose description says so

Good inputs are made first with the project's own commands on tiny sizes (a simulator collection,
a PRM on the random-initialised ``tiny`` backbone, its scores, a solve, a helper). Each bad input
is derived from them and handed to the real command in a fresh process (``python -m helper.commands.cli``),
offline. The cases come in groups (``CASE_GROUPS``: the first table's cases, shard columns,
manifests, numeric options, solve folders, helper and PRM folders, plug-ins, then issue 61's families:
files, outputs, budget lists and kills, then serving, plug-ins and reports; then round four,
``hostile.GROUPS``: files, kills, serving, CLI and plug-ins as a hostile user tries them); a new feature's
refusals are one more group. Each case is judged: exit code 2 (0 for an input handled with a
warning or rightly redone), no traceback, the message names the file, field or option (``Case.names``), and the
file a later run would trust (``solve.json``, ``helper.json``, a shard, a manifest) is not left
behind; a request to a served gate (``Case.call``) by its HTTP status (a 4xx naming the field, or 200 with
budgets kept). The table gives the exit code (or status), the verdict and the line a user reads.
Takes about 35 minutes on a shared 2-core CPU (each case is a fresh process that imports torch).
``--groups cli_cases,serving_cases`` builds and runs only those groups.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}


def build_good(root: Path) -> dict[str, Path]:
    """A trajectory folder, a tiny PRM, the scored folder, a solve folder and a helper folder."""
    from agile.envs.catalog_generator import default_catalog_dir
    from helper.data.collect import CollectConfig
    from helper.data.collect import run as collect
    from helper.stored_config import config_of
    from helper.solve.distill import DistillConfig
    from helper.solve.distill import run as distill
    from helper.solve.solve_command import SolveConfig
    from helper.solve.solve_command import run as solve
    from prm.scoring.score import ScoreConfig, run_score
    from prm.training.train import TrainConfig, run_train

    catalog = default_catalog_dir(seed=0)
    paths = {name: root / name for name in ("trajectories", "prm", "scored", "solve", "helper")}
    collect(config_of(CollectConfig, data=str(catalog), out=str(paths["trajectories"]), episodes=24,
                          questions_per_episode=4, shard_size=12, explore_p=[0.0, 0.3, 0.6], seed=3))
    run_train(TrainConfig(data=str(paths["trajectories"]), out=str(paths["prm"]), model="tiny",
                          progress=False))
    run_score(ScoreConfig(data=str(paths["trajectories"]), model=str(paths["prm"]),
                          out=str(paths["scored"]), progress=False))
    solve(SolveConfig(data=str(paths["scored"]), budgets=[1, 2], bins=3, out=str(paths["solve"])))
    distill(DistillConfig(labels=str(paths["solve"]), prm=str(paths["prm"]), out=str(paths["helper"])))
    paths["catalog"] = catalog
    return paths


def variant(good: Path, out: Path, change) -> Path:
    """A copy of the trajectory folder ``good`` whose shards are passed through ``change``, recorded in its
    manifests as written so (their hashes: the folder is consistent, the values in its shards are what is wrong)."""
    shutil.copytree(good, out)
    for shard in sorted(out.glob("*.parquet")):
        change(pl.read_parquet(shard)).write_parquet(shard)
    rehash(out)
    return out


def rehash(folder: Path) -> None:
    """Record each shard's current SHA-256 in the folder's manifests (as its writer would have)."""
    from trajectories.files import sha256_of

    for name in ("manifest.json", "prm_score.manifest.json"):
        path = folder / name
        if path.is_file():
            manifest = json.loads(path.read_text())
            for shard, entry in manifest.get("shards", {}).items():
                if isinstance(entry, dict) and "sha256" in entry and (folder / shard).is_file():
                    entry["sha256"] = sha256_of(folder / shard)
            path.write_text(json.dumps(manifest))


@dataclass
class Case:
    """One bad input: what is wrong, the command, and what the refusal must show."""

    what: str
    argv: list[str]
    names: str
    """Text the message must contain: the file, field or option that is wrong."""
    untrusted: Path | None = None
    """A file that must not exist afterwards (what a later run would trust: solve.json, helper.json, ...)."""
    expect: int = 2
    """The exit code: 2 (refused) unless the input is handled with a warning (0)."""
    after: Callable[[], str | None] | None = None
    """A check run after the command, for a case whose right answer is to redo its work: None, or what is wrong."""
    call: Callable[[], tuple[int, str, str]] | None = None
    """Instead of ``helpgate ARGV``: a call returning (exit code or HTTP status, the line a user reads, the log) (a
    request to a served gate, a pipe); ``expect`` is then the status (an HTTP 4xx for a refusal, 200 for a right
    answer)."""
    shown: str | None = None
    """How the table shows a ``call`` case's command."""


def _set_row0(column: str, value) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """A change that sets ``column`` on the first row of a shard."""
    return lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(value))
                                    .otherwise(pl.col(column)).alias(column))


def earlier_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """The cases of the first table (kept, in their order)."""
    scored, bad = good["scored"], root / "bad"

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
        Case("shard without the `success` column", ["solve", "--data", scored_variant("no-success", lambda f: f.drop("success"))], "success"),
        Case("`step` stored as text", ["solve", "--data", scored_variant("step-text", lambda f: f.with_columns(pl.col("step").cast(pl.Utf8)))], "'step'"),
        Case("`prm_score` NaN", ["solve", "--data", scored_variant("nan", lambda f: f.with_columns(pl.lit(float("nan")).alias("prm_score")))], "prm_score"),
        Case("`prm_score` +inf on one row", ["solve", "--data", scored_variant("inf", _set_row0("prm_score", float("inf")))], "'prm_score'"),
        Case("`prm_score` -inf on one row", ["solve", "--data", scored_variant("-inf", _set_row0("prm_score", float("-inf")))], "'prm_score'"),
        Case("`success` outside [0, 1]", ["solve", "--data", scored_variant("success-7", lambda f: f.with_columns(pl.lit(7.0).alias("success")))], "'success'"),
        Case("negative budget", ["solve", "--data", str(scored), "--budgets", "-1"], "budgets="),
        Case("huge budget (10^9)", ["solve", "--data", str(scored), "--budgets", "1000000000", "--out", str(bad / "solve-huge")], "budget=", bad / "solve-huge" / "solve.json"),
        Case("budget not a number", ["solve", "--data", str(scored), "--budgets", "two"], "--budgets"),
        Case("empty data folder", ["solve", "--data", str(empty)], "empty"),
        Case("data folder that does not exist", ["prm", "score", "--data", str(bad / "nowhere"), "--model", str(good["prm"])], "nowhere"),
        Case("shard with zero rows", ["solve", "--data", scored_variant("zero-rows", lambda f: f.head(0))], "zero-rows"),
        Case("corrupt Parquet shard", ["solve", "--data", str(corrupt)], "shard-00000.parquet"),
        Case("helper folder missing discretizer.json", ["evaluate", "--helper", str(helper_missing), "--episodes", "2", "--out", str(bad / "ev1")], "discretizer.json"),
        Case(f"helper folder with {biggest.name} cut in half", ["evaluate", "--helper", str(helper_tampered), "--episodes", "2", "--out", str(bad / "ev2")], biggest.name),
        Case("PRM folder of another backbone", ["prm", "score", "--data", str(scored), "--model", str(other_backbone), "--out", str(bad / "sc1")], "prm-other-backbone", bad / "sc1" / "shard-00000.parquet"),
        Case("over-long episode (a 200k-character state)", ["prm", "score", "--data", scored_variant("long", long_state), "--model", str(good["prm"]), "--out", str(bad / "sc2")], "max_length", expect=0),
        Case("unknown environment name", [*collect, "--env", "minecraft", "--out", str(bad / "c1")], "env='minecraft'"),
        Case("unknown model name", [*collect, "--agent", "llm", "--model", "no-such/model", "--out", str(bad / "c2")], "no-such/model"),
        Case("negative episode count", ["collect", "--data", catalog, "--episodes", "-3", "--out", str(bad / "c3")], "episodes"),
        Case("explore_p outside [0, 1]", [*collect, "--explore-p", "1.5", "--out", str(bad / "c4")], "explore_p"),
        Case("ProductQA root that does not exist", ["collect", "--data", str(bad / "no-catalog"), "--out", str(bad / "c5")], "no-catalog"),
        Case("output folder holding other files", [*collect, "--out", str(foreign)], "foreign"),
        Case("resume with another budget", ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "24", "--shard-size", "12", "--explore-p", "0", "0.3", "0.6", "--seed", "3", "--budget", "5", "--out", str(good["trajectories"])], "budget=5"),
        Case("corrupt SFT data file", ["agile", "sft", "--model", "tiny", "--data-file", str(jsonl), "--out", str(bad / "sft"), "--no-save"], "sft.jsonl"),
        Case("unknown command", ["sovle", "--data", str(scored)], "'sovle'"),
    ]


def column_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Numbers in a shard's columns out of range."""
    bad = root / "bad"

    def solve(what, change, names):
        name = "col-" + re.sub(r"\W+", "-", what).strip("-")
        data = variant(good["scored"], bad / name, change)
        return Case(what, ["solve", "--data", str(data), "--out", str(bad / f"{name}-solve")], names,
                    bad / f"{name}-solve" / "solve.json")

    return [
        solve("`prm_score` 1.5 on one row", _set_row0("prm_score", 1.5), "'prm_score'"),
        solve("`prm_score` -0.2 on one row", _set_row0("prm_score", -0.2), "'prm_score'"),
        solve("`budget_left` -3 on one row", _set_row0("budget_left", -3), "'budget_left'"),
        solve("`step` -1 on one row", _set_row0("step", -1), "'step'"),
        solve("`step` 10^12 on one row", _set_row0("step", 10**12), "step"),
        solve("`horizon` 0 on one row", _set_row0("horizon", 0), "'horizon'"),
        solve("`explore_p` 3 on one row", _set_row0("explore_p", 3.0), "'explore_p'"),
        solve("`reward` +inf on one row", _set_row0("reward", float("inf")), "'reward'"),
    ]


def manifest_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Shards that disagree with the manifest that lists them (collection's and prm score's)."""
    bad, scored = root / "bad", good["scored"]

    def in_place(name: str) -> Path:
        """The scored shards with the collection's manifest: a folder scored in place."""
        folder = Path(shutil.copytree(scored, bad / name))
        shutil.copy(good["trajectories"] / "manifest.json", folder / "manifest.json")
        (folder / "prm_score.manifest.json").unlink()
        return folder

    def solve(what, folder, names):
        return Case(what, ["solve", "--data", str(folder), "--out", str(folder) + "-solve"], names,
                    Path(str(folder) + "-solve") / "solve.json")

    deleted = in_place("m-deleted")
    (deleted / "shard-00001.parquet").unlink()
    zero = in_place("m-zero")
    pl.read_parquet(zero / "shard-00001.parquet").head(0).write_parquet(zero / "shard-00001.parquet")
    copied = in_place("m-copied")
    shutil.copy(copied / "shard-00000.parquet", copied / "shard-00001.parquet")
    over = in_place("m-over-budget")
    frame = pl.read_parquet(over / "shard-00001.parquet")
    frame.with_columns(pl.col("budget_left") + 2).write_parquet(over / "shard-00001.parquet")  # a budget-4 run
    extra = in_place("m-extra")
    shutil.copy(extra / "shard-00001.parquet", extra / "shard-00002.parquet")
    listed = in_place("m-list")
    (listed / "manifest.json").write_text("[]")
    broken = in_place("m-broken")
    (broken / "manifest.json").write_text('{"config": {"budget": 2}, "shards": ')
    score_deleted = Path(shutil.copytree(scored, bad / "s-deleted"))
    (score_deleted / "shard-00001.parquet").unlink()
    score_rows = Path(shutil.copytree(scored, bad / "s-rows"))
    pl.read_parquet(score_rows / "shard-00001.parquet").head(5).write_parquet(score_rows / "shard-00001.parquet")
    resume_list = Path(shutil.copytree(good["trajectories"], bad / "c-list"))
    (resume_list / "manifest.json").write_text('["shard-00000.parquet"]')
    catalog = str(good["catalog"])
    return [
        solve("listed shard deleted under a complete manifest", deleted, "shard-00001.parquet"),
        solve("listed shard with 0 rows under a complete manifest", zero, "shard-00001.parquet"),
        solve("shard holding another shard's episodes", copied, "shard-00001.parquet"),
        solve("shard of a budget-4 collection under budget=2", over, "shard-00001.parquet"),
        solve("unlisted shard in a complete collection", extra, "shard-00002.parquet"),
        solve("manifest.json is a JSON list", listed, "manifest.json"),
        solve("manifest.json cut short", broken, "manifest.json"),
        solve("prm score's manifest lists a deleted shard", score_deleted, "shard-00001.parquet"),
        solve("prm score's manifest: shard rows changed", score_rows, "shard-00001.parquet"),
        Case("collect resuming over a manifest that is a JSON list", ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "24", "--shard-size", "12", "--explore-p", "0", "0.3", "0.6", "--seed", "3", "--out", str(resume_list)], "manifest.json"),
    ]


def option_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Numeric options out of range or not finite, refused before any work."""
    bad, scored, catalog = root / "bad", str(good["scored"]), str(good["catalog"])
    traj = str(good["trajectories"])

    def solve(what, *options, names):
        out = bad / f"o-solve-{len(what)}-{abs(hash(what)) % 10**6}"
        return Case(what, ["solve", "--data", scored, *options, "--out", str(out)], names, out / "solve.json")

    def distill(what, *options, names):
        out = bad / f"o-distill-{abs(hash(what)) % 10**6}"
        return Case(what, ["distill", "--labels", str(good["solve"]), "--prm", str(good["prm"]), *options,
                           "--out", str(out)], names, out / "helper.json")

    collect = ["collect", "--data", catalog, "--questions-per-episode", "4"]
    return [
        solve("solve --bins 0", "--bins", "0", names="bins="),
        solve("solve --bins 10^9 (tables of exabytes)", "--bins", "1000000000", names="bins="),
        solve("solve --bins 10^6", "--bins", "1000000", names="bins="),
        solve("solve --step-buckets 10^9", "--step-buckets", "1000000000", names="step_buckets="),
        solve("solve --step-buckets -1", "--step-buckets", "-1", names="step_buckets="),
        solve("solve --smoothing nan", "--smoothing", "nan", names="--smoothing"),
        solve("solve --smoothing -1", "--smoothing", "-1", names="smoothing="),
        solve("solve --shaping inf", "--shaping", "inf", names="--shaping"),
        solve("solve --backoff -2", "--backoff", "-2", names="backoff="),
        solve("solve --method magic", "--method", "magic", names="method="),
        solve("solve --memory-limit-gb 0", "--memory-limit-gb", "0", names="memory_limit_gb="),
        solve("solve --advice-cost nan", "--advice-cost", "nan", names="--advice-cost"),
        solve("solve --data ''", "--data", "", names="data=''"),
        distill("distill --max-rows 0", "--max-rows", "0", names="max_rows="),
        distill("distill --test-fraction 1.5", "--test-fraction", "1.5", names="test_fraction="),
        distill("distill --test-fraction nan", "--test-fraction", "nan", names="--test-fraction"),
        distill("distill --solved-budget 7 (not solved)", "--solved-budget", "7", names="solved_budget=7"),
        distill("distill --text-lr 0", "--text-lr", "0", names="text_lr="),
        Case("collect --episodes 10^12", [*collect, "--episodes", "1000000000000", "--out", str(bad / "o-c1")], "episodes=", bad / "o-c1" / "manifest.json"),
        Case("collect --shard-size 0", [*collect, "--episodes", "4", "--shard-size", "0", "--out", str(bad / "o-c2")], "shard_size", bad / "o-c2" / "manifest.json"),
        Case("collect --budget -1", [*collect, "--episodes", "4", "--budget", "-1", "--out", str(bad / "o-c3")], "budget", bad / "o-c3" / "manifest.json"),
        Case("collect --explore-p nan", [*collect, "--episodes", "4", "--explore-p", "nan", "--out", str(bad / "o-c4")], "--explore-p", bad / "o-c4" / "manifest.json"),
        Case("prm export --success-threshold nan", ["prm", "export", "--data", traj, "--success-threshold", "nan", "--out", str(bad / "o-e1.jsonl")], "--success-threshold", bad / "o-e1.jsonl"),
        Case("prm export --success-threshold 2", ["prm", "export", "--data", traj, "--success-threshold", "2", "--out", str(bad / "o-e2.jsonl")], "success_threshold=", bad / "o-e2.jsonl"),
        Case("prm train --success-threshold nan", ["prm", "train", "--data", traj, "--model", "tiny", "--success-threshold", "nan", "--out", str(bad / "o-t1")], "--success-threshold", bad / "o-t1" / "prm_config.json"),
        Case("prm score --data ''", ["prm", "score", "--data", "", "--model", str(good["prm"])], "data=''"),
        Case("prm export --data ''", ["prm", "export", "--data", "", "--out", str(bad / "o-e3.jsonl")], "data=''", bad / "o-e3.jsonl"),
    ]


def solve_folder_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Solve folders that are not what their latest solve wrote."""
    bad = root / "bad"

    def folder(name: str) -> Path:
        return Path(shutil.copytree(good["solve"], bad / name))

    stale = folder("sv-stale")
    shutil.copy(stale / "policy_c2.npz", stale / "policy_c3.npz")  # what an earlier solve with C=3 left
    unrecorded = folder("sv-no-record")
    (unrecorded / "solve.json").unlink()
    changed = folder("sv-changed")
    pl.read_parquet(changed / "labels.parquet").head(10).write_parquet(changed / "labels.parquet")
    listed = folder("sv-list")
    (listed / "solve.json").write_text("[]")
    truncated = folder("sv-truncated")
    policy = truncated / "policy_c2.npz"
    policy.write_bytes(policy.read_bytes()[:100])

    def distill(what, source, names):
        out = bad / f"{source.name}-helper"
        return Case(what, ["distill", "--labels", str(source), "--prm", str(good["prm"]), "--out", str(out)], names,
                    out / "helper.json")

    return [
        distill("stale policy_c3.npz left by an earlier solve", stale, "policy_c3.npz"),
        distill("solve folder without solve.json (older or cut short)", unrecorded, "solve.json"),
        distill("labels.parquet changed after the solve", changed, "labels.parquet"),
        distill("solve.json is a JSON list", listed, "solve.json"),
        distill("policy_c2.npz truncated after the solve", truncated, "policy_c2.npz"),
    ]


def helper_folder_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Helper and PRM folders with a broken file."""
    bad = root / "bad"

    def helper(name: str) -> Path:
        return Path(shutil.copytree(good["helper"], bad / name))

    def prm(name: str) -> Path:
        return Path(shutil.copytree(good["prm"], bad / name))

    as_list = helper("h-list")
    (as_list / "helper.json").write_text("[]")
    no_backend = helper("h-no-backend")
    config = json.loads((no_backend / "helper.json").read_text())
    del config["backend"]
    (no_backend / "helper.json").write_text(json.dumps(config))
    cut = helper("h-cut")
    (cut / "helper.json").write_text((cut / "helper.json").read_text()[:40])
    zipped = helper("h-policy")
    (zipped / "policy.npz").write_bytes((zipped / "policy.npz").read_bytes()[:64])
    disc = helper("h-disc")
    (disc / "discretizer.json").write_text("[1, 2]")
    prm_list = prm("p-list")
    (prm_list / "prm_config.json").write_text("[]")
    head = prm("p-head")
    (head / "head.safetensors").write_bytes((head / "head.safetensors").read_bytes()[:30])
    pickled = prm("p-pickle")
    backbone = pickled / "backbone"
    for weights in backbone.glob("*.safetensors"):
        weights.unlink()
    # A pickle that names a callable: torch's weights_only loader refuses it (it would run code).
    (backbone / "pytorch_model.bin").write_bytes(pickle.dumps({"model.embed_tokens.weight": print}))
    (pickled / "features.npz").unlink(missing_ok=True)

    def evaluate(what, folder, names):
        return Case(what, ["evaluate", "--helper", str(folder), "--episodes", "2", "--out", str(folder) + "-ev"],
                    names)

    def score(what, folder, names):
        out = bad / f"{folder.name}-scored"
        return Case(what, ["prm", "score", "--data", str(good["trajectories"]), "--model", str(folder), "--out",
                           str(out)], names, out / "shard-00000.parquet")

    return [
        evaluate("helper.json is a JSON list", as_list, "helper.json"),
        evaluate("helper.json without `backend`", no_backend, "backend"),
        evaluate("helper.json cut short", cut, "helper.json"),
        evaluate("helper policy.npz truncated (BadZipFile)", zipped, "policy.npz"),
        evaluate("helper discretizer.json is a JSON list", disc, "discretizer.json"),
        score("prm_config.json is a JSON list", prm_list, "prm_config.json"),
        score("PRM head.safetensors truncated", head, "head.safetensors"),
        score("PRM backbone pytorch_model.bin a pickle (weights_only)", pickled, "p-pickle"),
    ]


PLUGINS = '''"""Plug-ins that fail in the ways a user's own code does."""
from examples.arith_chain import make_agent, make_episodes


def env_raises_runtime(split, count, seed):
    raise RuntimeError("the task server is down")


def env_raises_key(split, count, seed):
    return {}["tasks"][:count]


def agent_raises():
    raise RuntimeError("no API key set")


class _Strings:
    name = "strings"

    def act(self, observations):
        return [str(o.step) for o in observations]


def agent_strings():
    return _Strings()


class _Short:
    name = "short"

    def act(self, observations):
        return []


def agent_short():
    return _Short()


def env_step_raises(split, count, seed):
    episodes = make_episodes(split, count, seed)
    broken = type("Broken", (type(episodes[0]),), {"step": lambda self, action: {}["operand"]})
    for episode in episodes:
        episode.__class__ = broken
    return episodes
'''


def plugin_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """A user's env and agent factories that raise or return the wrong thing (``bad_plugins.py``)."""
    bad = root / "bad"
    (root / "plugins").mkdir(exist_ok=True)
    (root / "plugins" / "bad_plugins.py").write_text(PLUGINS)
    (root / "plugins" / "syntax_plugin.py").write_text("def make_episodes(split, count seed):\n    return []\n")
    env, agent = "examples.arith_chain:make_episodes", "examples.arith_chain:make_agent"

    def collect(what, env_name, agent_name, names):
        out = bad / f"p-{env_name.split(':')[1]}-{agent_name.split(':')[1]}"
        return Case(what, ["collect", "--env", env_name, "--agent", agent_name, "--episodes", "4", "--shard-size", "2",
                           "--explore-p", "0.5", "--out", str(out)], names, out / "shard-00000.parquet")

    return [
        collect("env factory raises RuntimeError", "bad_plugins:env_raises_runtime", agent, "bad_plugins:env_raises_runtime"),
        collect("env factory raises KeyError", "bad_plugins:env_raises_key", agent, "bad_plugins:env_raises_key"),
        collect("env module with a SyntaxError", "syntax_plugin:make_episodes", agent, "syntax_plugin.py:1"),
        collect("agent factory raises RuntimeError", env, "bad_plugins:agent_raises", "bad_plugins:agent_raises"),
        collect("agent returns strings, not Actions", env, "bad_plugins:agent_strings", "'strings'"),
        collect("agent returns no actions", env, "bad_plugins:agent_short", "'short'"),
        collect("episode step() raises KeyError", "bad_plugins:env_step_raises", agent, "bad_plugins.py"),
        collect("agent factory that does not exist", env, "bad_plugins:nobody", "bad_plugins:nobody"),
    ]


def round_two_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Unfinished collections, tampered helper.json values, and numeric options of every command (issue 48)."""
    from helper.solve.solve_command import SolveConfig
    from helper.solve.solve_command import run as solve

    bad = root / "bad"

    def unfinished(source: Path, name: str, missing: bool) -> Path:
        folder = Path(shutil.copytree(source, bad / name))
        manifest = folder / "manifest.json"
        if missing:
            manifest.unlink()
        else:  # as a collect SIGKILLed part way leaves it
            manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"complete": False}))
        return folder

    killed, killed_scored = unfinished(good["trajectories"], "r2-killed", False), unfinished(good["scored"], "r2-killed-scored", False)
    bare, bare_scored = unfinished(good["trajectories"], "r2-bare", True), unfinished(good["scored"], "r2-bare-scored", True)
    allowed = bad / "r2-allowed-solve"
    solve(SolveConfig(data=str(killed_scored), budgets=[1, 2], bins=3, out=str(allowed), allow_incomplete=True))

    def helper_json(name: str, **changes) -> Path:
        folder = Path(shutil.copytree(good["helper"], bad / name))
        config = json.loads((folder / "helper.json").read_text())
        for key, value in changes.items():
            head, _, tail = key.partition("__")
            config = config | ({head: config[head] | {tail: value}} if tail else {head: value})
        (folder / "helper.json").write_text(json.dumps(config))
        return folder

    traj, scored, prm = str(good["trajectories"]), str(good["scored"]), str(good["prm"])

    def out(name: str) -> Path:
        return bad / f"r2-{name}"

    cases = [
        Case("prm train on a killed collection (complete: false)", ["prm", "train", "--data", str(killed), "--model", "tiny", "--out", str(out("t1"))], "complete: false", out("t1")),
        Case("prm score on a killed collection", ["prm", "score", "--data", str(killed), "--model", prm, "--out", str(out("s1"))], "complete: false", out("s1") / "shard-00000.parquet"),
        Case("prm export of a killed collection", ["prm", "export", "--data", str(killed), "--out", str(out("e1.jsonl"))], "complete: false", out("e1.jsonl")),
        Case("solve on a killed, scored collection", ["solve", "--data", str(killed_scored), "--out", str(out("v1"))], "complete: false", out("v1") / "solve.json"),
        Case("prm train on shards without manifest.json", ["prm", "train", "--data", str(bare), "--model", "tiny", "--out", str(out("t2"))], "no manifest.json", out("t2")),
        Case("prm score on shards without manifest.json", ["prm", "score", "--data", str(bare), "--model", prm, "--out", str(out("s2"))], "no manifest.json", out("s2") / "shard-00000.parquet"),
        Case("prm export of shards without manifest.json", ["prm", "export", "--data", str(bare), "--out", str(out("e2.jsonl"))], "no manifest.json", out("e2.jsonl")),
        Case("solve on scored shards without manifest.json", ["solve", "--data", str(bare_scored), "--out", str(out("v2"))], "no manifest.json", out("v2") / "solve.json"),
        Case("distill of a solve read with --allow-incomplete", ["distill", "--labels", str(allowed), "--prm", prm, "--out", str(out("d1"))], "unfinished collection", out("d1") / "helper.json"),
    ]
    for name, changes, named in (
        ("threshold NaN", {"threshold": float("nan")}, "threshold=nan"),
        ("threshold \"nan\" (text)", {"threshold": "nan"}, "threshold='nan'"),
        ("threshold 1.5", {"threshold": 1.5}, "threshold=1.5"),
        ("threshold true", {"threshold": True}, "threshold=True"),
        ("solved_budget -1", {"solved_budget": -1}, "solved_budget=-1"),
        ("horizon 0", {"horizon": 0}, "horizon=0"),
        ("trained_on.budget -2", {"trained_on__budget": -2}, "trained_on.budget=-2"),
    ):
        folder = helper_json("r2-h-" + re.sub(r"\W+", "-", name), **changes)
        cases.append(Case(f"helper.json {name}: serve-gate", ["serve-gate", "--helper", str(folder)], named))
    options = [
        (["prm", "score", "--data", scored, "--model", prm, "--batch-tokens", "0"], "batch_tokens=0"),
        (["prm", "score", "--data", scored, "--model", prm, "--batch-tokens", "-1"], "batch_tokens=-1"),
        (["prm", "score", "--data", scored, "--model", prm, "--max-length", "0"], "max_length=0"),
        (["prm", "score", "--data", scored, "--model", prm, "--max-length", "-5"], "max_length=-5"),
        (["prm", "train", "--data", traj, "--model", "tiny", "--batch-tokens", "0"], "batch_tokens=0"),
        (["prm", "train", "--data", traj, "--model", "tiny", "--max-episodes", "0"], "max_episodes=0"),
        (["prm", "train", "--data", traj, "--model", "tiny", "--max-length", "0"], "max_length=0"),
        (["prm", "train", "--data", traj, "--model", "tiny", "--l2", "-1"], "l2=-1"),
        (["pipeline", "--bins", "0"], "bins=0"),
        (["pipeline", "--eval-episodes", "0"], "eval_episodes=0"),
        (["pipeline", "--episodes", "0"], "episodes=0"),
        (["sweep", "--helper", str(good["helper"]), "--episodes", "0"], "episodes=0"),
        (["sweep", "--helper", str(good["helper"]), "--episodes", "1000000000"], "episodes=1000000000"),
        (["evaluate", "--helper", str(good["helper"]), "--episodes", "0"], "episodes=0"),
        (["collect", "--seed", "-1"], "seed=-1"),
        (["distill", "--labels", str(good["solve"]), "--text-batch-size", "0"], "text_batch_size=0"),
        (["serve-gate", "--helper", str(good["helper"]), "--port", "70000"], "port=70000"),
        (["agile", "ppo", "--gamma", "1.5"], "gamma=1.5"),
        (["agile", "eval", "--gate-p", "2"], "gate_p=2"),
        (["report", "--budgets", "-1", "x"], "--budgets"),
        (["solve", "--data", scored, "--bins", "abc"], "--bins abc"),
        (["sweep", "--budgets", "1", "x"], "--budgets 1 x"),
        (["prm", "train", "--l2", "lots"], "--l2 lots"),
    ]
    for number, (argv, named) in enumerate(options):
        target = out(f"o{number}")
        shown = " ".join(a for a in argv if a.startswith("-") or not ("/" in a))
        cases.append(Case(f"{shown}", [*argv, *(["--out", str(target)] if argv[0] not in ("serve-gate", "agile", "report") else [])], named,
                          target if argv[0] not in ("serve-gate", "agile", "report") else None))
    return cases


PIPELINE_TINY = ["--quick", "--agent", "simulator", "--prm-model", "tiny", "--episodes", "16", "--eval-episodes", "4",
                 "--questions-per-episode", "3", "--budgets", "1", "--methods", "helper", "--prm-folds", "1"]
"""A pipeline small enough to run three times in a case (about 20 s a run on a 2-core CPU)."""


def redo_killed_after_collect(out: Path) -> None:
    """``out``: a finished tiny pipeline run, then ``--redo --bins 3`` stopped in its prm stage (its second)."""
    from helper.commands.cli import main as helpgate
    from prm.training import train

    assert helpgate(["pipeline", *PIPELINE_TINY, "--out", str(out)], experiments=True) == 0

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    original, train.run_train = train.run_train, killed
    try:
        helpgate(["pipeline", *PIPELINE_TINY, "--out", str(out), "--redo", "--bins", "3"], experiments=True)
    except KeyboardInterrupt:
        pass
    finally:
        train.run_train = original


def round_three_a_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Files, outputs, budget lists and kills of issue 61 (part A): another run's shard copied over ours or an edited
    one (content hashes), a manifest field of the wrong type, a re-score cut off between two PRMs, ``--out`` empty,
    equal to the input, another collection, a link to the input or another run's finished sweep, a budget list that
    is empty or would be ignored, and a pipeline rerun after a ``--redo`` killed after its first stage."""
    from helper.data.collect import CollectConfig
    from helper.data.collect import run as collect
    from helper.stored_config import config_of
    from prm.scoring.score import ScoreConfig, run_score

    bad, catalog, prm = root / "bad", str(good["catalog"]), str(good["prm"])
    traj, scored, solve_dir, helper = good["trajectories"], good["scored"], good["solve"], good["helper"]
    # Another run of the same episodes (same ids, same rows) at another intervention rate, scored by the same PRM.
    theirs = bad / "r3a-theirs"
    collect(config_of(CollectConfig, data=catalog, out=str(theirs), episodes=24, questions_per_episode=4,
                      shard_size=12, explore_p=[0.5], seed=3))
    run_score(ScoreConfig(data=str(theirs), model=prm, out=str(bad / "r3a-theirs-scored"), progress=False))

    def copy(source: Path, name: str) -> Path:
        return Path(shutil.copytree(source, bad / f"r3a-{name}"))

    def foreign(source: Path, name: str, donor: Path) -> Path:
        folder = copy(source, name)
        shutil.copy(donor / "shard-00000.parquet", folder / "shard-00000.parquet")
        return folder

    def edited_manifest(source: Path, name: str, edit, file: str = "manifest.json") -> Path:
        folder = copy(source, name)
        manifest = json.loads((folder / file).read_text())
        edit(manifest)
        (folder / file).write_text(json.dumps(manifest))
        return folder

    foreign_traj = foreign(traj, "foreign", theirs)
    foreign_resume = foreign(traj, "foreign-resume", theirs)
    foreign_scored = foreign(scored, "foreign-scored", bad / "r3a-theirs-scored")
    edited = copy(scored, "edited")
    shard = edited / "shard-00001.parquet"
    pl.read_parquet(shard).with_columns(pl.col("success").reverse()).write_parquet(shard)
    entry_five = edited_manifest(scored, "entry-5", lambda m: m["shards"].update({"shard-00000.parquet": 5}))
    text_true = edited_manifest(traj, "complete-text", lambda m: m.update(complete="true"))
    rows_text = edited_manifest(traj, "rows-text", lambda m: m["shards"]["shard-00001.parquet"].update(rows="48"))
    score_five = edited_manifest(scored, "score-entry-5", lambda m: m["shards"].update({"shard-00001.parquet": 5}),
                                 "prm_score.manifest.json")
    other_prm = "sha256:" + "0" * 64  # what a re-score with another PRM, cut off after shard 1, records
    two_prms = edited_manifest(scored, "two-prms", lambda m: m["shards"]["shard-00001.parquet"].update(prm=other_prm),
                               "prm_score.manifest.json")
    pending = edited_manifest(scored, "pending", lambda m: m["shards"].update(
        {"shard-00001.parquet": {"prm": other_prm, "pending": True}}), "prm_score.manifest.json")
    unlisted = edited_manifest(scored, "unlisted", lambda m: m["shards"].pop("shard-00001.parquet"),
                               "prm_score.manifest.json")
    in_place = copy(traj, "in-place")  # prm score --out '' used to score it in place
    link_source = copy(traj, "link-source")
    link = bad / "r3a-link"
    link.symlink_to(link_source, target_is_directory=True)
    own = copy(traj, "own-input")
    other = copy(theirs, "other-collection")
    run = bad / "r3a-run"
    (run / "sweep").mkdir(parents=True)
    (run / "pipeline.json").write_text("{}")
    (run / "sweep" / ".done").write_text('{"seconds": 1.0}')
    killed = bad / "r3a-killed"
    redo_killed_after_collect(killed)

    def agrees() -> str | None:
        bins = json.loads((killed / "solve" / "solution.json").read_text())["config"]["bins"]
        said = json.loads((killed / "pipeline.json").read_text())["bins"]
        return None if bins == said else f"solve used --bins {bins}, pipeline.json says {said}"

    def solve(what, folder, names):
        out = bad / f"{folder.name}-solve"
        return Case(what, ["solve", "--data", str(folder), "--budgets", "1", "2", "--bins", "3", "--out", str(out)],
                    names, out / "solve.json")

    resume = ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "24", "--shard-size", "12",
              "--explore-p", "0", "0.3", "0.6", "--seed", "3"]
    sweep = ["sweep", "--helper", str(helper), "--methods", "never", "--episodes", "2", "--budgets", "0"]
    empty_out = [
        ("collect", ["collect", "--data", catalog, "--questions-per-episode", "4", "--episodes", "4"], REPO / "manifest.json"),
        ("solve", ["solve", "--data", str(scored), "--budgets", "1", "--bins", "3"], REPO / "solve.json"),
        ("distill", ["distill", "--labels", str(solve_dir), "--prm", prm], REPO / "helper.json"),
        ("evaluate", ["evaluate", "--helper", str(helper), "--episodes", "2"], REPO / "evaluate.csv"),
        ("prm train", ["prm", "train", "--data", str(traj), "--model", "tiny"], REPO / "prm_config.json"),
        ("prm score", ["prm", "score", "--data", str(in_place), "--model", prm], in_place / "prm_score.manifest.json"),
        ("sweep", sweep, REPO / "sweep.csv"),
    ]
    return [
        Case("another run's shard copied over ours: prm export", ["prm", "export", "--data", str(foreign_traj), "--out", str(bad / "r3a-e1.jsonl")], "shard-00000.parquet", bad / "r3a-e1.jsonl"),
        Case("another run's shard copied over ours: collect resumed over it", [*resume, "--out", str(foreign_resume)], "shard-00000.parquet"),
        Case("another run's shard copied over ours: prm score", ["prm", "score", "--data", str(foreign_traj), "--model", prm, "--out", str(bad / "r3a-s1")], "shard-00000.parquet", bad / "r3a-s1" / "shard-00000.parquet"),
        solve("another run's scored shard copied over ours: solve", foreign_scored, "shard-00000.parquet"),
        solve("a scored shard edited (success reversed, same rows and ids): solve", edited, "shard-00001.parquet"),
        solve("manifest.json: a shard's entry set to 5", entry_five, "shards['shard-00000.parquet']=5"),
        Case("manifest.json: complete \"true\" (text): prm train", ["prm", "train", "--data", str(text_true), "--model", "tiny", "--out", str(bad / "r3a-t1")], "complete='true'", bad / "r3a-t1"),
        Case("manifest.json: rows \"48\" (text): prm export", ["prm", "export", "--data", str(rows_text), "--out", str(bad / "r3a-e2.jsonl")], ".rows='48'", bad / "r3a-e2.jsonl"),
        solve("prm_score.manifest.json: a shard's entry set to 5", score_five, "shards['shard-00001.parquet']=5"),
        solve("a re-score cut off between shards (two PRMs)", two_prms, "two PRMs"),
        solve("a re-score killed while it rewrote a shard (pending)", pending, "pending"),
        solve("a scored shard that prm_score.manifest.json does not list", unlisted, "shard-00001.parquet"),
        *[Case(f"{name} --out ''", [*argv, "--out", ""], "out=''", left) for name, argv, left in empty_out],
        Case("solve --out equal to --data", ["solve", "--data", str(own), "--budgets", "1", "--out", str(own)], "own input", own / "solve.json"),
        Case("solve --out inside --data", ["solve", "--data", str(own), "--budgets", "1", "--out", str(own / "solve")], "own input", own / "solve"),
        Case("prm train --out equal to --data", ["prm", "train", "--data", str(own), "--model", "tiny", "--out", str(own)], "own input", own / "prm_config.json"),
        Case("prm score --out another collection", ["prm", "score", "--data", str(scored), "--model", prm, "--out", str(other)], "holds another collection", other / "prm_score.manifest.json"),
        Case("prm score --out a link to its --data", ["prm", "score", "--data", str(link_source), "--model", prm, "--out", str(link)], "under another name", link_source / "prm_score.manifest.json"),
        Case("sweep --out another run's finished sweep/", [*sweep, "--out", str(run / "sweep")], "finished sweep stage", run / "sweep" / "summary.json"),
        Case("evaluate --budgets (an empty list)", ["evaluate", "--helper", str(helper), "--episodes", "2", "--budgets", "--out", str(bad / "r3a-ev")], "budgets=[]", bad / "r3a-ev"),
        Case("solve --advice-cost 0.1 --budgets 1 2", ["solve", "--data", str(scored), "--advice-cost", "0.1", "--budgets", "1", "2", "--out", str(bad / "r3a-priced")], "drop --budgets or --advice-cost", bad / "r3a-priced"),
        Case("pipeline rerun after --redo --bins 3 was killed in its prm stage (redoes; settings and solve agree)", ["pipeline", *PIPELINE_TINY, "--out", str(killed), "--bins", "3"], "", expect=0, after=agrees),
    ]


MISBEHAVING = REPO / "tests" / "misbehaving_plugins.py"
"""Plug-ins that exit, interrupt, hang, never end or return the wrong thing (issue 61), shared with the tests."""


def round_three_b_cases(root: Path, good: dict[str, Path]) -> list[Case]:
    """Serving, plug-ins, guarantees, reports and helper folders of issue 61 (part B): a plug-in that exits,
    interrupts itself, hangs, never ends, returns None or a class, or whose ids collide across batches; a port in
    use or a file that is no ledger; a calibration on a helper whose PRM is missing; one run pooled twice; a
    guarantee.json cut short or without ``member`` (handled with a warning); a classifier of another distill."""
    import socket

    from helper.solve.distill import DistillConfig
    from helper.solve.distill import run as distill

    bad = root / "bad"
    (root / "plugins").mkdir(exist_ok=True)
    (root / "plugins" / "misbehaving_plugins.py").write_text(MISBEHAVING.read_text())
    env, agent = "examples.arith_chain:make_episodes", "examples.arith_chain:make_agent"

    def collect(what, env_name, agent_name, names, *extra):
        out = bad / f"r3-{env_name.split(':')[1]}-{agent_name.split(':')[1]}"
        return Case(what, ["collect", "--env", env_name, "--agent", agent_name, "--episodes", "4", "--shard-size", "4",
                           "--batch-size", "2", "--explore-p", "0.5", "--out", str(out), *extra], names,
                    out / "shard-00000.parquet")

    def helper(name: str) -> Path:
        return Path(shutil.copytree(good["helper"], bad / name, ignore=shutil.ignore_patterns("serve-ledger.sqlite*")))

    no_prm = helper("r3-no-prm")
    config = json.loads((no_prm / "helper.json").read_text())
    (no_prm / "helper.json").write_text(json.dumps(config | {"prm": str(bad / "gone"), "prm_absolute": str(bad / "gone")}))
    no_member, cut = helper("r3-no-member"), helper("r3-cut")
    from helper.gates.certify import helper_fingerprint

    record = {"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "target": 0.9, "n": 40,
              "data_fingerprint": "sha256:x", "helper_fingerprint": helper_fingerprint(no_member)}
    (no_member / "guarantee.json").write_text(json.dumps(record))
    (cut / "guarantee.json").write_text(json.dumps(record | {"member": {"budget": 1}})[:60])
    distill(DistillConfig(labels=str(good["solve"]), prm=str(good["prm"]), out=str(bad / "r3-seed1"), seed=1,
                          members=False))
    mixed = helper("r3-mixed")
    shutil.rmtree(mixed / "classifier")
    shutil.copytree(bad / "r3-seed1" / "classifier", mixed / "classifier")  # the same feature names, other weights
    run = bad / "r3-run"
    (run / "sweep").mkdir(parents=True)
    played = {("never", 0): [0, 0, 0, 0], ("always", 4): [1, 1, 1, 1], ("helper", 1): [1, 1, 0, 1],
              ("random", 1): [0, 1, 0, 1]}  # a finished sweep of four episodes in two groups
    pl.DataFrame([{"method": m, "budget": c, "episode_id": f"e{k}", "group": "ab"[k // 2], "success": float(v),
                   "interventions": float(min(c, 4))} for (m, c), values in played.items()
                  for k, v in enumerate(values)]).write_csv(run / "sweep" / "episodes.csv")
    (run / "sweep" / "summary.json").write_text(json.dumps({"config": {"env": "toy", "agent": "simulator"}}))
    copy = Path(shutil.copytree(run, bad / "r3-run-copy"))
    (run / "helper").mkdir()
    (run / "helper" / "guarantee.json").write_text(json.dumps(record))  # without member
    busy = socket.socket()  # held open while the cases run: a port in use
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    _HELD.append(busy)
    port = str(busy.getsockname()[1])
    not_a_ledger = bad / "r3-notes.txt"
    not_a_ledger.write_text("these are notes, not a SQLite database; " * 10)

    def evaluate(what, folder, names, expect=2):  # as the helper was trained: no other warning than the case's
        return Case(what, ["evaluate", "--helper", str(folder), "--episodes", "2", "--questions-per-episode", "4",
                           "--budgets", "0", "1", "2", "--out", str(folder) + "-ev"], names, expect=expect)

    report = ["report", "--no-figures", "--resamples", "20", "--budgets", "1", "--out", str(bad / "r3-report.md")]
    return [
        collect("env factory calls sys.exit(0)", "misbehaving_plugins:exits", agent, "misbehaving_plugins:exits"),
        collect("env factory raises KeyboardInterrupt itself", "misbehaving_plugins:interrupts", agent, "misbehaving_plugins:interrupts"),
        collect("episode success() returns None", "misbehaving_plugins:no_outcome", agent, "misbehaving_plugins:no_outcome"),
        collect("agent factory returns a class", env, "misbehaving_plugins:agent_class", "misbehaving_plugins:agent_class"),
        collect("agent act() sleeps past --plugin-timeout-s 2", env, "misbehaving_plugins:sleepy", "--plugin-timeout-s", "--plugin-timeout-s", "2"),
        collect("episode that never ends (its horizon caps it)", "misbehaving_plugins:endless", agent, "--plugin-max-steps"),
        collect("episode ids that collide across batches", "misbehaving_plugins:ids_by_count", agent, "misbehaving_plugins:ids_by_count"),
        Case("serve-gate on a port already in use", ["serve-gate", "--helper", str(good["helper"]), "--port", port, "--ledger", str(bad / "r3-l1.sqlite")], f"port={port}"),
        Case("serve-gate --ledger on a file that is no ledger", ["serve-gate", "--helper", str(good["helper"]), "--ledger", str(not_a_ledger)], "r3-notes.txt"),
        Case("serve-gate --idle-episode-s 0", ["serve-gate", "--helper", str(good["helper"]), "--idle-episode-s", "0"], "idle_episode_s="),
        Case("calibrate on a helper whose PRM is missing", ["calibrate", "--helper", str(no_prm), "--episodes", "4", "--questions-per-episode", "4"], "--allow-fallback", no_prm / "guarantee.json"),
        evaluate("evaluate, guarantee.json without `member` (warned, goes on)", no_member, "guarantee.json", expect=0),
        evaluate("evaluate, guarantee.json cut short (warned, goes on)", cut, "guarantee.json", expect=0),
        evaluate("classifier/ of another distill, same feature names", mixed, "(classifier_files)"),
        Case("report R R (one run pooled twice)", [*report, str(copy), str(copy)], "are one run"),
        Case("report R R/sweep", [*report, str(copy), str(copy / "sweep")], "are one run"),
        Case("report R COPY_OF_R", [*report, str(run), str(copy)], "are one run"),
        Case("report, guarantee.json without `member` (warned, goes on)", [*report, str(run)], "guarantee.json", expect=0),
    ]


_HELD: list = []
"""Sockets held open while the cases run (a port in use)."""


CASE_GROUPS: list[Callable[[Path, dict[str, Path]], list[Case]]] = [
    earlier_cases, column_cases, manifest_cases, option_cases, solve_folder_cases, helper_folder_cases, plugin_cases,
    round_two_cases, round_three_a_cases, round_three_b_cases,
]

"""Every group of bad inputs, in table order; a new feature's refusals are one more group here."""


def bad_inputs(root: Path, good: dict[str, Path], only: str | None = None) -> list[Case]:
    """Every case of every group (of the groups named in ``only``, comma-separated, when given)."""
    import hostile  # round four: files, kills, serving, CLI and plug-ins (it builds on this module's names)

    (root / "bad").mkdir(exist_ok=True)
    groups = [g for g in [*CASE_GROUPS, *hostile.GROUPS] if not only or g.__name__ in only.split(",")]
    return [case for group in groups for case in group(root, good)]


def message(stderr: str) -> str:
    """The one line a user reads: the error line, a tyro box flattened, or a traceback's last line."""
    lines = [line for line in stderr.replace("\r", "\n").splitlines()
             if line.strip() and not re.search(r"\d+%\|", line)]
    if any(line.startswith("Traceback") for line in lines):
        return "TRACEBACK: " + lines[-1].strip()
    errors = re.findall(r"((?:helpgate|collect-offline-trajectories)[\w -]*: error: .*)", "\n".join(lines))
    if errors:
        return errors[-1].strip()
    warnings = [line for line in lines if re.search(r"\w+Warning: ", line)]
    if warnings:  # handled with a warning (the command went on)
        return "warning: " + re.split(r"\w+Warning: ", warnings[-1], maxsplit=1)[1].strip()
    if any(line.startswith("╭") for line in lines):  # tyro's box for a bad flag or value
        text = " ".join(re.sub(r"[╭╮╰╯│─]+", " ", line).strip() for line in lines)
        return " ".join(re.split(r"For full helptext", text)[0].split())
    return lines[-1].strip() if lines else ""


def error_lines(stderr: str) -> list[str]:
    """The lines a user reads on stderr: progress bars and blank lines left out."""
    return [line for line in stderr.replace("\r", "\n").splitlines()
            if line.strip() and not re.search(r"\d+%\|", line)]


def entry(argv: list[str]) -> list[str]:
    """What runs ``helpgate ARGV`` in a fresh process: the experiment entry where ARGV gives an experiment option."""
    from helper.commands.cli import gives_experiment_option

    return [str(REPO / "benchmarks" / "experiment.py")] if gives_experiment_option(argv) else ["-m", "helper.commands.cli"]


def shown_command(argv: list[str]) -> str:
    """``argv`` as the command line a user types: ``helpgate ...``, or the experiment entry's."""
    from helper.commands.cli import gives_experiment_option
    from helper.experiment_options import EXPERIMENT_ENTRY

    return (EXPERIMENT_ENTRY if gives_experiment_option(argv) else "helpgate") + " " + " ".join(a if a else "''" for a in argv)


def run_case(argv: list[str], plugins: Path | None = None) -> tuple[int, str, str]:
    """(exit code, the one line a user reads, the whole stderr) of ``helpgate ARGV`` in a fresh process."""
    env = {**os.environ, **OFFLINE}
    if plugins is not None:  # the user's own plug-in modules, importable as theirs would be
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugins), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, *entry(argv), *argv], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    return done.returncode, message(done.stderr), done.stderr


HANDLED = (0, 200)
"""Expected codes of inputs handled rightly (a warning, a redo, an answer within budget); any other is a refusal."""


def judge(case: Case, code: int, text: str, stderr: str) -> str:
    """``ok``, or what the refusal lacks."""
    if "Traceback" in stderr:
        return "traceback"
    if code != case.expect:
        return f"exit {code}"
    if case.expect not in HANDLED and case.names not in text:
        return f"does not name {case.names!r}"
    if case.untrusted is not None and case.untrusted.exists():
        return f"left {case.untrusted.name}"
    if case.after is not None and (problem := case.after()):
        return problem
    return "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="Build in this folder and keep it (default: a temporary folder).")
    parser.add_argument("--only", help="Run only the cases whose description contains this text.")
    parser.add_argument("--groups", help="Build only these groups (comma-separated function names, e.g. cli_cases).")
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    root = Path(args.keep or tempfile.mkdtemp(prefix="helpgate-bad-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        good = build_good(root)
        cases = [c for c in bad_inputs(root, good, args.groups) if not args.only or args.only in c.what]
        print("| # | bad input | command | exit | names it | message |")
        print("|---|---|---|---|---|---|")
        verdicts, one_line, slow, several = [], 0, 0, []
        for number, case in enumerate(cases, start=1):
            started = time.perf_counter()
            try:
                code, text, stderr = case.call() if case.call else run_case(case.argv, root / "plugins")
            except Exception as error:  # the harness's own failure (a server that did not start): the case's verdict
                code, text, stderr = -1, f"harness: {type(error).__name__}: {' '.join(str(error).split())[:300]}", ""
            seconds = time.perf_counter() - started
            verdicts.append(judge(case, code, text, stderr))
            one_line += case.expect == 2 and code == 2 and len(error_lines(stderr)) == 1
            if case.expect == 2 and len(error_lines(stderr)) > 1:
                several.append(number)
            slow += case.expect == 2 and seconds > 1.0
            shown = case.shown or shown_command(case.argv)
            shown = shown.replace(str(good["catalog"]), "CATALOG").replace(str(root), "…")
            text = text.replace(str(root), "…").replace("|", "\\|")
            what = case.what.replace("|", "\\|")
            print(f"| {number} | {what} | `{shown}` | {code} | {verdicts[-1]} | {text} |", flush=True)
        refused = sum(v == "ok" and c.expect == 2 for v, c in zip(verdicts, cases))
        served = sum(v == "ok" and c.expect not in (2, *HANDLED) for v, c in zip(verdicts, cases))
        handled = sum(v == "ok" and c.expect in HANDLED for v, c in zip(verdicts, cases))
        print(f"\n{refused} of {sum(c.expect == 2 for c in cases)} bad inputs are refused with exit code 2 in one "
              f"line naming the file, field or option, with no traceback and no file a later run would trust "
              f"left behind; {served} of {sum(c.expect not in (2, *HANDLED) for c in cases)} bad requests to the "
              f"served gate are refused with an HTTP 4xx naming the field; {handled} of "
              f"{sum(c.expect in HANDLED for c in cases)} handled rightly (a warning, a redo, budgets kept). "
              f"Not ok: {[(n, v) for n, v in enumerate(verdicts, 1) if v != 'ok'] or 'none'}.")
        print(f"{len(cases)} cases; {one_line} of {sum(c.expect == 2 for c in cases)} refused with exactly one line on "
              f"stderr (more than one: cases {several or 'none'}); {slow} took longer than a second to refuse (a fresh "
              f"process each, its imports included).")
    finally:
        if "hostile" in sys.modules:
            sys.modules["hostile"].stop_servers()  # servers the cases started
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
