"""The process reward model: P(episode succeeds | text so far) at every decision point.

``from prm import ProcessRewardModel, TrainConfig, run_train, ScoreConfig, run_score`` is the
public face. Five wings by purpose, each on a floor that imports only the floors below it:

- ``inputs/``: what the PRM reads at a decision point: the episode rendered as token windows and
  batched, the agent's own signals and the proposal's visible form as head inputs.
- ``data/``: the trajectories as training data: the columns read, Monte-Carlo labels, folds by task
  group, synthetic trajectories, and ``helpgate prm export`` for other trainers.
- ``verifiers/``: the causal-LM ``ProcessRewardModel`` and the cross-encoder ``EncoderPRM``, the
  backbones they stand on, their calibrator, and ``load_prm`` for a saved folder of either kind.
- ``training/``: ``helpgate prm train``: the frozen probe, fine-tuned verifiers (LoRA or a whole
  encoder), out-of-fold scores and the quality report.
- ``scoring/``: ``helpgate prm score`` (in process or over Ray), and ``PrmScorer``, the scorer a
  gate calls one decision point at a time.
"""

from prm.verifiers.model import ProcessRewardModel
from prm.scoring.score import ScoreConfig, run_score
from prm.training.train import TrainConfig, run_train

__all__ = ["ProcessRewardModel", "ScoreConfig", "TrainConfig", "run_score", "run_train"]
