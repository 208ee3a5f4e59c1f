"""A river that ends in rapids: a plug-in environment where *when* to ask for help matters, with a known optimum.

    PYTHONPATH=. python benchmarks/experiment.py pipeline --env examples.rapids:make_episodes \\
        --agent examples.rapids:make_agent --prm-model tiny --prm-pooling mean \\
        --prm-target process --budgets 1 2 3 4 5 --quick --out runs/rapids

An episode is ``HORIZON`` crossings, played as in ``examples.plain_cue``: each state text says,
mid-sentence, the crossing's risk word (``calm``, ``tricky`` or ``dangerous``) and the marker of
the safe stone; plain-cue's base agent reads both and slips with probability ``SLIP[risk]``; a slip
ends the episode as a failure; an intervention (``expert_action``) says the marker. Each crossing
made pays 1, so ``--prm-target process`` has a step reward to learn from.

The risks are drawn independently, but not alike (``RISK_ODDS_BY_STEP``): the first crossings are
calm or tricky, never dangerous; the last ``RAPIDS`` crossings are the rapids, mostly dangerous.
Every state text also says what lies ahead (before the rapids, a sentence about hearing them; at
the rapids, that this is one of them), so a reader of the text knows both the risk here and the
risk to come.

That makes the timing of help matter. A static threshold on the crossing's own risk either helps
at tricky crossings, spends the cap on the early ones and meets the rapids with nothing left, or
helps only at dangerous ones and leaves every early tricky crossing to the agent. The best gate
under a cap of C keeps what the rapids will likely need and spends the rest early:
``examples.rapids_optimum`` computes it exactly, the best thresholds beside it, and the room
between them (largest at C = 3 and 4).

Each episode counts ``nil_gain_interventions`` (interventions at calm crossings) as plain-cue does;
the risk is also in ``Observation.annotations`` (never a helper, PRM or agent input) for the
exact-optimal reference gate.
"""

from __future__ import annotations

import random

from agile.protocol import Observation
from agile.seeding import derive_seed
from examples.plain_cue import FRAMES, OPENERS, SLIP, CrossingAgent, CrossingEpisode

__all__ = ["HORIZON", "RAPIDS", "RISK_ODDS_BY_STEP", "SLIP", "RapidsEpisode", "make_agent", "make_episodes",
           "risk_odds_by_step"]

ENV = "rapids"
HORIZON = 6
"""Crossings per episode."""
RAPIDS = 2
"""The last crossings of every river are the rapids."""
BEFORE_RAPIDS = {"calm": 0.3, "tricky": 0.7, "dangerous": 0.0}
"""Probability of each risk word at a crossing before the rapids."""
AT_RAPIDS = {"calm": 0.2, "tricky": 0.2, "dangerous": 0.6}
"""Probability of each risk word at one of the rapids."""


def risk_odds_by_step(horizon: int) -> tuple[dict[str, float], ...]:
    """Per crossing, the probability of each risk word: the river of ``horizon`` crossings, rapids last."""
    rapids = min(RAPIDS, horizon)
    return (BEFORE_RAPIDS,) * (horizon - rapids) + (AT_RAPIDS,) * rapids


RISK_ODDS_BY_STEP = risk_odds_by_step(HORIZON)
"""Probability of each risk word at each crossing, independently of the other crossings."""

# What lies ahead, said in words that are not risk words: the agent's regex and a reader of the text
# must find exactly one risk word in a state, the current crossing's.
RAPIDS_AHEAD = ("The roar of the rapids at the last two crossings carries upstream.",
                "Far downstream the river narrows into the rapids of the last two crossings; you can hear them.",
                "A sign on the post says the final two crossings run through rapids.")
AT_THE_RAPIDS = ("This is one of the rapids: white water pours between the stones.",
                 "You have reached the rapids, the last stretch of the river.",
                 "Spray from the rapids soaks every stone of this crossing.")


class RapidsEpisode(CrossingEpisode):
    """A plain-cue river under this family's name: the same steps, rewards and intervention."""

    def observe(self) -> Observation:
        t = self.position
        return Observation(self.episode_id, ENV, self.task_id, t, self.texts[t], self.horizon,
                           annotations={"risk": self.risks[t]})


def crossing_text(rng: random.Random, t: int, horizon: int, risk: str, marker: int) -> str:
    """The state text of crossing ``t``: the risk word mid-sentence, the cue about the rapids, the marker."""
    opener = rng.choice(OPENERS)
    frame = rng.choice(FRAMES).format(risk=risk)
    cue = rng.choice(AT_THE_RAPIDS if t >= horizon - RAPIDS else RAPIDS_AHEAD)
    # The cue goes before or after the risk sentence, so neither sits at a fixed place in the text.
    middle = f"{cue} {frame}" if rng.random() < 0.5 else f"{frame} {cue}"
    return (f"Crossing {t + 1} of {horizon}. {opener} {middle} The safe stone carries the marker {marker}. "
            "Say the marker of the stone you step on.").replace("  ", " ")


def make_episodes(split: str, count: int, seed: int) -> list[RapidsEpisode]:
    """The env factory: episode ``i`` depends only on ``(split, seed, i)``."""
    episodes = []
    for i in range(count):
        rng = random.Random(derive_seed(ENV, split, seed, i))
        risks = [rng.choices(list(odds), list(odds.values()))[0] for odds in RISK_ODDS_BY_STEP]
        markers = [rng.randint(10, 99) for _ in risks]
        texts = [crossing_text(rng, t, HORIZON, r, m) for t, (r, m) in enumerate(zip(risks, markers))]
        episodes.append(RapidsEpisode(f"{ENV}-{split}-{seed}-{i}", f"{split}-{i}", risks, markers, texts))
    return episodes


def make_agent() -> CrossingAgent:
    """The agent factory: plain-cue's base agent (it reads the marker and the risk word from the text)."""
    return CrossingAgent()
