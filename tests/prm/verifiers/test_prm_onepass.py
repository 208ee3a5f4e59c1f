"""One forward pass per episode equals scoring every prefix on its own (both heads, padded batches)."""

import numpy as np
import pytest
import torch

from prm.verifiers.model import ProcessRewardModel
from prm.inputs.render import windows


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


# Different lengths so that batches need padding; one single-step episode.
EPISODES = [
    ([f"state {t} of episode {e} " + "filler " * (2 + 3 * e) for t in range(n)], [f"action {t}" for t in range(n)])
    for e, n in enumerate([3, 6, 1, 4, 5])
]


@pytest.fixture(scope="module", params=["tag", "value"])
def prm(request):
    model = ProcessRewardModel.create("tiny", head=request.param)
    if request.param == "value":
        # A zero-initialised head scores 0.5 everywhere; random weights make the test bite.
        torch.manual_seed(0)
        torch.nn.init.normal_(model.head.linear.weight, std=1.0)
    return model


def _logit(p):
    p = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    return np.log(p / (1 - p))


def test_batches_are_padded(prm):
    found = [w for i, r in enumerate(prm.renderer.render_many(EPISODES)) for w in windows(i, r, 10_000)]
    batch = next(iter(prm.batches(found, batch_tokens=10_000)))
    assert len(batch.windows) == len(EPISODES)
    assert (batch.attention_mask == 0).any()  # real padding exercised


def test_one_pass_equals_per_prefix(prm):
    # the reference: every prefix separately, batched together with padding
    per_prefix = prm.score_episodes(EPISODES, batch_tokens=10_000, per_prefix=True)
    assert np.ptp(np.concatenate(per_prefix)) > 1e-3  # scores differ, so equality is not trivial
    for batch_tokens in (1, 10_000):  # one episode per batch, and all of them padded together
        one_pass = prm.score_episodes(EPISODES, batch_tokens=batch_tokens)
        assert [len(s) for s in one_pass] == [len(states) for states, _ in EPISODES]
        for a, b in zip(one_pass, per_prefix):
            np.testing.assert_allclose(_logit(a), _logit(b), atol=1e-4)


def test_hidden_states_match_per_prefix():
    prm = ProcessRewardModel.create("tiny", head="value")
    features = prm.episode_features(EPISODES, batch_tokens=10_000)
    found = prm.windows_for(EPISODES, per_prefix=True)
    with torch.inference_mode():
        for batch in prm.batches(found, batch_tokens=512):
            hidden = prm.hidden_at_tags(batch).float().cpu().numpy()
            for row, window in zip(hidden, batch.windows):
                np.testing.assert_allclose(row, features[window.episode][window.steps[0]], atol=1e-4, rtol=1e-4)


def test_pre_action_tags_also_match():
    prm = ProcessRewardModel.create("tiny", head="tag", tag_after="state")
    one_pass = prm.score_episodes(EPISODES, batch_tokens=10_000)
    per_prefix = prm.score_episodes(EPISODES, batch_tokens=10_000, per_prefix=True)
    for a, b in zip(one_pass, per_prefix):
        np.testing.assert_allclose(_logit(a), _logit(b), atol=1e-4)
