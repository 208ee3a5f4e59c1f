"""Which ProductQA sessions an episode holds: the one definition every ProductQA stack draws from.

Episode ``i`` of a split under seed ``s`` is group ``i mod G`` (the split's group folders, sorted by
name) and a window of ``questions_per_episode`` consecutive questions of it, starting at an offset
drawn from ``derive_seed(s, i)``. File order is AGILE's session order: later questions reuse the
products and knowledge of earlier ones, so a window keeps what memory can carry.

Every ProductQA episode loop (the AGILE executor of ``agile.executor.episode``, and ``agile eval`` and PPO's
windows) takes its episodes from here, so the same ``(split, seed, i)`` is the same group and the same
questions wherever it is played: a helper collected in one is replayed on the same sessions in another, and
they are compared question for question.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from agile.envs.productqa import ProductGroup, Question, list_groups, load_group
from agile.seeding import derive_seed


def session_window(group: ProductGroup, seed: int, questions_per_episode: int) -> list[Question]:
    """``questions_per_episode`` consecutive questions of ``group`` from an offset drawn from ``seed``
    (all of them when the group is shorter)."""
    if questions_per_episode < 1:
        raise ValueError(f"questions_per_episode must be >= 1, got {questions_per_episode}.")
    n = min(questions_per_episode, len(group.questions))
    start = random.Random(seed).randrange(len(group.questions) - n + 1)
    return group.questions[start:start + n]


class SplitSessions:
    """The groups of one ProductQA split, loaded on first use, and the episodes' windows.

    Any subset of episode indices can be drawn alone (collection writes shards of index ranges
    and resumes). A bad root, split or group name is refused here, before anything heavy loads.
    """

    def __init__(self, root: str | Path, split: str = "train", groups: Sequence[str] | None = None):
        paths = list_groups(root, split)
        available = [p.name for p in paths]
        unknown = [g for g in groups or () if g not in available]
        if unknown:
            raise ValueError(f"groups: {unknown} not found in {Path(root) / split}; available: {available}.")
        paths = [p for p in paths if not groups or p.name in groups]
        if not paths:
            raise FileNotFoundError(f"{Path(root) / split}: holds no ProductQA group folders.")
        self.root, self.split, self.paths = Path(root), split, paths
        self._loaded: dict[str, ProductGroup] = {}

    @property
    def group_names(self) -> list[str]:
        return [p.name for p in self.paths]

    def group(self, name: str) -> ProductGroup:
        if name not in self._loaded:
            self._loaded[name] = load_group(next(p for p in self.paths if p.name == name))
        return self._loaded[name]

    def group_of(self, index: int) -> ProductGroup:
        """Episode ``index``'s group (round-robin over the sorted groups)."""
        return self.group(self.paths[index % len(self.paths)].name)

    def episode_seed(self, index: int, seed: int) -> int:
        return derive_seed(seed, index)

    def window(self, index: int, seed: int, questions_per_episode: int) -> tuple[ProductGroup, list[Question]]:
        """The group and questions of episode ``index`` under ``seed``."""
        group = self.group_of(index)
        return group, session_window(group, self.episode_seed(index, seed), questions_per_episode)

    def episode_name(self, index: int, seed: int) -> str:
        """The part of an episode id that names the session (each stack adds its own prefix)."""
        return f"{self.split}-s{seed}-{index:06d}-{self.paths[index % len(self.paths)].name}"
