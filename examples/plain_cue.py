"""A river of stepping stones whose risk is said in plain words: a plug-in environment with a known optimum.

    PYTHONPATH=. python benchmarks/experiment.py pipeline --env examples.plain_cue:make_episodes \\
        --agent examples.plain_cue:make_agent --prm-model tiny --prm-pooling mean \\
        --prm-target process --budgets 1 2 3 --quick --out runs/plain-cue

An episode is ``HORIZON`` crossings. Each crossing's state text says, mid-sentence, how risky it
is (``calm``, ``tricky`` or ``dangerous``, drawn independently with probabilities ``RISK_ODDS``)
and which marker is on the safe stone; the agent must say the marker. The base agent
(``make_agent``) always reads the marker right, but at a risky crossing it slips, and says
another number, with the known probability ``SLIP[risk]`` (its draw keyed by the episode id and
the crossing, so runs reproduce). A slip ends the episode as a failure; the episode succeeds when
every crossing is made. The intervention (``expert_action``) says the marker: that crossing is safe.

So the dynamics are known exactly: an intervention at a calm crossing gains nothing, one at a
risky crossing gains that crossing's slip probability times the chance of making the rest, and the
best gate under a budget of C interventions is computable by brute force
(``examples.plain_cue_optimum``). Every probability is a multiple of 1/4, so its values are exact
binary fractions and two correct computations of the optimum agree to the last bit.

Each episode counts ``nil_gain_interventions``: interventions it received at calm crossings, where
the true gain is nil whatever follows; ``helpgate sweep`` reports their mean per method and budget.
The risk is also in ``Observation.annotations`` (never a helper, PRM or agent input) for the
exact-optimal reference gate.
"""

from __future__ import annotations

import copy
import random
import re

from agile.protocol import BASE, HUMAN, Action, Observation, StepResult
from agile.seeding import derive_seed, stable_uniform

ENV = "plain_cue"
HORIZON = 5
"""Crossings per episode."""
RISK_ODDS = {"calm": 0.5, "tricky": 0.25, "dangerous": 0.25}
"""Probability of each risk word at a crossing, independently of the others."""
SLIP = {"calm": 0.0, "tricky": 0.25, "dangerous": 0.75}
"""Probability that the base agent says a wrong marker at a crossing of that risk."""

# The risk word sits inside a sentence that goes on after it, between varied filler, so a reader
# cannot find it at a fixed offset or at the end of the state.
OPENERS = ("The water is brown and fast here.", "A heron watches from the far bank.",
           "Reeds brush against the stones.", "The light is fading over the river.", "")
FRAMES = ("The ferryman calls this crossing {risk} today, and he points at the stones ahead.",
          "Everyone who came this way found the crossing {risk}, or so the notes on the post say.",
          "This crossing looks {risk} from the bank, though the far side is hard to see.")


class CrossingEpisode:
    """One river: a risk word and a marker per crossing; the state is how far the agent got."""

    def __init__(self, episode_id: str, task_id: str, risks: list[str], markers: list[int], texts: list[str]):
        self.episode_id, self.task_id = episode_id, task_id
        self.risks, self.markers, self.texts = risks, markers, texts
        self.horizon = len(risks)
        self.position = 0
        self.failed = False
        self.nil_gain_interventions = 0
        """Interventions at calm crossings (where the base agent never slips): their true gain is nil."""

    def observe(self) -> Observation:
        t = self.position
        return Observation(self.episode_id, ENV, self.task_id, t, self.texts[t], self.horizon,
                           annotations={"risk": self.risks[t]})

    def step(self, action: Action) -> StepResult:
        numbers = re.findall(r"\d+", action.text)
        right = bool(numbers) and int(numbers[-1]) == self.markers[self.position]
        if action.actor != BASE and SLIP[self.risks[self.position]] == 0.0:
            self.nil_gain_interventions += 1
        self.failed = not right
        self.position += 1
        return StepResult(reward=float(right), done=self.done, info={"right": right})

    def expert_action(self) -> Action:
        return Action(f"The marker is {self.markers[self.position]}.", actor=HUMAN)

    @property
    def done(self) -> bool:
        return self.failed or self.position >= self.horizon

    def success(self) -> float:
        return float(self.position >= self.horizon and not self.failed)

    def clone(self) -> CrossingEpisode:
        return copy.deepcopy(self)


def crossing_text(rng: random.Random, t: int, horizon: int, risk: str, marker: int) -> str:
    opener = rng.choice(OPENERS)
    frame = rng.choice(FRAMES).format(risk=risk)
    return (f"Crossing {t + 1} of {horizon}. {opener} {frame} The safe stone carries the marker {marker}. "
            "Say the marker of the stone you step on.").replace("  ", " ")


def make_episodes(split: str, count: int, seed: int) -> list[CrossingEpisode]:
    """The env factory: episode ``i`` depends only on ``(split, seed, i)``."""
    names, weights = list(RISK_ODDS), list(RISK_ODDS.values())
    episodes = []
    for i in range(count):
        rng = random.Random(derive_seed(ENV, split, seed, i))
        risks = rng.choices(names, weights, k=HORIZON)
        markers = [rng.randint(10, 99) for _ in risks]
        texts = [crossing_text(rng, t, HORIZON, r, m) for t, (r, m) in enumerate(zip(risks, markers))]
        episodes.append(CrossingEpisode(f"{ENV}-{split}-{seed}-{i}", f"{split}-{i}", risks, markers, texts))
    return episodes


class CrossingAgent:
    """Reads the marker and the risk word from the state text; slips with the risk's known probability."""

    name = "plain-cue-base"
    _risk = re.compile(r"\b(" + "|".join(SLIP) + r")\b")
    _marker = re.compile(r"marker (\d+)")

    def act(self, observations: list[Observation]) -> list[Action]:
        return [Action(f"The marker is {self._answer(o)}.", actor=BASE) for o in observations]

    def _answer(self, observation: Observation) -> int:
        marker = int(self._marker.search(observation.state_text).group(1))
        risk = self._risk.search(observation.state_text).group(1)
        if stable_uniform(observation.episode_id, observation.step, "slip") >= SLIP[risk]:
            return marker
        # A slip names a neighbouring stone's marker: a different number, never the right one.
        return marker + random.Random(derive_seed(observation.episode_id, observation.step, "stone")).choice([-1, 1])


def make_agent() -> CrossingAgent:
    """The agent factory: no arguments."""
    return CrossingAgent()
