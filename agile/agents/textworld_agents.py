"""Base agents for TextWorld episodes (``agile.envs.textworld_env``), batched like every ``Agent``.

    agent = TextWorldLLMAgent("smollm2")              # or "tiny", a Hugging Face id, a folder
    agent = TextWorldSimulatorAgent(p=0.3, seed=0)    # scripted, known per-step competence

``TextWorldLLMAgent`` never writes free text: it ranks the admissible commands listed in the
state text by their log-likelihood as the model's reply (mean over the command's tokens and the
end-of-turn token, so long commands are not penalised for their length) and plays the best one,
or samples from ``softmax(score / temperature)`` when ``temperature > 0``. Ranking is far more
reliable than generation for a 135M model: every action is a legal command. Cost: per
observation, one forward pass over the prompt, then one batched pass over all candidates that
reuses the prompt's key/value cache. Each observation is scored alone, so a batch gives exactly
the actions of one-by-one calls; sampling draws from a pure function of
``(seed, episode_id, step)``. The scores are a pure function of the prompt, so they are kept (``memo``
prompts, least recently used out): a game's state text holds no history (move number, last command, room,
inventory, commands), so the sweep's methods, budgets and replays meet the same states again and each is scored
once (``benchmarks/speed/tw_agent_memo.py``).

``TextWorldSimulatorAgent`` plays the expert's move (the game's winning policy) with
probability ``q`` and otherwise a uniformly random admissible command (which can be the expert's
move too), so its probability of playing the expert's move is ``q + (1 - q) / n_admissible``
(``success_probability``). ``q`` is ``p`` unless ``verb_p`` gives the expert command's verb its
own value (e.g. ``{"unlock": 0.1}``: an agent that fumbles keys), which makes the value of an
intervention depend on the state. Draws are pure functions of ``(seed, episode_id, step)``: a
cloned episode replays them (common random numbers) and batching changes nothing.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from agile.envs.textworld_env import admissible_commands
from agile.models import cache_arg, returned_cache
from agile.protocol import BASE, Action, Episode, Observation
from agile.seeding import derive_seed, stable_uniform

SYSTEM_PROMPT = (
    "You are playing a text adventure game. Reach the goal in as few moves as possible. "
    "Reply with exactly one of the admissible commands."
)


def prompt_messages(observation: Observation) -> list[dict[str, str]]:
    """The system and user turns that ask for the next command."""
    user = f"{observation.state_text}\n\nWhich command do you play next?"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _admissible(observation: Observation) -> list[str]:
    commands = admissible_commands(observation.state_text)
    if not commands:
        raise ValueError(
            f"observation {observation.episode_id!r} step {observation.step}: its state_text lists "
            f"no admissible commands; TextWorld agents act on agile.envs.textworld_env observations."
        )
    return commands


class TextWorldSimulatorAgent:
    """See the module docstring."""

    needs_episodes = True

    def __init__(self, p: float = 0.5, seed: int = 0, verb_p: Mapping[str, float] | None = None,
                 name: str = "tw-simulator"):
        self.verb_p = {str(k).lower(): float(v) for k, v in (verb_p or {}).items()}
        for key, value in [("p", p), *self.verb_p.items()]:
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"TextWorldSimulatorAgent {key!r} is {value}; it must lie in [0, 1].")
        self.p = float(p)
        self.seed = seed
        self.name = name

    def expert_p(self, expert_command: str) -> float:
        """``q``: the probability of choosing the expert's move deliberately."""
        verb = expert_command.split(" ", 1)[0].lower()
        return self.verb_p.get(verb, self.p)

    def success_probability(self, observation: Observation, episode: Episode | None = None) -> float:
        """The probability that this agent plays the expert's move at ``observation``."""
        if self.verb_p and episode is None:
            raise ValueError("success_probability needs the episode when verb_p is set (the "
                             "expert's verb decides q); pass episode=...")
        q = self.expert_p(episode.expert_action().text) if episode is not None else self.p
        n = max(1, int(observation.features.get("n_admissible", len(_admissible(observation)))))
        return q + (1.0 - q) / n

    def act(self, observations: Sequence[Observation], episodes: Sequence[Episode] | None = None) -> list[Action]:
        if episodes is None or len(episodes) != len(observations):
            raise ValueError(
                "TextWorldSimulatorAgent reads the expert's move from the live episodes: call "
                "act(observations, episodes=...) with one episode per observation (run_episodes does)."
            )
        actions = []
        for observation, episode in zip(observations, episodes):
            expert = episode.expert_action().text
            u = stable_uniform(self.seed, observation.episode_id, observation.step, "tw-simulator")
            if u < self.expert_p(expert):
                text = expert
            else:
                rng = random.Random(derive_seed(self.seed, observation.episode_id, observation.step, "tw-random"))
                text = rng.choice(_admissible(observation))
            actions.append(Action(text, actor=BASE))
        return actions


