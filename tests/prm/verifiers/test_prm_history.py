"""A PRM whose scores read a window of recent steps (``history``) rather than the whole episode."""

import numpy as np
import pytest
import torch

from agile.protocol import Observation
from prm.verifiers.load import load_prm
from prm.verifiers.model import ProcessRewardModel
from prm.scoring.scorer import PrmScorer

STATES = ["Question 1 of 3.\nCustomer: is it red?", "Question 2 of 3.\nFind a kettle.",
          "Question 3 of 3.\nIs it big?"]
ACTIONS = ["[PredictAnswer] yes", "[PredictAnswer] B01", "[PredictAnswer] no"]


def _prm(history, tag_after="state", tmp_path=None):
    prm = ProcessRewardModel.create("tiny", tag_after=tag_after, device="cpu", seed=0, history=history)
    torch.manual_seed(0)
    prm.head.linear.weight.data.normal_(0, 1.0)  # an untrained value head is 0.5 everywhere
    return prm


def _scores(prm, states, actions=ACTIONS):
    return prm.score_episodes([(states, actions)])[0]


def test_a_step_reads_only_the_steps_its_history_keeps():
    changed_first = ["Question 1 of 3.\nCustomer: is it blue and heavy?"] + STATES[1:]
    for history, unchanged_steps in ((0, [1, 2]), (1, [2]), (None, [])):
        prm = _prm(history)
        before, after = _scores(prm, STATES), _scores(prm, changed_first)
        assert before[0] != pytest.approx(after[0], abs=1e-6)  # step 0 itself changed
        for t in (1, 2):
            if t in unchanged_steps:
                assert after[t] == pytest.approx(before[t], abs=1e-6)
            else:  # the changed step is inside this step's window
                assert after[t] != pytest.approx(before[t], abs=1e-6)


def test_a_history_as_long_as_the_episode_scores_as_the_whole_episode():
    prm = _prm(None)
    whole = _scores(prm, STATES)
    prm.settings.history = 5
    assert _scores(prm, STATES) == pytest.approx(whole.tolist(), abs=1e-5)
    prm.settings.history = 0
    assert _scores(prm, STATES)[0] == pytest.approx(float(whole[0]), abs=1e-5)  # nothing before step 0


def test_the_gate_scorer_reproduces_the_logged_scores_and_memoises_the_window(tmp_path):
    prm = load_prm(_prm(0).save(tmp_path / "prm"), device="cpu")
    assert prm.settings.history == 0
    logged = _scores(prm, STATES)
    scorer = PrmScorer(prm)
    assert not scorer.incremental  # a sliding window is not an extension of one cache
    for episode_id, first_state in (("a", STATES[0]), ("b", "Question 1 of 3.\nCustomer: is it green?")):
        online = []
        for t, state in enumerate([first_state] + STATES[1:]):
            observation = Observation(episode_id, "test", "t", t, state, 3, {})
            online.append(scorer.score(observation))
            scorer.record_action(observation, ACTIONS[t])
        if episode_id == "a":
            assert online == pytest.approx(logged.tolist(), abs=1e-5)
    # Episode b differs only at step 0: its steps 1 and 2 read the same windows as a's.
    assert scorer.memo_hits == 2 and scorer.forward_scores == 4


def test_proposal_mode_with_history_scores_the_latest_proposal(tmp_path):
    prm = _prm(0, tag_after="proposal")
    proposals = ["[PredictAnswer] no", "[PredictAnswer] B02", "[PredictAnswer] no"]
    logged = prm.score_episodes([(STATES, ACTIONS, proposals)])[0]
    scorer = PrmScorer(prm)
    online = []
    for t, state in enumerate(STATES):
        observation = Observation("p", "test", "t", t, state, 3, {})
        online.append(scorer.score(observation, proposal=proposals[t]))
        scorer.record_action(observation, ACTIONS[t])
    assert online == pytest.approx(logged.tolist(), abs=1e-5)
    assert np.unique(np.round(online, 6)).size == 3


def test_a_negative_history_is_refused():
    with pytest.raises(ValueError, match="history=-1"):
        ProcessRewardModel.create("tiny", device="cpu", history=-1)


def test_many_live_episodes_keep_their_histories_and_past_the_limit_a_new_one_is_refused():
    from agile.budget import TooManyEpisodes

    prm = _prm(None)
    logged = _scores(prm, STATES)
    # Episodes stepped in lockstep, more of them than the limit the scorer once dropped histories at, would
    # each score its later steps without its past. Here three are live at once under max_episodes=3.
    scorer = PrmScorer(prm, max_episodes=3)
    online = {e: [] for e in "abc"}
    for t, state in enumerate(STATES):
        for episode_id in "abc":
            observation = Observation(episode_id, "test", "t", t, state, 3, {})
            online[episode_id].append(scorer.score(observation))
            scorer.record_action(observation, ACTIONS[t])
    for episode_id in "abc":
        assert online[episode_id] == pytest.approx(logged.tolist(), abs=1e-5)
    with pytest.raises(TooManyEpisodes, match="max_episodes=3.*end_episode"):
        scorer.score(Observation("d", "test", "t", 0, STATES[0], 3, {}))
    scorer.end_episode("a")
    assert scorer.score(Observation("d", "test", "t", 0, STATES[0], 3, {})) == pytest.approx(float(logged[0]), abs=1e-5)


def test_a_gate_passes_the_refusal_on_instead_of_deciding_on_its_fallback(tmp_path):
    from agile.budget import TooManyEpisodes
    from helper.gates.helper_gate import HelperGate

    gate = HelperGate(backend="features", classifier=object(), scorer=PrmScorer(_prm(None), max_episodes=1))
    gate._score(Observation("a", "test", "t", 0, STATES[0], 3, {}))
    with pytest.raises(TooManyEpisodes):
        gate._score(Observation("b", "test", "t", 0, STATES[0], 3, {}))
    assert gate.stats()["score_errors"] == 0
