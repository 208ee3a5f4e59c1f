"""The contracts between environments, agents, the episode loop and an (optional) gate.

Everything in ``agile`` that runs an episode speaks these types, so a new environment
(ProductQA, TextWorld, ...) or a new agent plugs into the same loop, the same collection
script and the same helper. ``agile`` never imports ``helper``: a gate is any object with a
``should_intervene`` method (``Gate`` below is a structural protocol).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

BASE, STRONG, HUMAN = "base", "strong", "human"


@dataclass(frozen=True)
class Observation:
    """One decision point, as the agent, the PRM and the helper see it."""

    episode_id: str
    env: str
    task_id: str
    step: int
    """Decision index in the episode, 0-based."""
    state_text: str
    """Everything the agent is shown at this point (question, context, memory, tool output)."""
    horizon: int
    """Number of decision points the episode is planned to have (upper bound for text games)."""
    features: dict[str, float] = field(default_factory=dict)
    """Numeric side information a deployed agent has too (progress, memory hits, ...), for
    feature-based helpers."""
    annotations: dict[str, str] = field(default_factory=dict)
    """The dataset's own labels of this decision point (ProductQA: ``question_type``), which a
    deployed agent never has: for simulated agents and known-dynamics references only, never a
    helper, PRM or baseline input; not logged."""
    seed: int | None = field(default=None, compare=False)
    """A seed for this decision that the episode loop hands the agent (``agile.rollout.decision_seed``: a pure
    function of the run's seed, ``episode_id``, ``step`` and the tool round), so a stochastic agent that draws
    from it (``observation.rng()``) meets the same draws under every method of a sweep. None where no loop
    set it (an observation straight from ``episode.observe()``)."""

    def rng(self) -> random.Random:
        """A generator seeded for this decision alone (see ``seed``); refused where no loop set a seed."""
        if self.seed is None:
            raise ValueError(f"observation of {self.episode_id!r} step {self.step} has no seed: only observations "
                             "the episode loop (agile.rollout) hands an agent carry one; draw from "
                             "agile.seeding.derive_seed(your_seed, observation.episode_id, observation.step) instead.")
        return random.Random(self.seed)


@dataclass(frozen=True)
class Action:
    """What an actor did at a decision point: the function-token text and who produced it."""

    text: str
    actor: str = BASE
    signals: dict[str, float] = field(default_factory=dict, compare=False)
    """Numbers the agent gives about this action for free (e.g. the answer's log-probability);
    carried into the logged ``proposal_signals``, never read by the environment."""
    token_ids: tuple[int, ...] | None = field(default=None, compare=False)
    """The token ids an LLM agent generated, for an environment that takes them as they are (the
    AGILE executor): decoding and encoding again need not give the same ids."""


@dataclass(frozen=True)
class StepResult:
    reward: float
    done: bool
    info: dict = field(default_factory=dict)


class Episode(Protocol):
    """A running episode. ``clone`` makes an independent copy for counterfactual rollouts."""

    episode_id: str

    def observe(self) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...

    def expert_action(self) -> Action:
        """The intervention: the human / gold answer or the expert's move at this point.

        An episode that offers several kinds of help of its own also lists their names in an attribute
        ``help_kinds`` and answers ``expert_action(kind=name)`` for each; called with no kind it stays its one
        expert (``agile.helps``)."""
        ...

    @property
    def done(self) -> bool: ...

    def success(self) -> float:
        """The episode's outcome in [0, 1] (for ProductQA: mean per-question reward)."""
        ...

    def clone(self) -> "Episode": ...


class Agent(Protocol):
    """Anything that maps a batch of observations to a batch of actions.

    An agent that draws at random (sampling, a simulated slip) must draw per decision: seed each
    draw from what identifies the decision, ``observation.episode_id`` and ``observation.step``
    (and the agent's own seed), e.g. ``agile.seeding.stable_uniform(seed, obs.episode_id,
    obs.step, "slip")`` or ``random.Random(derive_seed(seed, obs.episode_id, obs.step))``, never
    from one generator shared across calls. Then an answer does not depend on the batch, on the
    calls before it, or on which method of a sweep played first and where it intervened: every
    method meets the same draws (common random numbers), so the comparisons are paired and every
    method's C = 0 row is the same. The bundled agents all do this. The loop hands every observation an
    agent sees such a seed (``observation.seed``; ``observation.rng()`` a generator of it), so a plug-in
    agent can simply draw from ``observation.rng()``. ``helpgate sweep`` warns where the C = 0 rows differ.
    """

    name: str

    def act(self, observations: list[Observation]) -> list[Action]: ...


DECIDE_AFTER = ("state", "proposal")
"""When a gate decides: on the state alone, or after reading the base agent's proposal."""


@runtime_checkable
class Gate(Protocol):
    """Decides whether to hand this decision to the strong actor.

    ``budget_left`` is what the loop still allows in this episode; a gate must never answer
    True when it is 0 (the loop enforces it too).

    A gate with the attribute ``decide_after = "proposal"`` decides after the base agent has
    proposed: the loop lets the base agent act on a copy of the episode first and passes what it
    would do as ``proposal`` (an ``Action``: the decision's whole transcript as ``text``, the
    final action's ``signals``); the loop keeps the proposal when the gate says no. Without the
    attribute (or ``"state"``) the gate decides before the agent acts and is called with two
    arguments, so older gates keep working (``gate_decides_after``).

    Optional hooks, called when the gate has them (duck typing, so they are not members here):
    ``record_action(observation, action_text)`` after each decision, and
    ``end_episode(episode_id)`` when an episode finishes; a gate that counts its own budget per
    episode restarts an episode's count only there, so a loop that replays an episode id must
    end it first.
    """

    def should_intervene(self, observation: Observation, budget_left: int) -> bool: ...


def gate_decides_after(gate) -> str:
    """``"proposal"`` or ``"state"``: when ``gate`` decides (``"state"`` for no gate or no attribute)."""
    mode = getattr(gate, "decide_after", "state") if gate is not None else "state"
    if mode not in DECIDE_AFTER:
        raise ValueError(f"gate {getattr(gate, 'name', type(gate).__name__)!r} has decide_after={mode!r}; "
                         f"use one of {DECIDE_AFTER}.")
    return mode