class TextWorldLLMAgent:
    """A causal LM that ranks the admissible commands; see the module docstring."""

    def __init__(
        self,
        model: str = "smollm2",
        device: str | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        max_prompt_tokens: int = 1024,
        max_batch: int = 64,
        actor: str = BASE,
        name: str | None = None,
        lm=None,
        dtype: str | None = None,
        memo: int = 65536,
    ):
        """``lm``: an already loaded ``(model, tokenizer)`` pair to share (e.g. between tests).
        ``dtype``: the weights' type (default: ``agile.models.default_dtype`` of the device).
        ``memo``: prompts whose scores are kept (0: none; an entry is a few floats a command)."""
        if lm is None:
            import torch

            from agile.models import load_causal_lm  # torch loads only when an LLM is asked for

            lm = load_causal_lm(model, device=device, seed=seed, dtype=getattr(torch, dtype) if dtype else None)
        self.model, self.tokenizer = lm
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}.")
        self.temperature = float(temperature)
        self.seed = seed
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.max_batch = max(1, int(max_batch))
        self.actor = actor
        self.name = name or f"tw-llm:{model}"
        end = self.tokenizer.eos_token_id
        self._end = [end] if end is not None else []
        self.last_scores: list[list[float]] = []
        """Per observation of the last ``act`` call, the score of each admissible command."""
        if memo < 0:
            raise ValueError(f"memo must be >= 0 prompts, got {memo}.")
        self.memo_size = int(memo)
        self._memo: OrderedDict[str, list[float]] = OrderedDict()
        self.scored = 0
        """Prompts scored by the model (a memo hit is not counted)."""

    def prompt(self, observation: Observation) -> str:
        """The text before the reply: the chat turns, or plain text for a base model."""
        messages = prompt_messages(observation)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return f"{SYSTEM_PROMPT}\n\n{messages[1]['content']}\n\nCommand: "

    def scores(self, observation: Observation) -> list[float]:
        """Mean log-probability of each admissible command (in listed order) as the reply."""
        text = self.prompt(observation)
        kept = self._memo.get(text)
        if kept is not None:
            self._memo.move_to_end(text)
            return list(kept)
        result = self._scored(observation, text)
        if self.memo_size:
            self._memo[text] = list(result)
            if len(self._memo) > self.memo_size:
                self._memo.popitem(last=False)
        return result

    def _scored(self, observation: Observation, text: str) -> list[float]:
        import torch

        commands = _admissible(observation)
        self.scored += 1
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        # Over-long prompts lose their beginning: the commands and the question sit at the end.
        prompt = prompt[-self.max_prompt_tokens:]
        device = self.model.device
        with torch.no_grad():
            # Only the last position's logits are needed (the full vocabulary row per prompt token
            # would dominate the cost for a small model).
            out = self.model(input_ids=torch.tensor([prompt], device=device), use_cache=True, logits_to_keep=1)
            first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            result: list[float] = []
            for start in range(0, len(commands), self.max_batch):
                chunk = commands[start:start + self.max_batch]
                result += self._score_chunk(chunk, returned_cache(out), first)
        return result

    def _score_chunk(self, commands: list[str], prefix_cache, first_log_probs) -> list[float]:
        import copy

        import torch

        ids = [self.tokenizer(c, add_special_tokens=False)["input_ids"] + self._end for c in commands]
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id or 0
        # Right padding needs no mask: causal attention keeps pads out of the real tokens.
        batch = torch.tensor([x + [pad] * (width - len(x)) for x in ids], device=self.model.device)
        cache = copy.deepcopy(prefix_cache)
        cache.batch_repeat_interleave(len(commands))
        logits = self.model(input_ids=batch, **cache_arg(self.model, cache), use_cache=True).logits.float()
        log_probs = torch.log_softmax(logits, dim=-1)
        scores = []
        for row, tokens in enumerate(ids):
            total = float(first_log_probs[tokens[0]])
            for j in range(1, len(tokens)):
                total += float(log_probs[row, j - 1, tokens[j]])
            scores.append(total / len(tokens))
        return scores

    def choose(self, observation: Observation, scores: list[float]) -> str:
        commands = _admissible(observation)
        if self.temperature <= 0:
            return commands[max(range(len(scores)), key=scores.__getitem__)]
        top = max(scores)
        weights = [math.exp((s - top) / self.temperature) for s in scores]
        rng = random.Random(derive_seed(self.seed, observation.episode_id, observation.step, "tw-llm"))
        return rng.choices(commands, weights=weights, k=1)[0]

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        self.last_scores = [self.scores(o) for o in observations]
        return [Action(self.choose(o, s), actor=self.actor) for o, s in zip(observations, self.last_scores)]
