"""The process reward model: P(episode succeeds | text so far) at every decision point.

- ``ProcessRewardModel`` (``prm.model``): a causal-LM backbone with a step-tag (+/-) or value
  head; ``score_episodes`` scores all steps of an episode in one forward pass; ``save``/``load``.
- ``TrainConfig`` / ``run_train`` (``prm.train``): Monte-Carlo labels, split by episode, frozen
  backbone or LoRA, quality report (AUROC, Brier, ECE, reliability plot).
- ``ScoreConfig`` / ``run_score`` (``prm.score``): add ``prm_score`` to a trajectory folder,
  streaming and resumable, in-process or over Ray workers.
- ``ExportConfig`` / ``run_export`` (``prm.export``): the trajectories as a PRM dataset for other
  trainers (TRL's stepwise supervision: prompt, completions, labels).
"""

from prm.model import ProcessRewardModel
from prm.score import ScoreConfig, run_score
from prm.train import TrainConfig, run_train

__all__ = ["ProcessRewardModel", "ScoreConfig", "TrainConfig", "run_score", "run_train"]
