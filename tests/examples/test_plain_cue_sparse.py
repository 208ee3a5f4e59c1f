"""The sparse plain-cue river, the PRM targets that need no step reward, and the choice made on training folds."""

import itertools
import json
import random

import numpy as np
import polars as pl
import pytest

from agile.rollout import run_episodes
from agile.seeding import stable_uniform
from examples import plain_cue, plain_cue_sparse
from examples.plain_cue import HORIZON, RISK_ODDS, SLIP, make_agent
from examples.plain_cue_optimum import optimum
from helper.data.collect import records_frame
from prm.data.labels import add_labels, has_branches


def _play(episode, helped: list[bool]):
    """Step ``episode`` with the base agent, or the expert where ``helped``; (rewards, success)."""
    agent, rewards = make_agent(), []
    while not episode.done:
        t = episode.position
        action = episode.expert_action() if helped[t] else agent.act([episode.observe()])[0]
        rewards.append(episode.step(action).reward)
    return rewards, episode.success()


def test_sparse_pays_only_at_the_end_and_keeps_every_outcome():
    """Same rivers, same success for every intervention pattern: the optimum, which maximises success, is the
    dense one; only where the reward is paid moves (all of it at the last step)."""
    dense_rivers, sparse_rivers = plain_cue.make_episodes("train", 30, 3), plain_cue_sparse.make_episodes("train", 30, 3)
    for dense, sparse in zip(dense_rivers, sparse_rivers):
        assert (dense.episode_id, dense.risks, dense.texts) == (sparse.episode_id, sparse.risks, sparse.texts)
        for helped in itertools.product((False, True), repeat=HORIZON):
            d_rewards, d_success = _play(dense.clone(), list(helped))
            s_rewards, s_success = _play(sparse.clone(), list(helped))
            assert s_success == d_success and len(s_rewards) == len(d_rewards)
            assert s_rewards[:-1] == [0.0] * (len(s_rewards) - 1) and s_rewards[-1] == s_success


def _frame(episodes: list[tuple[str, int, float]]) -> pl.DataFrame:
    rows = []
    for episode_id, steps, success in episodes:
        for t in range(steps):
            rows.append({"episode_id": episode_id, "step": t, "state_text": f"{episode_id} s{t}", "action_text": "a",
                         "success": success, "reward": 0.0, "done": t == steps - 1})
    return pl.DataFrame(rows)


def test_fatal_label_marks_the_step_a_failed_episode_ended_on():
    frame = add_labels(_frame([("a", 3, 0.0), ("b", 3, 1.0), ("c", 1, 0.0), ("d", 2, 0.25)]), threshold=0.5)
    assert frame["label_fatal"].to_list() == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert frame["label_mc"].null_count() == frame.height and not has_branches(frame)


def _slipped(episode, t: int) -> bool:
    """Whether the base agent slips at crossing ``t`` of ``episode``: its own draw, computed apart."""
    return stable_uniform(episode.episode_id, t, "slip") < SLIP[episode.risks[t]]


def test_mc_labels_equal_the_brute_force_outcomes_of_both_branches():
    """Every decision's cloned branches (act / intervene here, then the agent alone) against the outcome
    computed from the agent's own slip draws: the branch made it iff no crossing it left to the agent slipped."""
    episodes = plain_cue_sparse.make_episodes("train", 40, 7)
    truth = {e.episode_id: e for e in plain_cue_sparse.make_episodes("train", 40, 7)}
    records = run_episodes(episodes, make_agent(), budget=2, explore_p=0.3, rng_seed=5, counterfactual=True)
    frame = add_labels(records_frame(records, counterfactual=True))
    assert has_branches(frame) and frame.height > 40
    lows = 0
    for row in frame.iter_rows(named=True):
        river, t = truth[row["episode_id"]], row["step"]
        rest = all(not _slipped(river, u) for u in range(t + 1, river.horizon))
        base = float(rest and not _slipped(river, t))
        assert (row["cf_base_success"], row["cf_intervene_success"]) == (base, float(rest))
        assert row["label_mc"] == 1.0 - max(float(rest) - base, 0.0)
        lows += row["label_mc"] == 0.0
    assert lows > 0  # some decision is one where intervening saves the episode


def _simulated_rows(episodes: int, seed: int, noise: float) -> pl.DataFrame:
    """Sparse plain-cue logged by random exploration, the risk read by a score with ``noise`` (no LLM)."""
    rng = random.Random(seed)
    centre = {"calm": 0.9, "tricky": 0.55, "dangerous": 0.2}
    names, weights = list(RISK_ODDS), list(RISK_ODDS.values())
    rows = []
    for i in range(episodes):
        p, left = (0.0, 0.2, 0.4, 0.6)[i % 4], 2
        risks = rng.choices(names, weights, k=HORIZON)
        trail = []
        for t, risk in enumerate(risks):
            helped = bool(left) and rng.random() < p
            slipped = not helped and rng.random() < SLIP[risk]
            trail.append({"episode_id": f"e{i}", "step": t, "intervened": helped, "budget_left": left,
                          "prm_score": centre[risk] + noise * (rng.random() - 0.5), "done": slipped or t == HORIZON - 1})
            left -= helped
            if slipped:
                break
        success = float(len(trail) == HORIZON and not slipped)
        for row in trail:
            rows.append(row | {"success": success, "reward": success if row["done"] else 0.0})
    return pl.DataFrame(rows)


