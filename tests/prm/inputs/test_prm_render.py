"""Rendering: prefixes render to prefixes, and left truncation keeps every scored step's tag."""

import numpy as np
import pytest

from agile.models import load_tokenizer
from prm.verifiers.model import ContextTruncationWarning, ProcessRewardModel
from prm.inputs.render import Renderer, prefix_windows, windows


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def renderer():
    return Renderer(load_tokenizer("tiny"))


def _episode(n, words=5):
    return [f"state {t} " + "word " * words for t in range(n)], [f"act {t}" for t in range(n)]


@pytest.mark.parametrize("tag_after", ["action", "state"])
def test_prefix_of_episode_renders_to_prefix_of_ids(tag_after):
    renderer = Renderer(load_tokenizer("tiny"), tag_after=tag_after)
    states, actions = _episode(4)
    full = renderer.render_many([(states, actions)])[0]
    for k in range(1, 5):
        part = renderer.render_many([(states[:k], actions[:k])])[0]
        end = part.tag_pos[-1] + 1
        assert part.ids[:end] == full.ids[:end]
        assert part.tag_pos == full.tag_pos[:k]
    assert all(full.ids[p] == renderer.tag_ids[-1] for p in full.tag_pos)


def test_left_truncation_keeps_every_tag(renderer):
    rendered = renderer.render_many([_episode(6, words=30)])[0]
    max_length = 70
    assert len(rendered.ids) > 2 * max_length
    found = windows(0, rendered, max_length)
    steps = [s for w in found for s in w.steps]
    assert steps == list(range(6))  # every step scored exactly once, in order
    for w in found:
        assert len(w.ids) <= max_length
        assert w.tag_pos[-1] == len(w.ids) - 1  # a window ends at its last tag
        for step, pos in zip(w.steps, w.tag_pos):
            # the window is the left-truncated prefix ending at the tag, so ids line up
            assert w.ids[pos] == rendered.ids[rendered.tag_pos[step]]
            assert w.dropped + pos == rendered.tag_pos[step]
    assert found[-1].dropped == len(rendered.ids) - max_length


def test_a_single_step_longer_than_context_is_cut_but_scored(renderer):
    rendered = renderer.render_many([_episode(3, words=200)])[0]
    found = windows(0, rendered, 50)
    assert [w.steps for w in found] == [[0], [1], [2]]
    assert all(len(w.ids) == 50 for w in found)
    assert all(len(w.ids) == 50 for w in prefix_windows(0, rendered, 50))


def test_truncation_warns_with_counts_and_scores_every_step():
    prm = ProcessRewardModel.create("tiny", head="tag", max_length=64)
    episodes = [_episode(5, words=40), _episode(2, words=1)]
    with pytest.warns(ContextTruncationWarning, match=r"1 of 2 episodes are longer than the context of 64 tokens"):
        scores = prm.score_episodes(episodes)
    assert [len(s) for s in scores] == [5, 2]
    assert all(np.isfinite(s).all() for s in scores)
