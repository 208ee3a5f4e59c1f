"""The agent's own extra test-time compute as a kind of help: self-consistency at a decision.

    collect-offline-trajectories --agent smollm2 --help-kinds compute:1 human:4 --budget 4 --out traj
    compute = SelfConsistencyAgent(base_agent.policy, samples=8)        # in Python: Help("compute", compute, 1)

Called at a decision, the help draws k turns from the base agent's own constrained log-probabilities (the
function, then for an answer its line: ``agile.executor.consistency``) and plays the **majority turn**, where
the base agent would play its greedy one: self-consistency decoding (Wang et al., 2022), one turn being one
path. Turns count by their key (an answer by its line, lowercased; any search as one turn, written as the
greedy query). A tie goes to the greedy turn where it is tied, else to the turn the model finds most probable
(``agile.executor.consistency.majority``), so k samples that all agree with the greedy turn play it, exactly.

**How ``compute`` resolves.** The help is an agent (``Help("compute", agent=..., price=...)``), not an
episode's expert: it needs the base agent's model, which the episodes do not own. On the command line the name
``compute`` (k = ``DEFAULT_SAMPLES``) or ``compute@K`` is resolved by the env kind
(``helper.data.env_kinds.ProductQA.compute_help``) before any name is read as a model, since a kind is
otherwise an actor ``--strong`` names, which on ProductQA would load another model; an env whose episodes
offer a kind of their own named ``compute`` (the plug-in examples) keeps its own.

**What it reuses.** The base agent's loaded model and tokenizer (never loaded twice) and its prompt cache: at a
decision where the base agent has proposed (``--decide-after proposal``), the prompt is not prefilled again,
and the answer lines it scored are what the samples draw from. Its choice head and ask shift move the function
scores as they move the base agent's.

**Deterministic per decision.** A decision's draws are seeded by the agent's seed and the seed the episode loop
hands the decision (``Observation.seed``; else its episode and step): every method of a sweep that calls the
help at that decision meets the same draws (paired runs), whatever the batch or the calls before. The draws
are compared with the model's log-probabilities, so they are as exact as those are: in bf16 on a CPU a prompt
scored from another cache history moved them by up to 0.3 nats, which moved the vote's count at 7 of 48
shared-ProductQA decisions and its winner at 2 (float32, the tests' tiny model: none).

**What it measured** (``benchmarks/agents/agile_self_consistency.py``; ``benchmarks/RESULTS.md``, "The compute
help"): on held-out ProductQA with the embedded SmolLM2 (bf16) the vote does not beat the greedy turn. Over 96
decisions (two seeds) it moved 8 turns at k = 4 and 7 at k = 8, and at either k won 1 of them and lost 5
(accuracy 0.375 against greedy's 0.417). A help that is the agent again, at about the greedy turn's seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from agile.executor.constrained import ConstrainedDecoder
from agile.protocol import STRONG, Action, Observation
from agile.seeding import derive_seed

COMPUTE = "compute"
"""The help's name on the command line (``--help-kinds compute:PRICE``; ``compute@K`` for K samples)."""
DEFAULT_SAMPLES = 8
"""k of ``compute``: the larger of the two measured (neither beat greedy: the module docstring), as in the field,
where the vote's gain grows with k."""


def samples_of(name: str) -> int | None:
    """k of the help ``name`` (``compute``: ``DEFAULT_SAMPLES``; ``compute@K``: K), None for any other name."""
    base, at, count = name.partition("@")
    if base != COMPUTE:
        return None
    if not at:
        return DEFAULT_SAMPLES
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"{name!r}: give the samples as compute@K with K a whole number >= 1, e.g. compute@4.")
    return int(count)


class SelfConsistencyAgent:
    """The majority turn of k samples of ``policy`` (an ``LLMPolicy`` with constrained decoding), batched."""

    needs_episodes = True

    def __init__(self, policy, samples: int = DEFAULT_SAMPLES, seed: int = 0, name: str = COMPUTE,
                 actor: str = STRONG):
        base = getattr(policy, "constrained", None)
        if base is None:
            raise ValueError(f"help {name!r} votes over samples of the base agent's constrained decoding, and its "
                             "policy decodes freely; run the base agent with --decoding constrained.")
        self.decoder = ConstrainedDecoder(base.model, policy.tokenizer, base.max_new_tokens, samples=samples,
                                          seed=seed, vote=True)
        self.decoder.cache = base.cache  # one prompt cache: a prompt the base agent prefilled is not prefilled again
        self.decoder.choice_head, self.decoder.ask_shift = base.choice_head, base.ask_shift
        self.tokenizer = policy.tokenizer
        self.samples, self.seed, self.name, self.actor = samples, int(seed), name, actor
        self.last_choices: list[dict] = []
        """Per turn of the last call, the decoder's record of it (``"vote"``: the greedy key, the key played,
        its count among the samples)."""

    def seed_of(self, observation: Observation) -> int:
        """The seed of one decision's samples (see the module docstring)."""
        decision = observation.seed if observation.seed is not None else (observation.episode_id, observation.step)
        return derive_seed(self.seed, decision, "self-consistency")

    def act(self, observations: list[Observation], episodes: Sequence = ()) -> list[Action]:
        if len(episodes) != len(observations):
            raise ValueError(f"help {self.name!r} needs the live episodes (it continues their executors' context).")
        turns = self.decoder([e.executor for e in episodes], seeds=[self.seed_of(o) for o in observations])
        self.last_choices = list(self.decoder.choices)
        self.decoder.choices.clear()  # read per call: a long collection keeps no record of every turn
        return [Action(self.tokenizer.decode(ids, skip_special_tokens=True), actor=self.actor,
                       signals=dict(choice.get("signals", {})), token_ids=tuple(ids))
                for ids, choice in zip(turns, self.last_choices)]
