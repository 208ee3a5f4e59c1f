"""``helpgate prm export``: TRL's stepwise-supervision layout, the text ``prm train``
renders, and labels checked against the trajectories by brute force."""

from __future__ import annotations

import json
import math
from collections import defaultdict

import polars as pl
import pytest

from helper.commands.cli import gives_experiment_option, main
from helper.data.collect import CollectConfig, run
from helper.stored_config import config_of
from prm.inputs.render import step_pieces
from trajectories.shards import read_trajectories
from trajectories.shards import mark_complete

PLUGIN = {"env": "examples.arith_chain:make_episodes", "agent": "examples.arith_chain:make_agent"}


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "traj"
    run(config_of(CollectConfig, **PLUGIN, episodes=60, explore_p=[0.0, 0.5], budget=2, shard_size=30, out=str(out)))
    return out


def _export(trajectories, out, *options) -> list[dict]:
    argv = ["prm", "export", "--data", str(trajectories), "--out", str(out), *options]
    assert main(argv, experiments=gives_experiment_option(argv)) == 0  # --base-only: an experiment's option
    if out.suffix == ".parquet":
        return pl.read_parquet(out).to_dicts()
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_layout_is_the_rendered_episode_text(trajectories, tmp_path):
    rows = _export(trajectories, tmp_path / "d.jsonl")
    frame = read_trajectories(trajectories)
    assert len(rows) == frame["episode_id"].n_unique() == 60
    for row in rows:
        assert set(row) == {"prompt", "completions", "labels", "episode_id", "success"}
        assert isinstance(row["prompt"], str) and all(isinstance(c, str) for c in row["completions"])
        assert all(isinstance(label, bool) for label in row["labels"])
        episode = frame.filter(pl.col("episode_id") == row["episode_id"]).sort("step")
        assert len(row["completions"]) == len(row["labels"]) == episode.height
        # as TRL joins it (each completion closed by its separator "\n"), it is the text the PRM is
        # trained on (tags aside), plus the last separator
        rendered = "".join("".join(step_pieces(t, s, a, "action"))
                           for t, (s, a) in enumerate(zip(episode["state_text"], episode["action_text"])))
        assert row["prompt"] + "".join(c + "\n" for c in row["completions"]) == rendered + "\n"
        assert row["success"] == episode["success"][0]


def test_labels_match_rewards_and_outcomes(trajectories, tmp_path):
    frame = read_trajectories(trajectories)
    episodes = {eid: group.sort("step") for (eid,), group in frame.group_by("episode_id")}
    process = _export(trajectories, tmp_path / "p.parquet", "--target", "process")
    hard = _export(trajectories, tmp_path / "h.jsonl", "--target", "hard")
    soft = _export(trajectories, tmp_path / "s.jsonl")  # default: soft
    for row in process:
        assert row["labels"] == [r >= 0.5 for r in episodes[row["episode_id"]]["reward"]]
    for row in hard:
        assert row["labels"] == [episodes[row["episode_id"]]["success"][0] >= 0.5] * len(row["labels"])
    # soft: mean outcome of every episode whose text up to this step's action is the same
    outcomes = defaultdict(list)
    for row in soft:
        for t in range(len(row["completions"])):
            outcomes["\n".join([row["prompt"], *row["completions"][: t + 1]])].append(row["success"])
    shared = 0
    for row in soft:
        expected = []
        for t in range(len(row["completions"])):
            same = outcomes["\n".join([row["prompt"], *row["completions"][: t + 1]])]
            shared += len(same) > 1
            expected.append(sum(same) / len(same) >= 0.5)
        assert row["labels"] == expected
    assert shared > 0  # some episodes share a prefix: the check above is not only the hard label again


def test_base_only_and_refusals(trajectories, tmp_path, capsys):
    frame = read_trajectories(trajectories)
    clean = set(frame["episode_id"]) - set(frame.filter(pl.col("actor") != "base")["episode_id"])
    rows = _export(trajectories, tmp_path / "b.jsonl", "--base-only")
    assert {row["episode_id"] for row in rows} == clean and 0 < len(clean) < 60
    only_final = tmp_path / "final"
    only_final.mkdir()
    frame.with_columns(pl.when(pl.col("done")).then(pl.col("success")).otherwise(0.0).alias("reward")) \
        .write_parquet(only_final / "shard-00000.parquet")
    mark_complete(only_final)
    capsys.readouterr()
    assert main(["prm", "export", "--data", str(only_final), "--out", str(tmp_path / "x.jsonl"),
                 "--target", "process"]) == 2
    assert "target='process': these trajectories have no step rewards" in capsys.readouterr().err


def test_trls_own_prm_trainer_reads_the_export_and_trains(trajectories, tmp_path, monkeypatch, one_torch_thread):
    """The ecosystem's check: TRL's PRMTrainer (trl.experimental.prm, trl <= 1.13) tokenizes the
    exported file itself; its text is the text ``prm train`` renders and its step labels sit on the
    separator that closes each action (where our step tag is), with our labels; a tiny token
    classifier then trains a few steps on it."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import datasets
    import torch
    from transformers import AutoModelForTokenClassification
    from trl.experimental.prm import PRMConfig, PRMTrainer

    from agile.models import load_tokenizer, tiny_config

    rows = _export(trajectories, tmp_path / "trl.jsonl")[:8]
    (tmp_path / "few.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = datasets.load_dataset("json", data_files=str(tmp_path / "few.jsonl"), split="train",
                                    cache_dir=str(tmp_path / "cache"))
    tokenizer = load_tokenizer("tiny")
    torch.manual_seed(0)
    config = tiny_config(len(tokenizer), hidden=32)
    config.num_labels = 2  # a step is good or bad: TRL's PRM is a two-class token classifier
    model = AutoModelForTokenClassification.from_config(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = PRMConfig(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-2,
                     max_length=None, max_completion_length=None, report_to="none", save_strategy="no",
                     use_cpu=True, logging_steps=1, dataloader_num_workers=0)
    trainer = PRMTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)

    frame = read_trajectories(trajectories)
    assert len(trainer.train_dataset) == len(rows)
    for row, tokenized in zip(rows, trainer.train_dataset):
        ids, labels = tokenized["input_ids"], tokenized["labels"]
        at = [i for i, label in enumerate(labels) if label != -100]
        assert [labels[i] for i in at] == [int(label) for label in row["labels"]]
        episode = frame.filter(pl.col("episode_id") == row["episode_id"]).sort("step")
        pieces = [step_pieces(t, s, a, "action")[0] for t, (s, a) in enumerate(zip(episode["state_text"],
                                                                                    episode["action_text"]))]
        start = 1 if tokenizer.bos_token_id is not None else 0  # TRL opens the prompt with BOS
        text = lambda stop: tokenizer.decode(ids[start:stop], clean_up_tokenization_spaces=False)  # noqa: E731
        # Up to each labelled token, TRL's text is ours up to that step's tag; the labelled token is
        # the separator, which is also the newline that opens the next step.
        assert [text(i) for i in at] == ["".join(pieces[: t + 1]) for t in range(len(pieces))]
        assert all(tokenizer.decode([ids[i]]) == "\n" for i in at) and at[-1] == len(ids) - 1

    result = trainer.train()
    assert trainer.state.global_step == 3 and math.isfinite(result.training_loss)
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())
