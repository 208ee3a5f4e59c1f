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


import importlib

# Resolved on first use (PEP 562), so importing a light wing (``prm.data.folds``) does not load torch.
_PUBLIC = {
    "ProcessRewardModel": "prm.verifiers.model",
    "ScoreConfig": "prm.scoring.score",
    "run_score": "prm.scoring.score",
    "TrainConfig": "prm.training.train",
    "run_train": "prm.training.train",
}

__all__ = ["ProcessRewardModel", "ScoreConfig", "TrainConfig", "run_score", "run_train"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'prm' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
