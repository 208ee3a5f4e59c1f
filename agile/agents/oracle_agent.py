"""The human as an agent: ``OracleAgent`` answers with ``episode.expert_action()`` (actor ``human``).

The rollout loop does the same when it is given ``strong=None``; the class exists so that the human can
also be used wherever an ``Agent`` is expected (an always-right base agent for upper bounds, tests). A
stronger LLM as the strong actor is the executor's policy on that model with the actor ``strong``
(``agile.executor.episode.AgileAgent``; ``--strong MODEL``).
"""

from __future__ import annotations

from collections.abc import Sequence

from agile.protocol import HUMAN, Action, Episode, Observation


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
