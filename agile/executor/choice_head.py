"""A linear head on the choice state that moves ``[SeekAdvice]``'s log-probability (PPO's ``choice_head``).

The constrained policy picks a turn's function by the log-probability of its name after the context
(``agile.executor.constrained``). PPO's LoRA update of that choice moved one ask bias shared by every
question (``RESULTS``: "The question restated before the choice"), while a logistic probe of the choice state,
the last prompt token's final hidden state, reads the question's kind at 0.89-0.94, and a linear head on it
trained on half the groups splits them on the other half. This is that head, in the policy itself:

    score(f | s) = log p(f | s) + 1[f = SeekAdvice] * (w . (h(s) - mu) / sigma + b)

``h(s)`` the LM's final (normed) hidden state at the prompt's last token, ``mu`` and ``sigma`` its mean and
deviation over the first rollouts' choice states (fixed once fitted: a standardised input lets one learning
rate serve every coordinate), ``w`` and ``b`` zero at the start, so the policy starts as the model. The
function is then drawn (rollouts) or taken greedily (evaluation) from the softmax of the allowed functions'
scores, as without the head. The head travels with the model folder (``choice_head.safetensors``), and
``agile eval``, collection and the join load it with the weights.
"""

from __future__ import annotations

from pathlib import Path

import torch

from agile import functions as fn

FILE_NAME = "choice_head.safetensors"


class ChoiceHead(torch.nn.Module):
    """``w . P (h - mu) / sigma + b``: the shift of ``[SeekAdvice]``'s score at a choice state ``h``.

    ``P`` (``components`` > 0) projects the standardised state on its first principal components, each scaled to
    unit variance (fitted with ``mu`` and ``sigma``): a head of ``components`` + 1 weights learns from a few dozen
    sessions an update with less noise than one of ``hidden_size`` + 1. Without it (``components`` = 0) ``P`` is
    the identity."""

    def __init__(self, hidden_size: int, components: int = 0):
        super().__init__()
        if components < 0 or components > hidden_size:
            raise ValueError(f"components={components}: use 0 (no projection) up to the hidden size {hidden_size}.")
        self.weight = torch.nn.Parameter(torch.zeros(components or hidden_size))
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("scale", torch.ones(hidden_size))
        self.register_buffer("basis", torch.zeros(components, hidden_size))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        """The shift for each state: [..., hidden] -> [...]."""
        x = (states.float().to(self.weight.device) - self.mean) / self.scale
        if len(self.basis):
            x = x @ self.basis.T
        return x @ self.weight + self.bias

    def shifted(self, scores, functions: list[str], state: torch.Tensor):
        """``scores`` (one per function) with ``[SeekAdvice]``'s moved by the head at ``state``; a tensor
        stays differentiable, a list comes back as floats."""
        if fn.SEEK_ADVICE not in functions:
            return scores
        a = functions.index(fn.SEEK_ADVICE)
        if isinstance(scores, torch.Tensor):
            onehot = torch.zeros_like(scores)
            onehot[a] = 1.0
            return scores + onehot * self(state)
        out = list(scores)
        out[a] = float(out[a]) + float(self(state).detach())
        return out

    def save(self, folder: str | Path) -> Path:
        from safetensors.torch import save_file

        path = Path(folder) / FILE_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, path)
        return path


def load_choice_head(folder: str | Path) -> ChoiceHead | None:
    """The head saved in a model folder, or None when the folder has none (a model trained without one)."""
    from safetensors.torch import load_file

    path = Path(folder) / FILE_NAME
    if not path.is_file():
        return None
    try:
        tensors = load_file(path)
        # A head saved before the projection existed reads the whole state.
        tensors.setdefault("basis", torch.zeros(0, len(tensors["mean"])))
        head = ChoiceHead(len(tensors["mean"]), len(tensors["basis"]))
        head.load_state_dict(tensors)
    except Exception as exc:  # a damaged or foreign file fails in whichever reader meets it first
        raise ValueError(f"{path}: not a readable choice head ({type(exc).__name__}: {exc}); delete it to run the "
                         "model without its head, or train again.") from exc
    return head.eval()


def backbone(model):
    """The decoder stack of a causal LM (LoRA-wrapped or not): its forward returns ``last_hidden_state``."""
    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(hf, hf.base_model_prefix)


@torch.no_grad()
def choice_state(model, prompt: list[int], kv) -> torch.Tensor:
    """The final hidden state at ``prompt``'s last token, from the prompt's cached keys and values ``kv`` (per
    layer ``(keys, values)``, every prompt token): the last token runs again on the others' keys and values, one
    token's forward instead of the prompt's."""
    from transformers import DynamicCache

    from agile.models import cache_arg

    stack = backbone(model)
    n = len(prompt)
    cache = DynamicCache(config=stack.config)
    for layer, (k, v) in enumerate(kv):
        cache.update(k[:, :, :n - 1], v[:, :, :n - 1], layer)
    device = next(stack.parameters()).device
    out = stack(input_ids=torch.tensor([[prompt[-1]]], device=device),
                position_ids=torch.tensor([[n - 1]], device=device), **cache_arg(stack, cache), use_cache=True)
    return out.last_hidden_state[0, -1].float().cpu()


def ask_margins(choices: list[dict]) -> list[float]:
    """Per constrained choice that offered ``[SeekAdvice]`` and something else: its score minus the best other's
    (the decoder's ``choices`` records; positive where the greedy agent asked)."""
    out = []
    for c in choices:
        scores = c.get("function_logprobs", {})
        if fn.SEEK_ADVICE in scores and len(scores) > 1:
            out.append(float(scores[fn.SEEK_ADVICE]) - max(float(v) for f, v in scores.items() if f != fn.SEEK_ADVICE))
    return out


def shift_for_rate(margins: list[float], rate: float) -> float:
    """The shift of ``[SeekAdvice]``'s score at which the greedy agent asks on ``rate`` of the choices whose
    ``margins`` these are (``ask_margins``): the threshold on its own ask score, halfway between the margins it
    puts on either side."""
    if not margins:
        raise ValueError("shift_for_rate needs the ask margins of at least one choice that offered [SeekAdvice].")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate={rate}: give an advice rate in [0, 1].")
    ranked = sorted(margins, reverse=True)
    k = int(round(rate * len(ranked)))
    if k == 0:
        return -ranked[0] - 1.0
    if k == len(ranked):
        return -ranked[-1] + 1.0
    return -(ranked[k - 1] + ranked[k]) / 2

