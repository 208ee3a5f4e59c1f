"""PRM scores at decision time, from what a gate sees: the observations of each episode so far.

The PRM scores an episode rendered as ``Step 0: <state> ... TAG ...`` (``prm.inputs.render``). At a
decision point the gate has the states up to now but not yet this step's action. So:

- with a PRM trained with ``tag_after="state"`` (the tag sits between state and action) the score
  of step ``t`` needs only states ``0..t`` and actions ``0..t-1``: the gate computes exactly what
  ``helpgate prm score`` wrote into the logged ``prm_score`` column, provided it is told the
  actions taken (``record_action``; without it earlier actions are rendered empty);
- with ``tag_after="proposal"`` the score of step ``t`` reads the base agent's proposal at ``t``
  too: ``score(observation, proposal)`` (a gate with ``decide_after="proposal"`` passes it),
  with earlier steps' proposals remembered from their own calls (a step where no score was asked
  renders its played action as the proposal, "kept", which is what the logged data shows where
  the base agent acted); this is what ``prm score`` wrote when the same proposals and actions
  are passed;
- with ``tag_after="action"`` the score also reads this step's action, which does not exist yet;
  it is rendered empty and ``PrmScorer`` warns once, because the gate's scores then differ from
  the logged ones the helper was trained on.

Cost. With ``tag_after="state"`` or ``"proposal"`` the scorer keeps each episode's key/value
cache, so a decision feeds only the tokens that are new since the last one (the previous action,
this state, this proposal, the tag; a second call at one step with another proposal feeds the
episode again from its start): the same numbers as scoring the whole prefix (the rendering concatenates per-piece token
ids, so a prefix's ids are a prefix of the ids). Caches share a memory budget, ``cache_bytes``
(default 2 GiB; a token costs 2 × layers × key/value heads × head size × element size, about
46 KB for all 30 layers of SmolLM2-135M in fp32, 12 KB for the first 8): when they outgrow it the
least recently used are dropped, and a dropped episode is fed again from its start at its next
decision. The budget is in bytes rather than episodes because a sweep steps dozens of episodes
in lockstep: a cap below that number drops every cache before its next use and each decision
re-feeds its whole prefix. When an episode outgrows the PRM's context, its cache starts over on
the latest steps that fill half the context (the history is cut from the left, as ``prm score``
cuts long episodes, though at other step boundaries than its windows, so those scores can differ
slightly from the logged ones) and later decisions are incremental again. With
``tag_after="action"`` the whole prefix is re-scored at every decision. A PRM trained with a history
window (``prm train --history K``) reads each step's K latest steps only: no cache (the window slides),
one short forward pass per decision (``ProcessRewardModel.score_last``), and the memo below matches
equal windows across episodes.

Signals and calibration. A PRM trained with the base agent's signals (``prm.inputs.signals``) reads
them from the proposal: ``score(observation, proposal=action)`` uses ``action.signals`` at this
step (no proposal: the signals count as missing, as in ``prm score`` on a row without them); a PRM
trained with state features reads ``observation.features``. The PRM's calibrator (``prm.verifiers.calibration``) maps every score, as ``prm score`` does.

Memo. A sweep plays the same held-out episodes once per method and budget, and they agree up to
their first different decision: the scorer remembers each score under a hash of exactly what the
PRM reads for it (``prm.inputs.render.prefix_keys`` of the rendered prefix, plus this step's signals), so
an identical prefix is scored once whichever episode, method or budget asks again (``memo_size``
scores, least recently used dropped; ``memo_hits`` counts the reuse). A hit does not feed the
episode's cache; the next miss feeds every step since the last fed one in one pass, so the
numbers stay those of scoring the whole prefix.
Prefix caches. The plays of a sweep form a tree per episode (they branch where a decision differs), and a miss
after hits would feed the whole shared trunk again: more than half the tokens a ProductQA sweep fed (157k fed
for 71k of new steps on the main job's fold 0). So the keys and values after each fed step are also kept under
that step's prefix hash (``prefix_bytes``, least recently used dropped), and a miss resumes from the longest kept
prefix of its own episode: each branch feeds its own steps only. Keeping one costs no copy (a forward
concatenates into new tensors, so a kept cache is never written to). A cache cut at the context is not kept
(its positions start later than a fresh feed's). ``fed_tokens`` counts what the backbone read.

Histories. Each live episode's states and actions are kept until ``end_episode`` (``run_episodes`` and
the gates call it when an episode finishes): a history dropped mid-episode would score the next step
without its past, a different number given silently. Past ``max_episodes`` live episodes (default
``agile.budget.MAX_EPISODES``, as the gates' budgets) a new one is refused with ``TooManyEpisodes``.

Per-episode histories live under a lock; forward passes run outside it (one episode's calls are
serialised by that episode's own lock).
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import OrderedDict

from agile.budget import MAX_EPISODES, TooManyEpisodes
from agile.models import cache_arg, returned_cache
from agile.protocol import Action, Observation


class _Episode:
    def __init__(self, step: int):
        self.states: dict[int, str] = {}
        self.actions: dict[int, str] = {}
        self.proposals: dict[int, str] = {}
        self.last = step
        self.lock = threading.Lock()
        self.cache = None  # key/value cache of the tokens fed so far
        self.fed = 0  # tokens in the cache
        self.cut = False  # the cache starts after step 0 (cut at the context): not kept as a prefix
        self.scored: dict[int, tuple] = {}  # step -> (state, proposal, signals bytes, score)
        self.next_step = 0  # first step whose pieces are not in the cache yet


class PrmScorer:
    """``score(observation) -> P(success)``; errors propagate (the gate falls back on them)."""

    def __init__(self, prm, max_episodes: int = MAX_EPISODES, incremental: bool = True, cache_bytes: int = 2 << 30,
                 memo_size: int = 200_000, prefix_bytes: int = 2 << 30):
        self.prm = prm
        self.prefix_bytes = int(prefix_bytes)
        self._prefixes: OrderedDict[str, tuple[list, int]] = OrderedDict()  # prefix hash -> (layers' keys/values, fed)
        self._prefix_held = 0  # tokens the kept prefixes hold
        self.fed_tokens = 0  # tokens the backbone read for scores
        self.memo_size = int(memo_size)
        self._memo: OrderedDict[tuple, float] = OrderedDict()
        self.memo_hits = 0
        self.forward_scores = 0  # scores computed by a forward pass (the rest came from the memo)
        self.max_episodes = int(max_episodes)
        self.cache_bytes = int(cache_bytes)
        self._token_bytes: int | None = None
        self._lock = threading.Lock()
        self._history: OrderedDict[str, _Episode] = OrderedDict()
        tag_after = getattr(getattr(prm, "settings", None), "tag_after", "state")
        self.tag_after = tag_after
        self.history = getattr(getattr(prm, "settings", None), "history", None)
        # The key/value cache grows with the episode; a history window reads a sliding slice of it.
        self.incremental = (bool(incremental) and tag_after in ("state", "proposal") and hasattr(prm, "renderer")
                            and self.history is None)
        if tag_after == "action":
            warnings.warn(
                "this PRM reads its tag after the action (tag_after='action'), but a gate decides "
                "before the action: its decision-time scores differ from the logged prm_score. "
                "Train the helper's PRM with tag_after='state' (helpgate prm train --tag-after state).",
                stacklevel=2,
            )

    def _episode(self, observation: Observation) -> _Episode:
        """The episode's entry (new when unseen or replayed from an earlier step); lock held."""
        entry = self._history.get(observation.episode_id)
        if entry is None or observation.step < entry.last:
            if entry is None and len(self._history) >= self.max_episodes:
                raise TooManyEpisodes(
                    f"the PRM scorer holds {len(self._history)} live episodes (max_episodes={self.max_episodes}): "
                    "call gate.end_episode(episode_id) when an episode finishes, or raise max_episodes")
            entry = _Episode(observation.step)
            self._history[observation.episode_id] = entry
        entry.last = observation.step
        self._history.move_to_end(observation.episode_id)
        return entry

    def record_action(self, observation: Observation, action_text: str) -> None:
        """Tell the scorer what was done at ``observation`` (later scores read it)."""
        with self._lock:
            self._episode(observation).actions[observation.step] = action_text

    def end_episode(self, episode_id: str) -> None:
        with self._lock:
            self._history.pop(episode_id, None)

    @property
    def decide_after(self) -> str:
        """``"proposal"`` when this PRM reads the base agent's proposal, else ``"state"``."""
        return "proposal" if self.tag_after == "proposal" else "state"

    def score(self, observation: Observation, proposal: Action | str | None = None) -> float:
        """P(success) at ``observation``; ``proposal`` (an ``Action`` or its text) is required
        by a PRM trained with ``tag_after="proposal"``; a PRM trained with signals reads the
        proposal's ``signals`` (absent: missing)."""
        text = None
        if self.tag_after == "proposal":
            if proposal is None:
                raise ValueError("this PRM scores the base agent's proposal (tag_after='proposal'): pass it, "
                                 "score(observation, proposal), from a gate with decide_after='proposal'.")
            text = str(getattr(proposal, "text", proposal))
        signals = self._signals(proposal, observation)
        with self._lock:
            entry = self._episode(observation)
            entry.states[observation.step] = observation.state_text
            if text is not None:
                entry.proposals[observation.step] = text
        with entry.lock:
            t = observation.step
            said = None if signals is None else signals.tobytes()
            known = entry.scored.get(t)
            if known is not None and known[:3] == (observation.state_text, text, said):
                return known[3]
            key = (self._prefix_key(entry, t), said)
            with self._lock:
                value = self._memo.get(key)
                if value is not None:
                    self._memo.move_to_end(key)
                    self.memo_hits += 1
            if value is not None:
                entry.scored[t] = (observation.state_text, text, said, value)
                return value
            # A head that reads no hidden state needs no backbone pass (score_last skips it).
            reads_hidden = getattr(self.prm.settings, "hidden_inputs", True)
            value = self._incremental(entry, t, signals) if self.incremental and reads_hidden else None
            if value is None:
                value = self._full(entry, t, signals)
            if not math.isfinite(value):
                raise ValueError(f"the PRM returned {value} for episode {observation.episode_id!r} step {t}")
            entry.scored[t] = (observation.state_text, text, said, value)
            with self._lock:
                self.forward_scores += 1
                self._memo[key] = value
                if len(self._memo) > self.memo_size:
                    self._memo.popitem(last=False)
        if entry.cache is not None:
            self._evict(keep=entry)
        return value

    def _prefix_key(self, entry: _Episode, t: int) -> str:
        """Hash of the text the PRM reads for step ``t``'s score (everything before its tag)."""
        from prm.inputs.render import prefix_keys

        # A PRM with a history window reads steps first..t only: the same text in another
        # episode (or at another budget) is the same score.
        first = 0 if self.history is None else max(0, t - self.history)
        steps = range(first, t + 1)
        states = [entry.states.get(s, "") for s in steps]
        actions = [entry.actions.get(s, "") for s in steps[:-1]] + [""]
        proposals = [self._proposal(entry, s) for s in steps] if self.tag_after == "proposal" else None
        return f"{first}:" + prefix_keys(states, actions, self.tag_after, proposals)[-1]

    def _evict(self, keep: _Episode) -> None:
        """Drop the least recently used caches while all of them outgrow ``cache_bytes`` (busy
        episodes are skipped)."""
        with self._lock:
            cached = [e for e in self._history.values() if e.cache is not None and e is not keep]
            excess = (sum(e.fed for e in cached) + keep.fed) * self.token_bytes() - self.cache_bytes
            for entry in cached:
                if excess <= 0:
                    break
                if entry.lock.acquire(blocking=False):
                    excess -= entry.fed * self.token_bytes()
                    entry.cache, entry.fed, entry.next_step = None, 0, 0
                    entry.lock.release()

    def token_bytes(self) -> int:
        """Bytes of key/value cache per token of this PRM's backbone."""
        if self._token_bytes is None:
            core = self.prm._core()
            config = core.config
            heads = getattr(config, "num_attention_heads", 1)
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
            stack = getattr(core.get_decoder(), "layers", None)  # the kept layers, not the config's count
            layers = len(stack) if stack is not None else config.num_hidden_layers
            element = next(core.parameters()).element_size()
            self._token_bytes = 2 * layers * kv_heads * head_dim * element
        return self._token_bytes

    def _signals(self, proposal: Action | str | None, observation: Observation):
        """This step's signal row for a PRM that reads signals, state features or proposal features (else None)."""
        keys = getattr(getattr(self.prm, "settings", None), "signal_keys", None)
        if not keys:
            return None
        from prm.inputs.signals import EVIDENCE_PREFIX, signal_vector, state_inputs
        from prm.inputs.visible import VIEW_PREFIX
        from prm.inputs.words import WORD_PREFIX, word_inputs

        said = dict(proposal.signals) if isinstance(proposal, Action) else {}
        if proposal is not None and any(k.startswith(VIEW_PREFIX) for k in keys):  # prm.inputs.visible
            from prm.inputs.visible import view_inputs

            said.update(view_inputs(observation.state_text, str(getattr(proposal, "text", proposal))))
        if proposal is not None and any(k.startswith(EVIDENCE_PREFIX) for k in keys):  # prm.inputs.evidence
            from prm.inputs.evidence import evidence_inputs

            said.update(evidence_inputs(observation.state_text, str(getattr(proposal, "text", proposal))))
        if any(k.startswith(WORD_PREFIX) for k in keys):  # prm.inputs.words: the state's words, as logged rows
            said.update(word_inputs(observation.state_text))
        return signal_vector({**said, **state_inputs(observation.features)}, keys)

    # -- the two ways to score -------------------------------------------------------------------
    def _full(self, entry: _Episode, t: int, signals=None) -> float:
        steps = range(t + 1)
        states = [entry.states.get(s, "") for s in steps]
        actions = [entry.actions.get(s, "") for s in steps[:-1]] + [""]
        episode = (states, actions) if self.tag_after != "proposal" else (
            states, actions, [self._proposal(entry, s) for s in steps])
        return self.prm.score_last(episode, signals)

    @staticmethod
    def _proposal(entry: _Episode, s: int) -> str:
        # A step scored without a proposal call was played by the base agent as proposed (no
        # budget left, so no gate was asked): its action is its proposal.
        return entry.proposals.get(s, entry.actions.get(s, ""))

    def _step_ids(self, entry: _Episode, s: int, with_action: bool) -> list[int]:
        """Token ids of step ``s`` as rendered: (the previous action,) the state (and proposal), the tag."""
        from prm.inputs.render import step_pieces

        renderer = self.prm.renderer
        mode = self.tag_after
        proposal = (lambda step: self._proposal(entry, step)) if mode == "proposal" else (lambda step: None)
        texts = [step_pieces(s, entry.states.get(s, ""), "", mode, proposal(s))[0]]
        if with_action and s > 0:
            texts.insert(0, step_pieces(s - 1, "", entry.actions.get(s - 1, ""), mode, proposal(s - 1))[1])
        pieces = renderer.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [i for piece in pieces for i in piece] + list(renderer.tag_ids)

    def _incremental(self, entry: _Episode, t: int, signals=None) -> float | None:
        import torch

        if t < entry.next_step:  # this step was fed with other text: start the episode over
            entry.cache, entry.fed, entry.next_step, entry.cut = None, 0, 0, False
        self._resume(entry, t)
        # New tokens, in rendering order: previous action, this state, the tag (per new step).
        ids = [i for s in range(entry.next_step, t + 1) for i in self._step_ids(entry, s, with_action=s > 0)]
        if entry.fed + len(ids) > self.prm.context:
            # Past the context: start a fresh cache on the latest steps that fill at most half of
            # it (history cut from the left, as `prm score` cuts long episodes), so the next
            # decisions are incremental again instead of re-scoring a full window each.
            per_step = [self._step_ids(entry, s, with_action=True) for s in range(t + 1)]
            first, total = t, len(per_step[t])
            while first > 0 and total + len(per_step[first - 1]) <= self.prm.context // 2:
                first -= 1
                total += len(per_step[first])
            ids = self._step_ids(entry, first, with_action=False) + [i for s in range(first + 1, t + 1)
                                                                     for i in per_step[s]]
            if len(ids) > self.prm.context:
                return None  # one state longer than the context: the full path cuts it
            entry.cache, entry.fed, entry.cut = None, 0, first > 0
        core = self.prm._core()
        device = core.device
        with torch.inference_mode():
            out = core.get_decoder()(
                input_ids=torch.tensor([ids], device=device),
                position_ids=torch.arange(entry.fed, entry.fed + len(ids), device=device)[None],
                **cache_arg(core.get_decoder(), entry.cache),
                use_cache=True,
            )
            hidden = out.last_hidden_state[0, -1:]
            if getattr(self.prm.settings, "pooling", "last") == "mean":
                # The step's tokens, as prm score pools them: its header, state (and proposal) and
                # tag, which end every feed; the previous action before them is not part of it.
                span = len(self._step_ids(entry, t, with_action=False))
                hidden = out.last_hidden_state[0, -span:].mean(0, keepdim=True)
            row = None if signals is None else signals[None]
            value = float(self.prm.probabilities(self.prm.head(self.prm.head_input(
                hidden, row, [entry.states.get(t, "")])))[0])
        entry.cache, entry.fed, entry.next_step = returned_cache(out), entry.fed + len(ids), t + 1
        with self._lock:
            self.fed_tokens += len(ids)
        if not entry.cut:
            self._keep(self._prefix_key(entry, t), entry.cache, entry.fed)
        return value

    # -- prefix caches shared by the plays of one episode (module docstring, "Prefix caches") ------------------
    def _resume(self, entry: _Episode, t: int) -> None:
        """Point ``entry`` at the longest kept prefix of steps before ``t`` that its own cache does not hold yet."""
        if not self._prefixes:
            return
        from transformers import DynamicCache

        for s in range(t - 1, entry.next_step - 1, -1):
            key = self._prefix_key(entry, s)
            with self._lock:
                kept = self._prefixes.get(key)
                if kept is None:
                    continue
                self._prefixes.move_to_end(key)
            layers, fed = kept
            # A fresh cache around the kept tensors: the next forward concatenates into new ones.
            entry.cache, entry.fed, entry.next_step, entry.cut = DynamicCache(ddp_cache_data=layers), fed, s + 1, False
            return

    def _keep(self, key: str, cache, fed: int) -> None:
        """Keep the keys and values after a fed step under its prefix hash, least recently used dropped past
        ``prefix_bytes``."""
        if fed * self.token_bytes() > self.prefix_bytes or not hasattr(cache, "layers"):
            return
        layers = [(layer.keys, layer.values) for layer in cache.layers if getattr(layer, "keys", None) is not None]
        with self._lock:
            if key in self._prefixes:
                self._prefixes.move_to_end(key)
                return
            self._prefixes[key] = (layers, fed)
            self._prefix_held += fed
            while self._prefix_held * self.token_bytes() > self.prefix_bytes:
                _, (_, dropped) = self._prefixes.popitem(last=False)
                self._prefix_held -= dropped
