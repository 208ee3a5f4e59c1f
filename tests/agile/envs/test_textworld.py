"""TextWorld environment, game cache and agents: real generated games, the tiny random LM.

Games are generated into a temporary folder once per test session (~1-3 s each).
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

try:
    import textworld  # noqa: F401
except ImportError as error:  # the extra is optional for users; CI installs it
    print(f"skipping tests/agile/envs/test_textworld.py: textworld is not importable ({error}); "
          f"pip install 'helpgate[textworld]' to run them.")
    pytest.skip(f"textworld is not importable: {error}", allow_module_level=True)

from agile.agents.textworld_agents import TextWorldLLMAgent, TextWorldSimulatorAgent
from agile.envs.textworld_env import (
    ADMISSIBLE_HEADER,
    ENV_NAME,
    TextWorldEpisode,
    TextWorldSource,
    admissible_commands,
    default_horizon,
    make_episodes,
    resolve_command,
)
from agile.envs.textworld_games import GameSpec, ensure_game, game_suite
from agile.protocol import BASE, HUMAN, Action
from agile.rollout import run_episodes

LENGTHS = (3, 5, 8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tw-games")


@pytest.fixture(scope="module")
def games(cache):
    return [ensure_game(spec, cache) for spec in game_suite(3, "train", LENGTHS)]


def fresh(games, seed=0):
    return [TextWorldEpisode(game, seed, f"ep-{i}-{seed}") for i, game in enumerate(games)]


def play_random(episode, rng):
    while not episode.done:
        episode.step(Action(rng.choice(admissible_commands(episode.observe().state_text))))
    return episode


# -- generation and cache --------------------------------------------------------------------

def _generate_in_child(args):
    spec, folder = args
    return ensure_game(spec, folder).generated


def test_generation_is_cached_deterministic_and_locked(games, cache, tmp_path):
    first = games[0]
    again = ensure_game(first.spec, cache)
    assert not again.generated and again.meta == first.meta and first.meta["seconds"] > 0
    assert len(first.meta["walkthrough"]) == 3 and first.meta["max_score"] == 3
    # Two fresh processes race for the same game in an empty cache: one generates, one waits,
    # and the result is byte-identical to the game generated earlier in this process.
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        generated = list(pool.map(_generate_in_child, [(first.spec, tmp_path)] * 2))
    assert sorted(generated) == [False, True]
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [first.spec.key]
    for name in ("game.json", "game.z8"):
        assert (tmp_path / first.spec.key / name).read_bytes() == (first.path.parent / name).read_bytes()
    # The compiler stamps the day into the header's serial: fixed, so two days' games are the same bytes.
    assert first.path.read_bytes()[0x12:0x18] == b"000000"


def test_splits_hold_disjoint_seeds_and_bad_specs_are_refused():
    train = {s.seed for s in game_suite(50, "train", seed=3)}
    test = {s.seed for s in game_suite(50, "test", seed=3)}
    assert not train & test
    assert [s.quest_length for s in game_suite(7, "test", (3, 8))] == [3, 8, 3, 8, 3, 8, 3]
    with pytest.raises(ValueError, match="quest_length"):
        ensure_game(GameSpec(quest_length=0))
    with pytest.raises(ValueError, match="split"):
        game_suite(2, "dev")


def test_held_out_games_are_drawn_per_seed_and_never_a_training_game():
    # The sweep's held-out episodes (split "test", the run's evaluation seed) play games drawn for
    # that seed: two seeds play different games, the same seed the same ones, and no seed's held-out
    # game is a training game (checked on the specs: nothing is generated).
    train = TextWorldSource("train", n_games=48)
    test = TextWorldSource("test", n_games=24)
    assert train.specs_for(0) == train.specs_for(1) == train.specs  # training games: one fixed set
    drawn = {seed: {s.seed for s in test.specs_for(seed)} for seed in (1000, 1001, 1002)}
    assert all(len(games) == 24 for games in drawn.values())
    assert drawn[1000] != drawn[1001] and drawn[1000] != drawn[1002] and drawn[1001] != drawn[1002]
    assert {s.seed for s in TextWorldSource("test", n_games=24).specs_for(1000)} == drawn[1000]
    training = {s.seed for s in train.specs} | {s.seed for s in game_suite(48, "train", seed=3)}
    for games in drawn.values():
        assert not games & training
        assert all(1_000_000 <= g < 2_000_000 for g in games)  # the test split's seed range
    # quest lengths still cycle as in the fixed suite, so the horizon is the same for every seed
    assert [s.quest_length for s in test.specs_for(1001)] == [s.quest_length for s in test.specs]
    drawn_train = game_suite(24, "train", draw=7)
    assert not {s.seed for s in drawn_train} & drawn[1000] and all(s.seed < 1_000_000 for s in drawn_train)


# -- the episode ------------------------------------------------------------------------------

def test_expert_wins_within_the_horizon_with_unit_return(games):
    for episode in fresh(games):
        length = episode.game.spec.quest_length
        assert episode.horizon == default_horizon(length)
        while not episode.done:
            action = episode.expert_action()
            assert action.actor == HUMAN
            result = episode.step(action)
            assert result.info["resolved"] == "exact"
        assert episode.success() == 1.0
        assert episode.steps == length  # the policy is the shortest one the generator knows
        assert sum(episode.rewards) == pytest.approx(1.0)
        assert episode.rewards == pytest.approx([1 / length] * length)  # one milestone a move


def test_random_play_mostly_fails(games):
    rng = random.Random(0)
    outcomes = [play_random(e, rng).success() for seed in range(4) for e in fresh(games, seed)]
    assert sum(outcomes) <= len(outcomes) / 3


def test_state_text_lists_the_admissible_commands_and_features(games):
    episode = fresh(games)[1]
    obs = episode.observe()
    listed = admissible_commands(obs.state_text)
    assert listed == sorted(episode.state["admissible_commands"]) and len(listed) > 1
    assert ADMISSIBLE_HEADER in obs.state_text and obs.state_text.startswith("Goal: ")
    assert (obs.env, obs.step, obs.horizon, obs.task_id) == (ENV_NAME, 0, episode.horizon, games[1].spec.key)
    # The quest length is the generator's setting, not something a deployed agent sees: only in the ablation.
    assert set(obs.features) == {"progress", "n_admissible", "steps_since_progress", "steps_left"}
    ablation = TextWorldEpisode(episode.game, episode.seed, episode.episode_id, episode.horizon,
                                quest_length_feature=True)
    assert ablation.observe().features["quest_length"] == episode.game.spec.quest_length
    assert ablation.clone().observe().features["quest_length"] == episode.game.spec.quest_length
    assert obs.features["n_admissible"] == len(listed)
    episode.step(episode.expert_action())
    after = episode.observe()
    assert after.step == 1 and "Last command: " in after.state_text
    assert after.features["progress"] == pytest.approx(1 / 5) and after.features["steps_since_progress"] == 0


def test_inadmissible_text_is_mapped_or_wasted(games):
    episode = fresh(games)[0]
    commands = episode.state["admissible_commands"]
    target = commands[0]
    assert resolve_command(f"  {target.upper()}. ", commands) == (target, "exact")
    assert resolve_command(target[:-1], commands) == (target, "mapped")
    assert resolve_command("quit", commands) == (None, "wasted")
    before = episode.observe()
    result = episode.step(Action("restore the saved game"))
    assert result.info["resolved"] == "wasted" and result.reward == 0.0 and episode.steps == 1
    after = episode.observe()
    assert admissible_commands(after.state_text) == admissible_commands(before.state_text)
    assert "not available" in after.state_text


def test_clone_is_independent_and_continues_identically(games):
    rng = random.Random(1)
    episode = fresh(games)[2]
    for _ in range(3):
        episode.step(Action(rng.choice(episode.state["admissible_commands"])))
    clone = episode.clone()
    snapshot = episode.observe()
    assert clone.observe() == snapshot
    moves = [clone.expert_action(), Action(clone.state["admissible_commands"][0])]
    clone_results = [clone.step(m) for m in moves]
    assert episode.observe() == snapshot and episode.steps == 3  # the original did not move
    results = [episode.step(m) for m in moves]
    assert [r.reward for r in results] == [r.reward for r in clone_results]
    assert episode.observe() == clone.observe()


def test_budget_free_run_reaches_done(games):
    episodes = fresh(games)
    records = run_episodes(episodes, TextWorldSimulatorAgent(p=0.3, seed=0), budget=0)
    for episode, rows in zip(episodes, records):
        assert episode.done and rows[-1].done and not any(r.done for r in rows[:-1])
        assert len(rows) == episode.steps <= episode.horizon
        assert not any(r.intervened for r in rows)
        assert {r.success for r in rows} == {episode.success()}
        assert sum(r.reward for r in rows) == pytest.approx(episode.progress)


def test_interventions_are_expert_moves_under_the_budget(games):
    episodes = fresh(games)
    records = run_episodes(episodes, TextWorldSimulatorAgent(p=0.0, seed=0), budget=100, explore_p=1.0)
    assert all(e.success() == 1.0 for e in episodes)
    assert all(r.intervened and r.actor == HUMAN for rows in records for r in rows)


def test_make_episodes_builds_any_index_range_alone(cache):
    options = {"n_games": 3, "quest_lengths": LENGTHS, "cache_dir": cache}  # the fixture's games
    both = make_episodes(4, **options)
    tail = make_episodes(2, start=2, **options)
    assert [e.episode_id for e in both[2:]] == [e.episode_id for e in tail]
    assert [e.seed for e in both[2:]] == [e.seed for e in tail]
    assert len({e.episode_id for e in both}) == 4
    assert both[3].game.spec == both[0].game.spec  # episodes cycle over the split's games
    assert both[0].episode_id != make_episodes(1, seed=1, **options)[0].episode_id
    assert TextWorldSource("train", **options).max_horizon == default_horizon(8)
    assert json.dumps(both[0].observe().features)  # features serialise for the trajectory rows


# -- agents ---------------------------------------------------------------------------------

def test_simulator_is_reproducible_and_batch_independent(games):
    agent = TextWorldSimulatorAgent(p=0.4, seed=3)
    runs = []
    for _ in range(2):
        episodes = fresh(games)
        run_episodes(episodes, agent, budget=0)
        runs.append([e.history for e in episodes])
    assert runs[0] == runs[1]
    alone = fresh(games)[1:2]
    run_episodes(alone, agent, budget=0)
    assert alone[0].history == runs[0][1]
    reseeded = fresh(games)
    run_episodes(reseeded, TextWorldSimulatorAgent(p=0.4, seed=4), budget=0)
    assert [e.history for e in reseeded] != runs[0]


def test_simulator_probability_and_extremes(games):
    episode = fresh(games)[0]
    obs = episode.observe()
    n = obs.features["n_admissible"]
    assert TextWorldSimulatorAgent(p=0.5).success_probability(obs) == pytest.approx(0.5 + 0.5 / n)
    keys = TextWorldSimulatorAgent(p=0.9, verb_p={episode.expert_action().text.split()[0]: 0.0})
    assert keys.success_probability(obs, episode) == pytest.approx(1 / n)
    with pytest.raises(ValueError, match="episode"):
        keys.success_probability(obs)
    with pytest.raises(ValueError, match="must lie in"):
        TextWorldSimulatorAgent(p=1.5)
    perfect = fresh(games)
    run_episodes(perfect, TextWorldSimulatorAgent(p=1.0), budget=0)
    assert all(e.success() == 1.0 for e in perfect)


@pytest.fixture(scope="module")
def tiny_lm():
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)


def test_llm_agent_picks_admissible_commands_batched_equals_unbatched(games, tiny_lm):
    agent = TextWorldLLMAgent("tiny", lm=tiny_lm)
    observations = [e.observe() for e in fresh(games)[:2]]
    batched = agent.act(observations)
    scores = agent.last_scores
    alone = TextWorldLLMAgent("tiny", lm=tiny_lm, memo=0)
    single = [alone.act([o])[0] for o in observations]
    assert batched == single
    for obs, action, row in zip(observations, batched, scores):
        commands = admissible_commands(obs.state_text)
        assert action.text in commands and action.actor == BASE
        assert len(row) == len(commands) and action.text == commands[row.index(max(row))]
    sampler = TextWorldLLMAgent("tiny", lm=tiny_lm, temperature=1.0, seed=5)
    assert sampler.act(observations) == [sampler.act([o])[0] for o in observations]


def test_the_memo_replays_the_scores_of_a_state_seen_before_and_keeps_its_size(games, tiny_lm):
    plain = TextWorldLLMAgent("tiny", lm=tiny_lm, memo=0)
    kept, small = TextWorldLLMAgent("tiny", lm=tiny_lm), TextWorldLLMAgent("tiny", lm=tiny_lm, memo=3)
    plays = []
    for agent in (plain, kept, kept, small, small):  # a second play meets the same states again
        episodes = [TextWorldEpisode(g, 0, f"memo-{i}", horizon=4) for i, g in enumerate(games[:2])]
        records = run_episodes(episodes, agent, budget=0)
        plays.append([[r.action_text for r in rows] for rows in records])
    assert all(play == plays[0] for play in plays)
    states = sum(len(p) for p in plays[0])
    assert plain.scored == states and kept.scored == states  # the second play: every state a memo hit
    # 3 kept, least recently used out: a replay of 8 states in the same order finds none of them still there
    assert len(small._memo) == 3 and small.scored == 2 * states
    with pytest.raises(ValueError, match="memo must be >= 0"):
        TextWorldLLMAgent("tiny", lm=tiny_lm, memo=-1)


def test_llm_agent_plays_an_episode_end_to_end(games, tiny_lm):
    episode = TextWorldEpisode(games[0], 0, "llm-e2e", horizon=3)
    records = run_episodes([episode], TextWorldLLMAgent("tiny", lm=tiny_lm), budget=1, explore_p=0.5)
    rows = records[0]
    assert episode.done and len(rows) == 3 and sum(r.intervened for r in rows) <= 1
    for row in rows:
        assert row.action_text in admissible_commands(row.state_text)
