"""The episodes, base agent and strong actor that online evaluation runs (``EnvConfig``).

Every method of a sweep is evaluated with the same ``Environment``: the same held-out episodes
(rebuilt fresh for each run, since ``run_episodes`` plays them in place), the same base agent and
the same strong actor. Held-out means: the ``test`` groups of ProductQA, with a seed different
from the one the training data was collected with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agile.productqa import QUESTION_TYPES


@dataclass
class EnvConfig:
    env: Literal["productqa"] = "productqa"
    """Environment the episodes come from."""
    data: str | None = None
    """ProductQA root with train/ and test/ groups (default: the generated catalog of seed 0)."""
    split: str = "test"
    """Split the evaluation episodes are drawn from (held-out groups)."""
    episodes: int = 64
    """Evaluation episodes per (method, budget)."""
    seed: int = 1000
    """Seed of the evaluation episodes (keep it different from the collection seed)."""
    questions_per_episode: int = 8
    """Decision points per episode."""
    agent: str = "simulator"
    """Base agent: simulator (known dynamics) or a model name for an LLM agent (smollm2, a HF id, a folder)."""
    sim_accuracy: list[float] = field(default_factory=lambda: [0.8, 0.4, 0.3])
    """Simulator: probability of a right answer per question type (fact_qa, search_qa, reasoning_qa)."""
    memory_boost: float = 0.0
    """Simulator: accuracy added per retrieved memory entry that came from an intervention."""
    agent_seed: int = 0
    """Seed of the base agent's draws."""
    strong: str = "human"
    """Who acts on an intervention: human (the gold answer) or a model name for a strong LLM."""
    device: str | None = None
    """Torch device for LLM agents and models (default: cuda when available, else cpu)."""


class Environment:
    """Builds fresh episodes on demand and holds the two actors."""

    def __init__(self, cfg: EnvConfig):
        from agile.productqa_env import ProductQASource

        if len(cfg.sim_accuracy) != len(QUESTION_TYPES):
            raise ValueError(f"sim_accuracy={cfg.sim_accuracy}: give one accuracy per question type "
                             f"{QUESTION_TYPES}, in that order.")
        self.cfg = cfg
        self.root = Path(cfg.data) if cfg.data else _default_root()
        self.source = ProductQASource(self.root, cfg.split)
        self.base = self._base_agent()
        self.strong = self._strong()

    def _base_agent(self):
        if self.cfg.agent == "simulator":
            from agile.simulator_agent import SimulatorAgent

            return SimulatorAgent(dict(zip(QUESTION_TYPES, self.cfg.sim_accuracy)), self.cfg.memory_boost,
                                  seed=self.cfg.agent_seed)
        from agile.llm_agent import LLMAgent

        return LLMAgent(model=self.cfg.agent, device=self.cfg.device, seed=self.cfg.agent_seed)

    def _strong(self):
        if self.cfg.strong == "human":
            return None  # run_episodes hands the decision to episode.expert_action(): the human
        from agile.oracle_agent import StrongLLMAgent

        return StrongLLMAgent(self.cfg.strong, device=self.cfg.device)

    @property
    def horizon(self) -> int:
        return self.cfg.questions_per_episode

    def episodes(self, n: int | None = None, seed: int | None = None, start: int = 0, split: str | None = None):
        """Fresh episodes ``start .. start+n-1`` (defaults: the evaluation set)."""
        source = self.source if split in (None, self.cfg.split) else self._other(split)
        n = self.cfg.episodes if n is None else n
        seed = self.cfg.seed if seed is None else seed
        return source.episodes(range(start, start + n), seed, self.cfg.questions_per_episode)

    def _other(self, split: str):
        from agile.productqa_env import ProductQASource

        return ProductQASource(self.root, split)

    def type_sequences(self, split: str | None = None) -> list[tuple[list[str], float]]:
        """Every session the split can produce, as (question types, probability).

        Episode ``i`` uses group ``i mod G`` (round-robin) and a start offset drawn uniformly, so
        each group has probability 1/G and each offset 1/(L - n + 1) within it.
        """
        source = self.source if split in (None, self.cfg.split) else self._other(split)
        sessions = []
        names = source.group_names
        for name in names:
            questions = source.resources(name).group.questions
            n = min(self.cfg.questions_per_episode, len(questions))
            offsets = len(questions) - n + 1
            for start in range(offsets):
                sessions.append(([q.type for q in questions[start:start + n]], 1.0 / (len(names) * offsets)))
        return sessions


def _default_root() -> Path:
    from agile.catalog_generator import default_catalog_dir

    return default_catalog_dir(0)
