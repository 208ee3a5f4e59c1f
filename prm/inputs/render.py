"""Render an episode as one token sequence with a step tag at every decision point.

An episode of ``n`` decision points becomes

    Step 0:\\n<state_0>\\nAction: <action_0> TAG \\nStep 1:\\n<state_1>\\nAction: <action_1> TAG ...

and the PRM reads its score for step ``t`` at the last token of the ``t``-th TAG (Math-Shepherd's
step tag). With ``tag_after="state"`` the tag goes between the state and the action instead, so
the score is a pre-action value (what a gate needs *before* the agent acts). With
``tag_after="proposal"`` each step also shows what the base agent proposed, and the tag goes
right after it:

    Step t:\n<state_t>\nProposal: <proposal_t> TAG \nAction: <action_t>

(``\nKept.`` instead of the action when the action is the proposal, to save tokens): the score
answers "does this proposal look right?", what a gate that decides after the proposal needs.
Such episodes are ``(states, actions, proposals)`` triples; the others are ``(states, actions)``.

The state text of step ``t`` need not repeat earlier steps, so the episode text is the
concatenation over steps. Every piece is tokenized on its own and the ids are concatenated, which
makes the ids of a prefix exactly a prefix of the ids: that is what lets one causal forward pass
score every step and equal scoring each prefix separately. Tag positions are recorded while
concatenating, never searched for, so tag-like text inside a state cannot confuse them.

Episodes longer than the backbone's context are cut from the left into *windows*: the first
window keeps the last ``max_length`` tokens and scores every tag inside it; tags that fell off the
left are scored by further windows that end at their own tag. Every step keeps its tag and gets
a score; early steps just see less history. ``truncation_note`` words the warning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

TAG_AFTER = ("action", "state", "proposal")
KEPT = "\nKept."
"""What follows the tag in ``proposal`` mode when the proposal was played as it was."""
DEFAULT_TAG = " §"
"""A rare single token in the SmolLM2 vocabulary, as Math-Shepherd used a rare token ("ки")."""


def step_pieces(step: int, state: str, action: str, tag_after: str = "action",
                proposal: str | None = None) -> tuple[str, str]:
    """The text before and after the tag of one decision point (``proposal``: only and always
    with ``tag_after="proposal"``)."""
    if tag_after not in TAG_AFTER:
        raise ValueError(f"tag_after={tag_after!r}: use one of {TAG_AFTER}.")
    head = ("" if step == 0 else "\n") + f"Step {step}:\n{state}"
    act = f"\nAction: {action}"
    if tag_after == "proposal":
        if proposal is None:
            raise ValueError(f"step {step}: tag_after='proposal' renders the base agent's proposal, but none "
                             "was given (proposal_text).")
        return head + f"\nProposal: {proposal}", KEPT if action == proposal else act
    return (head + act, "") if tag_after == "action" else (head, act)


def split_episode(episode: Sequence[Sequence[str]], tag_after: str) -> tuple[Sequence[str], Sequence[str], Sequence]:
    """``(states, actions, proposals)`` of an episode; proposals are ``None`` outside ``proposal`` mode."""
    if tag_after == "proposal":
        if len(episode) != 3:
            raise ValueError("tag_after='proposal' needs episodes as (states, actions, proposals) triples.")
        states, actions, proposals = episode
        if len(proposals) != len(states):
            raise ValueError(f"{len(states)} states but {len(proposals)} proposals in one episode.")
        return states, actions, proposals
    return episode[0], episode[1], [None] * len(episode[0])


def prefix_keys(states: Sequence[str], actions: Sequence[str], tag_after: str = "action",
                proposals: Sequence[str] | None = None) -> list[str]:
    """A hash of the rendered text up to each step's tag: rows with equal keys are the same input.

    The hash is chained (each key extends the previous digest state), so an episode costs
    O(total text), not O(steps x text).
    """
    digest = hashlib.sha256()
    keys = []
    proposals = [None] * len(states) if proposals is None else proposals
    for step, (state, action, proposal) in enumerate(zip(states, actions, proposals)):
        before, after = step_pieces(step, state, action, tag_after, proposal)
        digest.update(before.encode())
        keys.append(digest.copy().hexdigest())
        digest.update(b"\x00TAG\x00")
        digest.update(after.encode())
    return keys


@dataclass
class Rendered:
    """One episode as token ids, with the position of each step's tag (its last token)."""

    ids: list[int]
    tag_pos: list[int]
    step_start: list[int] | None = None
    """Position of each step's first token (where its ``Step t:`` header begins)."""


@dataclass
class Window:
    """A slice ``ids[start:end]`` of one episode that fits the context, and the steps it scores."""

    episode: int
    """Index of the episode in the batch of episodes being scored."""
    ids: list[int]
    steps: list[int]
    """Step indices (into the episode) whose tags lie in this window."""
    tag_pos: list[int]
    """Positions of those tags inside ``ids``."""
    dropped: int = 0
    """Tokens cut from the left of this window (0 when the whole prefix fits)."""
    step_start: list[int] | None = None
    """Position inside ``ids`` of each scored step's first token (0 where the window cut it), for
    a PRM that pools over the step's tokens; None: unknown (pooling reads the tag alone)."""


