"""``TieredModel``: the finite-horizon MDP of ``TabularModel`` with one action per kind of help.

Action 0 is the agent acting; action k = 1 .. K calls kind ``kinds[k - 1]``. Prices are not part of
the model (they are the user's, given to the solver), so one model estimated from the data serves
every price list and budget. A separate class rather than a wider ``TabularModel``: every
two-action room (labels, pessimism, the gate's table) reads ``[..., 1]`` as "intervene", and a
model with more actions must not reach them by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..discretize import Discretizer
from ..estimate import TabularModel, check_tables


@dataclass
class TieredModel:
    """``transitions[t, s, a, s']`` has ``S + 1`` next states; index ``S`` is "episode over" (value 0)."""

    transitions: np.ndarray
    """(T, S, K + 1, S + 1) next-state probabilities, last column = terminal."""
    rewards: np.ndarray
    """(T, S, K + 1) expected reward of each action at (step, state)."""
    start: np.ndarray
    """(S,) distribution of the state at step 0."""
    kinds: tuple[str, ...]
    """Name of each kind of help, action k = 1 .. K at index k - 1."""
    success: np.ndarray | None = None
    """(T, S, K + 1) expected episode success credited at this step."""
    counts: np.ndarray | None = None
    """(T, S, K + 1) logged rows per (step, state, action)."""
    discretizer: Discretizer | None = None
    smoothing: float = 0.0
    backoff: float = 0.0
    transition_backoff: float = 0.0
    n_truncated: int = 0

    def __post_init__(self) -> None:
        self.kinds = tuple(str(k) for k in self.kinds)
        A = len(self.kinds) + 1
        if len(set(self.kinds)) != len(self.kinds) or not self.kinds:
            raise ValueError(f"kinds={self.kinds!r}: name each kind of help once, at least one")
        check_tables(self.rewards, self.transitions, self.start, n_actions=A)

    @property
    def horizon(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_states(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def n_kinds(self) -> int:
        return len(self.kinds)

    def kind_index(self, kind: str | int) -> int:
        """Action index (1 .. K) of a kind given by name or by index."""
        if isinstance(kind, (int, np.integer)):
            if not 1 <= int(kind) <= self.n_kinds:
                raise ValueError(f"kind {kind}: the kinds are 1 .. {self.n_kinds} ({', '.join(self.kinds)})")
            return int(kind)
        if kind not in self.kinds:
            raise ValueError(f"kind {kind!r}: the model knows {', '.join(self.kinds)}")
        return self.kinds.index(kind) + 1

    def only(self, kinds) -> TieredModel:
        """The same model with only ``kinds`` available (the agent's action kept): a one-kind helper's world."""
        keep = [0, *(self.kind_index(k) for k in kinds)]
        pick = (lambda a: None if a is None else a[:, :, keep])
        return TieredModel(transitions=self.transitions[:, :, keep], rewards=self.rewards[:, :, keep],
                           start=self.start, kinds=tuple(self.kinds[a - 1] for a in keep[1:]),
                           success=pick(self.success), counts=pick(self.counts), discretizer=self.discretizer,
                           smoothing=self.smoothing, backoff=self.backoff,
                           transition_backoff=self.transition_backoff, n_truncated=self.n_truncated)

    @classmethod
    def from_tabular(cls, model: TabularModel, kind: str = "intervene") -> TieredModel:
        """A two-action model as a tiered one with a single kind (its intervention)."""
        return cls(transitions=model.transitions, rewards=model.rewards, start=model.start, kinds=(kind,),
                   success=model.success, counts=model.counts, discretizer=model.discretizer,
                   smoothing=model.smoothing, backoff=model.backoff,
                   transition_backoff=model.transition_backoff, n_truncated=model.n_truncated)
