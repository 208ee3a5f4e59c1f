"""A person at the terminal as the actor of an intervention (``--strong human-cli``).

    collect-offline-trajectories --env examples.arith_chain:make_episodes \\
        --agent examples.arith_chain:make_agent --strong human-cli --episodes 4 --out traj-mine

For each decision handed to it, the agent shows the state on ``prompt_stream`` (stderr by
default, so that stdout keeps the command's own output) and reads one line from ``input_stream``
(stdin) as the action; blank lines are asked again. The actions carry the actor ``human``, so the
rows are the user's own labelled interventions. Standard input that ends before an answer is an
error that says which decision was waiting. Any stream works: a pipe, a file of answers, a socket.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from agile.protocol import HUMAN, Action, Observation


class HumanInputClosed(ValueError):
    """Standard input ended while a decision was waiting for the person's action."""


class HumanCLIAgent:
    """Asks a person for each action: prints the state, reads one line."""

    def __init__(self, input_stream: TextIO | None = None, prompt_stream: TextIO | None = None,
                 name: str = "human-cli", actor: str = HUMAN):
        self.input_stream = input_stream
        self.prompt_stream = prompt_stream
        self.name = name
        self.actor = actor

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        return [Action(self._ask(observation), actor=self.actor) for observation in observations]

    def _ask(self, observation: Observation) -> str:
        # Streams are looked up at call time so that a test's or a caller's redirection applies.
        source = self.input_stream or sys.stdin
        out = self.prompt_stream or sys.stderr
        out.write(f"\n=== episode {observation.episode_id} ({observation.env}, task {observation.task_id}), "
                  f"decision {observation.step + 1} of {observation.horizon} ===\n{observation.state_text}\n")
        while True:
            out.write("your action> ")
            out.flush()
            line = source.readline()
            if not line:
                out.write("\n")
                raise HumanInputClosed(
                    f"human-cli: standard input ended while episode {observation.episode_id!r} decision "
                    f"{observation.step} waited for an action; give one line per intervention.")
            if line.strip():
                return line.strip()