def test_the_held_out_solve_finds_the_optimum_and_prices_a_blind_binning():
    """Cross-validated over folds of episodes, a solve on scores that tell the risks apart is worth the exact
    optimum in the held-out folds' models (within sampling error), and one bin (no risk seen) is worth less."""
    from helper.solve.solve_command import own_rewards
    from tabular_rl.choice.held_out import held_out_values
    from tabular_rl.transitions import Columns

    frame = _simulated_rows(3000, 0, noise=0.1)
    folds = frame["episode_id"].str.slice(1).cast(pl.Int64).to_numpy() % 5
    own = own_rewards(frame, Columns())
    # Where only the end is rewarded the agent's own outcome is its survival of the step.
    fatal = frame["done"].to_numpy() & (frame["success"].to_numpy() < 0.5)
    assert np.array_equal(np.isnan(own), frame["intervened"].to_numpy())
    assert np.array_equal(own[~np.isnan(own)], (~fatal)[~np.isnan(own)].astype(float))
    seen = held_out_values(frame, folds, [1, 2], bins=6, binning="supervised", targets=own)
    blind = held_out_values(frame, folds, [1, 2], bins=1, binning="quantile")
    for c in (1, 2):
        assert seen[c] == pytest.approx(optimum(c)[0], abs=0.03)
        assert blind[c] < seen[c] - 0.05


def test_the_choice_is_made_on_training_folds_and_builds_no_test_episode(tmp_path, monkeypatch, one_torch_thread):
    from helper.commands.choose import binning_values, choose, scored_rows
    from helper.commands.pipeline import PipelineConfig
    from helper.data import collect
    from helper.data.environment import EnvSpec

    spec = EnvSpec(env="examples.plain_cue_sparse:make_episodes", agent="examples.plain_cue:make_agent")
    data = tmp_path / "trajectories"
    collect.run(collect.CollectConfig(spec=spec, split="train", episodes=48, budget=2, explore_p=[0.0, 0.3, 0.6],
                                      seed=0, out=str(data), shard_size=16))

    def refuse(split, count, seed):
        raise AssertionError(f"the choice built {count} {split} episodes")

    monkeypatch.setattr(plain_cue_sparse, "make_episodes", refuse)
    monkeypatch.setattr(plain_cue, "make_episodes", refuse)
    cfg = PipelineConfig(spec=spec, prm_model="tiny", prm_pooling="mean", prm_folds=2, seed=0)
    assert (cfg.prm_target_name(), cfg.binning_name()) == ("auto", "auto")
    choice = choose(cfg, str(data), tmp_path / "choose", [1, 2])
    assert choice["rows"].startswith("training collection only (48 episodes")
    candidates = {(c["target"], c["word_features"], c["binning"]): c for c in choice["candidates"]}
    # the words head is tried with the step target only (fatal)
    assert set(candidates) == {(t, w, b) for t, w in (("soft", False), ("fatal", False), ("fatal", True))
                               for b in ("quantile", "supervised")}
    best = max(candidates.values(), key=lambda c: c["mean_held_out_success"])
    assert (choice["target"], choice["word_features"], choice["binning"]) == (
        best["target"], best["word_features"], best["binning"])
    # The recorded evidence is the cross-validated solve on the PRM's out-of-fold scores of training rows.
    folder = f"prm-mean-{choice['target']}" + ("-words" if choice["word_features"] else "")
    scored, folds = scored_rows(str(data), tmp_path / "choose" / folder)
    assert set(scored["episode_id"]) <= set(pl.read_parquet(data / "*.parquet")["episode_id"])
    again = binning_values(scored, folds, [1, 2], cfg.bins, [choice["binning"]])[choice["binning"]]
    assert {str(c): v for c, v in again.items()} == best["held_out_success"]
    assert json.loads((tmp_path / "choose" / "choice.json").read_text())["target"] == choice["target"]


def test_auto_is_the_default_only_for_plug_in_envs_and_mc_needs_branches(tmp_path):
    from helper.commands.pipeline import PipelineConfig, run
    from helper.data.environment import EnvSpec

    plug_in = PipelineConfig(spec=EnvSpec(env="examples.plain_cue_sparse:make_episodes",
                                          agent="examples.plain_cue:make_agent"), prm_model="tiny")
    assert (plug_in.prm_target_name(), plug_in.pooling_name(), plug_in.binning_name()) == ("auto",) * 3
    fixed = PipelineConfig(spec=plug_in.spec, prm_target="fatal", prm_pooling="mean", binning="supervised")
    assert not fixed.chooses() and fixed.prm_train_config("d", "o").base_only
    productqa = PipelineConfig(decide_after="state")
    assert (productqa.prm_target_name(), productqa.pooling_name(), productqa.binning_name()) == (
        "process", "last", "quantile")
    with pytest.raises(ValueError, match="add --counterfactual"):
        run(PipelineConfig(spec=plug_in.spec, prm_model="tiny", prm_target="mc", out=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()  # refused before any work
