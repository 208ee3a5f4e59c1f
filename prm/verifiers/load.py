"""Load a saved PRM folder of either kind: a causal-LM PRM or a cross-encoder one.

It stands above both classes so that ``prm.verifiers.model`` need not know its encoder subclass
(``prm.verifiers.encoder``), which builds on it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from prm.verifiers.calibration import Calibrator
from prm.verifiers.encoder import EncoderPRM
from prm.verifiers.model import HEAD_FILE, ProcessRewardModel, read_settings


def load_prm(directory: str | os.PathLike, device: str | None = None, dtype: torch.dtype | None = None,
             merge_lora: bool = False) -> ProcessRewardModel:
    """Restore a PRM written by ``save`` (its ``prm_config.json`` says which kind). ``merge_lora`` folds
    adapters in (faster scoring)."""
    directory = Path(directory)
    settings = read_settings(directory)
    if not settings.encoder:
        return ProcessRewardModel.load(directory, device, dtype, merge_lora)
    from safetensors.torch import load_file

    prm = EncoderPRM.restore(directory, settings, device, dtype)
    prm.head.load_state_dict(load_file(directory / HEAD_FILE))
    prm.calibrator = Calibrator.load(directory)
    return prm.eval()
