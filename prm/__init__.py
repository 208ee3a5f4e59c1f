"""The process reward model: P(episode succeeds | text so far) at every decision point.

- ``ProcessRewardModel`` (``prm.model``): a causal-LM backbone with a step-tag (+/-) or value
  head; ``score_episodes`` scores all steps of an episode in one forward pass; ``save``/``load``.
- ``TrainConfig`` / ``run_train`` (``prm.train``): Monte-Carlo labels, fold heads and the
  all-data head (frozen backbone), out-of-fold scores, quality report (AUROC, Brier, ECE,
  reliability plot).
- ``fine_tune`` (``prm.finetune``): trained verifiers (LoRA adapters, or a whole encoder), one copy per
  fold, each value head started from the frozen probe.
- ``EncoderPRM`` (``prm.encoder``): a cross-encoder PRM (``--model encoder``: all-MiniLM-L6-v2 fine-tuned
  whole), one mean-pooled window per step, through the same scoring and save/load.
- ``check_backbone`` (``prm.backbones``): which kind a backbone name means; a missing folder or one
  without a tokenizer refused in one line naming the option.
- ``assign_folds`` (``prm.folds``): folds of whole episodes, by task group, prefix-sharing
  episodes together.
- ``load_prm`` (``prm.load``): a saved PRM folder of either kind (causal LM or encoder).
- ``fit_head`` / ``cross_validated_l2`` (``prm.probe``): the frozen probe, its L2 chosen by CV.
- ``PrmScorer`` (``prm.scorer``): the scorer a gate calls, one decision point at a time, caches per
  episode.
- ``ScoreConfig`` / ``run_score`` (``prm.score``): add ``prm_score`` to a trajectory folder
  (training episodes: their out-of-fold scores), streaming and resumable, in-process or over Ray.
- ``signal_matrix`` (``prm.signals``): the base agent's own confidence signals (``Action.signals``,
  logged as ``proposal_signals``) as head inputs beside the hidden state.
- ``proposal_features`` (``prm.visible``): the proposal's visible form on ProductQA (search outcome, answer
  kind and shape, question phrasing, details, memory) as ``view:`` head inputs (``--proposal-features``).
- ``Calibrator`` (``prm.calibration``): isotonic or Platt map fitted on out-of-fold scores, saved
  as ``calibration.json`` and applied wherever the PRM scores.
- ``ExportConfig`` / ``run_export`` (``prm.export``): the trajectories as a PRM dataset for other
  trainers (TRL's stepwise supervision: prompt, completions, labels).
"""

from prm.model import ProcessRewardModel
from prm.score import ScoreConfig, run_score
from prm.train import TrainConfig, run_train

__all__ = ["ProcessRewardModel", "ScoreConfig", "TrainConfig", "run_score", "run_train"]
