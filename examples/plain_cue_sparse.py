"""The plain-cue river paid only at the end: the same risks and slips, reward 1 when the last crossing is made.

    PYTHONPATH=. python benchmarks/experiment.py pipeline --env examples.plain_cue_sparse:make_episodes \\
        --agent examples.plain_cue:make_agent --prm-model smollm2 --prm-layers 4 \\
        --budgets 1 2 3 4 5 --out runs/plain-cue-sparse

Most agent tasks pay at the end, so this variant logs a step reward of 0 at every crossing and 1 on
the last one when it is made (0 when a slip ends the episode). Episodes, state texts, the base agent
and the intervention are those of ``examples.plain_cue``; only ``StepResult.reward`` differs.
Success is defined as there (every crossing made), so the exact budgeted optimum is the same:
``examples.plain_cue_optimum.optimum`` maximises success and never reads a step reward, and its
``true_model`` already credits success at the last crossing only (tested equal on this env's
episodes in ``tests/examples/test_plain_cue_sparse.py``).

Without step rewards ``--prm-target process`` has nothing to learn from; the step a failed episode
ended on (``--prm-target fatal``) and the Monte-Carlo values of the cloned branches
(``--prm-target mc``, collected with ``--counterfactual``) need none.
"""

from __future__ import annotations

from agile.protocol import Action, StepResult
from examples.plain_cue import CrossingAgent, CrossingEpisode
from examples.plain_cue import make_episodes as make_dense_episodes

__all__ = ["SparseCrossingEpisode", "make_agent", "make_episodes"]


class SparseCrossingEpisode(CrossingEpisode):
    """A plain-cue river whose only reward is the episode's success, paid at its last step."""

    def step(self, action: Action) -> StepResult:
        result = super().step(action)
        paid = self.success() if result.done else 0.0
        return StepResult(reward=paid, done=result.done, info=result.info)


def make_episodes(split: str, count: int, seed: int) -> list[SparseCrossingEpisode]:
    """The env factory: the dense factory's rivers (same ids, risks, markers, texts), paid at the end."""
    out = []
    for dense in make_dense_episodes(split, count, seed):
        out.append(SparseCrossingEpisode(dense.episode_id, dense.task_id, dense.risks, dense.markers, dense.texts))
    return out


def make_agent() -> CrossingAgent:
    """The agent factory: plain-cue's base agent (it reads only the state text)."""
    return CrossingAgent()
