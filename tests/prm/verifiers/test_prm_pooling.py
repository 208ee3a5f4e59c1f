"""Mean pooling over a step's tokens: the right tokens, the same numbers by every scoring path."""

import numpy as np
import pytest
import torch

from agile.protocol import Observation
from prm.verifiers.load import load_prm
from prm.verifiers.model import ProcessRewardModel
from prm.scoring.scorer import PrmScorer

STATES = ["Crossing 1 of 3. The ferryman calls this crossing calm today, and he points ahead.",
          "Crossing 2 of 3. This crossing looks dangerous from the bank, though the far side is hard to see.",
          "Crossing 3 of 3. A heron watches. Everyone found the crossing tricky, or so the notes say."]
ACTIONS = ["The marker is 12.", "The marker is 40.", "The marker is 77."]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def _prm(pooling="mean", tag_after="state", history=None):
    prm = ProcessRewardModel.create("tiny", tag_after=tag_after, device="cpu", seed=0, pooling=pooling,
                                    history=history)
    torch.manual_seed(0)
    prm.head.linear.weight.data.normal_(0, 1.0)  # an untrained value head is 0.5 everywhere
    return prm


def test_mean_pooling_averages_exactly_the_steps_tokens():
    prm = _prm()
    rendered = prm.renderer.render_many([(STATES, ACTIONS)])[0]
    with torch.inference_mode():
        full = prm._core().get_decoder()(input_ids=torch.tensor([rendered.ids])).last_hidden_state[0]
    expected = np.stack([full[a : b + 1].mean(0).numpy() for a, b in zip(rendered.step_start, rendered.tag_pos)])
    # The step's tokens run from its "Step t:" header to its tag; the action before it is not one.
    assert rendered.step_start[1] > rendered.tag_pos[0] + 1
    pooled = prm.episode_features([(STATES, ACTIONS)])[0]
    np.testing.assert_allclose(pooled, expected, atol=1e-5, rtol=1e-5)
    last = _prm("last").episode_features([(STATES, ACTIONS)])[0]
    assert not np.allclose(pooled, last, atol=1e-3)


def test_one_pass_per_prefix_and_short_context_agree():
    prm = _prm()
    one_pass = prm.score_episodes([(STATES, ACTIONS)], batch_tokens=10_000)[0]
    per_prefix = prm.score_episodes([(STATES, ACTIONS)], batch_tokens=1, per_prefix=True)[0]
    np.testing.assert_allclose(one_pass, per_prefix, atol=1e-5)
    # A context shorter than the episode cuts from the left; a step whose first tokens fell off is
    # pooled over what is left of it.
    short = _prm()
    short.settings.max_length = 60
    with pytest.warns(UserWarning, match="truncated"):
        cut = short.score_episodes([(STATES, ACTIONS)])[0]
    assert cut.shape == (3,) and np.isfinite(cut).all()


@pytest.mark.parametrize("tag_after", ["state", "proposal"])
def test_the_gate_scorer_reads_what_prm_score_wrote(tmp_path, tag_after):
    prm = load_prm(_prm(tag_after=tag_after).save(tmp_path / "prm"), device="cpu")
    assert prm.settings.pooling == "mean"
    proposals = ["The marker is 12.", "The marker is 41.", "The marker is 77."]
    episode = (STATES, ACTIONS, proposals) if tag_after == "proposal" else (STATES, ACTIONS)
    logged = prm.score_episodes([episode])[0]
    for incremental in (True, False):
        scorer = PrmScorer(prm, incremental=incremental)
        assert scorer.incremental == incremental
        online = []
        for t, state in enumerate(STATES):
            observation = Observation(f"e{incremental}", "test", "t", t, state, 3, {})
            online.append(scorer.score(observation, proposal=proposals[t] if tag_after == "proposal" else None))
            scorer.record_action(observation, ACTIONS[t])
        assert online == pytest.approx(logged.tolist(), abs=1e-5)
    assert np.unique(np.round(logged, 5)).size == 3


def test_history_windows_pool_only_the_kept_step():
    prm = _prm(history=0)
    pooled = prm.episode_features([(STATES, ACTIONS)])[0]
    changed = prm.episode_features([(["Crossing 1 of 3. Nothing here is the same."] + STATES[1:], ACTIONS)])[0]
    assert not np.allclose(pooled[0], changed[0], atol=1e-3)
    np.testing.assert_allclose(pooled[1:], changed[1:], atol=1e-5)  # steps 1 and 2 never read step 0


def test_a_bad_pooling_is_refused_and_old_folders_read_last(tmp_path):
    with pytest.raises(ValueError, match="pooling='max'"):
        ProcessRewardModel.create("tiny", device="cpu", pooling="max")
    with pytest.raises(ValueError, match="pooling='mean' with the tag head"):
        ProcessRewardModel.create("tiny", device="cpu", head="tag", pooling="mean")
    folder = _prm("last").save(tmp_path / "old")
    config = folder / "prm_config.json"
    config.write_text(config.read_text().replace('  "pooling": "last",\n', ""))
    assert "pooling" not in config.read_text()
    assert load_prm(folder, device="cpu").settings.pooling == "last"
