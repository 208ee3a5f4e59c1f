"""The actors an intervention hands a decision to: the human (gold answer) or a stronger LLM.

- ``OracleAgent``: answers with ``episode.expert_action()`` (actor ``human``). The rollout loop
  does the same when it is given ``strong=None``; the class exists so that the human can also be
  used wherever an ``Agent`` is expected (an always-right base agent for upper bounds, tests).
- ``StrongLLMAgent``: an ``LLMAgent`` on another (larger) model whose actions are marked
  ``strong``. Where no larger model is available, pass the embedded one; the actor label still
  separates the two in the data.
"""

from __future__ import annotations

from collections.abc import Sequence

from agile.protocol import HUMAN, STRONG, Action, Episode, Observation


class OracleAgent:
    """The human: the gold answer of each episode's current decision point."""

    needs_episodes = True

    def __init__(self, name: str = "human", actor: str = HUMAN):
        self.name = name
        self.actor = actor

    def act(self, observations: Sequence[Observation], episodes: Sequence[Episode] | None = None) -> list[Action]:
        if episodes is None or len(episodes) != len(observations):
            raise ValueError(
                "OracleAgent reads the gold answer from the live episodes: call "
                "act(observations, episodes=...) with one episode per observation (run_episodes does)."
            )
        return [Action(episode.expert_action().text, actor=self.actor) for episode in episodes]


def StrongLLMAgent(model: str = "smollm2", **kwargs):
    """An ``LLMAgent`` on ``model`` whose actions carry the actor ``strong``."""
    from agile.agents.llm_agent import LLMAgent  # torch and transformers load only when asked for

    kwargs.setdefault("name", f"strong:{model}")
    return LLMAgent(model=model, actor=STRONG, **kwargs)