class Renderer:
    """Turns (states, actions) into ``Rendered`` with a fixed tokenizer and tag."""

    def __init__(self, tokenizer, tag_text: str = DEFAULT_TAG, tag_after: str = "action"):
        if tag_after not in TAG_AFTER:
            raise ValueError(f"tag_after={tag_after!r}: use one of {TAG_AFTER}.")
        self.tokenizer = tokenizer
        self.tag_text = tag_text
        self.tag_after = tag_after
        self.tag_ids = tokenizer.encode(tag_text, add_special_tokens=False)
        if not self.tag_ids:
            raise ValueError(f"The step tag {tag_text!r} encodes to no tokens: pick another tag text.")

    def render_many(self, episodes: Sequence[Sequence[Sequence[str]]]) -> list[Rendered]:
        """Render many episodes (pairs, or triples in ``proposal`` mode); the pieces of all of
        them go to the tokenizer in one call."""
        pieces: list[str] = []
        for episode in episodes:
            states, actions, proposals = split_episode(episode, self.tag_after)
            if len(states) != len(actions):
                raise ValueError(f"{len(states)} states but {len(actions)} actions in one episode.")
            for step, (state, action, proposal) in enumerate(zip(states, actions, proposals)):
                pieces.extend(step_pieces(step, state, action, self.tag_after, proposal))
        encoded = self.tokenizer(pieces, add_special_tokens=False)["input_ids"] if pieces else []
        out, cursor = [], 0
        for states, *_ in episodes:
            ids: list[int] = []
            tag_pos: list[int] = []
            step_start: list[int] = []
            for _ in states:
                step_start.append(len(ids))
                ids.extend(encoded[cursor])
                ids.extend(self.tag_ids)
                tag_pos.append(len(ids) - 1)
                ids.extend(encoded[cursor + 1])
                cursor += 2
            out.append(Rendered(ids, tag_pos, step_start))
        return out


def windows(episode: int, rendered: Rendered, max_length: int) -> list[Window]:
    """Cut one rendered episode into windows of at most ``max_length`` tokens, left-truncated.

    Tokens after the last tag carry no score, so they are never fed. Returns the windows in step
    order; one window (``dropped == 0``) when the episode fits.
    """
    if max_length < 1:
        raise ValueError(f"max_length={max_length}: must be at least 1 token.")
    pos = rendered.tag_pos
    found: list[Window] = []
    remaining = len(pos)
    while remaining:
        end = pos[remaining - 1] + 1
        start = max(0, end - max_length)
        first = next(i for i in range(remaining) if pos[i] >= start)
        found.append(
            Window(
                episode=episode,
                ids=rendered.ids[start:end],
                steps=list(range(first, remaining)),
                tag_pos=[p - start for p in pos[first:remaining]],
                dropped=start,
                step_start=_starts(rendered, range(first, remaining), start),
            )
        )
        remaining = first
    return found[::-1]


def prefix_windows(episode: int, rendered: Rendered, max_length: int) -> list[Window]:
    """One window per step: the step's own prefix, left-truncated (the per-prefix baseline)."""
    out = []
    for step, p in enumerate(rendered.tag_pos):
        start = max(0, p + 1 - max_length)
        out.append(Window(episode, rendered.ids[start : p + 1], [step], [p - start], dropped=start,
                          step_start=_starts(rendered, [step], start)))
    return out


def history_windows(episode: int, rendered: Rendered, history: int, max_length: int) -> list[Window]:
    """One window per step holding only that step and the ``history`` steps before it (then
    left-truncated to ``max_length``): each score reads a short, local context.

    Why: a small frozen backbone read at the end of a long episode ranks the latest proposal worse
    than one read at the start (shared ProductQA, out-of-fold AUROC per step falls from 0.79 at the
    first question to 0.62 at the fourth). Where each step's state already carries what the agent
    remembers (ProductQA's memory lines), the earlier steps add length, not information.
    """
    if history < 0:
        raise ValueError(f"history={history}: the number of earlier steps kept must be 0 or more (None: all).")
    if rendered.step_start is None:
        raise ValueError("history windows need the step start positions that Renderer.render_many records.")
    out = []
    for step, p in enumerate(rendered.tag_pos):
        kept_from = rendered.step_start[max(0, step - history)]
        start = max(kept_from, p + 1 - max_length)
        # Only tokens the context cut count as dropped; steps outside the window are left out on purpose.
        out.append(Window(episode, rendered.ids[start : p + 1], [step], [p - start], dropped=start - kept_from,
                          step_start=_starts(rendered, [step], start)))
    return out


def _starts(rendered: Rendered, steps, start: int) -> list[int] | None:
    """Where each of ``steps`` begins inside a window that starts at token ``start``."""
    if rendered.step_start is None:
        return None
    return [max(rendered.step_start[s] - start, 0) for s in steps]


def truncation_note(all_windows: Sequence[Window], n_episodes: int, max_length: int) -> str | None:
    """A one-line warning with counts, or None when nothing was cut."""
    cut = [w for w in all_windows if w.dropped]
    if not cut:
        return None
    episodes = len({w.episode for w in cut})
    steps = sum(len(w.steps) for w in cut)
    extra = len(all_windows) - len({w.episode for w in all_windows})
    return (
        f"{episodes} of {n_episodes} episodes are longer than the context of {max_length} tokens: "
        f"truncated from the left, keeping every scored step's tag ({steps} steps scored with "
        f"shortened history, {extra} extra windows, up to {max(w.dropped for w in cut)} tokens "
        "dropped from one window). Raise max_length or shorten state_text to keep full history."
    )
