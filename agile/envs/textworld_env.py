"""Generated TextWorld games as episodic environments: one episode is one play of one game.

    from agile.envs.textworld_env import TextWorldSource, make_episodes
    episodes = make_episodes(n=12, split="test", seed=0, n_games=12, quest_lengths=(3, 5, 8))
    source = TextWorldSource("train", n_games=48)      # games generated on first use, cached
    episodes = source.episodes(range(100, 116), seed=0)

Decision points are game moves. At each one the observation's ``state_text`` holds the goal,
the step count, the last command and its feedback, the room description, the inventory and the
admissible commands (one per line after ``Admissible commands:``, which agents parse with
``admissible_commands``). ``features``: ``progress`` (score / max score), ``n_admissible``,
``steps_since_progress``, ``steps_left``; ``quest_length`` (a generator setting a deployed agent does not
know) only with ``quest_length_feature=True``, an ablation.

Actions. The action text (first line) is a game command. It is normalised (case, spaces, end
punctuation) and run when it is admissible; otherwise it is mapped to the most similar
admissible command when the similarity (``difflib`` ratio) is at least ``MIN_SIMILARITY``;
otherwise it is a wasted move: the game does not see it, the step still counts. Raw text never
reaches the interpreter, so no agent can type ``quit`` or ``restore``. ``StepResult.info`` says
which happened (``resolved``: ``exact``, ``mapped`` or ``wasted``) and which command ran.

Expert. The intervention is one move of the game's own winning policy from the current state
(TextWorld's ``policy_commands``, which re-plans after detours), given with the actor ``human``
as ProductQA's gold answer is. Following it from the start wins in exactly ``quest_length``
moves; after detours TextWorld re-plans (undoing what needs undoing): in 72 held-out episodes
that mixed uniformly random moves and expert moves 50/50 with no move limit, all were won.

Reward and outcome. ``progress`` is 1 once the game is won, else score / max score (milestones
of the winning policy, see ``agile.envs.textworld_games``). The reward of a step is the change in
progress, so the rewards of an episode sum to 1 exactly when it is won. ``success()`` is 1.0 if
the game is won, else 0.0: the helper's comparisons are success rates.

End. An episode ends when the game is won, lost, or can no longer be won (a quest object was
destroyed: TextWorld's policy is then empty), or after ``horizon`` moves (default
``3 * quest_length + HORIZON_MARGIN``); wasted moves count.

Clone. Interpreter states cannot be deep-copied cheaply, so ``clone()`` records the command
history and replays it on a fresh interpreter of the same game the first time the clone is used
(lazy: a clone that is never played costs nothing). Cost on a 2-core CPU: one interpreter
start (~25 ms idle, ~60 ms under load) plus one move per history entry (~6 ms idle, ~20 ms under
load), i.e. ~0.5 s for a 20-move history under load. A live interpreter holds ~2 MB; it is
released when the episode ends.
"""

from __future__ import annotations

import difflib
import re
import warnings
from pathlib import Path

from agile.envs.textworld_games import GameFile, GameSpec, ensure_game, game_suite
from agile.protocol import HUMAN, Action, Observation, StepResult
from agile.seeding import derive_seed

ENV_NAME = "textworld"
ADMISSIBLE_HEADER = "Admissible commands:"
HORIZON_MARGIN = 5
"""Moves allowed beyond three times the quest length."""
MIN_SIMILARITY = 0.8
"""Below this ``difflib`` ratio to every admissible command, an action is a wasted move."""
WASTED_FEEDBACK = "That command is not available here; nothing happens."


def default_horizon(quest_length: int) -> int:
    return 3 * quest_length + HORIZON_MARGIN


def admissible_commands(state_text: str) -> list[str]:
    """The admissible commands listed in a TextWorld ``state_text`` (empty if none)."""
    _, found, tail = state_text.rpartition(ADMISSIBLE_HEADER)
    if not found:
        return []
    return [line[2:].strip() for line in tail.split("\n") if line.startswith("- ")]


def normalise_command(text: str) -> str:
    first = (text or "").strip().split("\n", 1)[0]
    return re.sub(r"\s+", " ", first).strip(" .!?>\"'").lower()


def resolve_command(text: str, admissible: list[str]) -> tuple[str | None, str]:
    """``(command to run or None, how)`` with how in ``exact``, ``mapped``, ``wasted``."""
    wanted = normalise_command(text)
    by_norm = {normalise_command(c): c for c in admissible}
    if wanted in by_norm:
        return by_norm[wanted], "exact"
    close = difflib.get_close_matches(wanted, list(by_norm), n=1, cutoff=MIN_SIMILARITY)
    if close:
        return by_norm[close[0]], "mapped"
    return None, "wasted"


def _clean(text: str | None) -> str:
    """Game text without the interpreter's prompt, end-of-game menu and blank-line runs."""
    text = (text or "").split("Would you like to RESTART", 1)[0]
    lines = [line.rstrip() for line in text.split("\n")]
    lines = [line for line in lines if line.strip() not in (">", "")]
    return "\n".join(line.strip() for line in lines).strip()


def _request_infos():
    from textworld import EnvInfos

    return EnvInfos(
        admissible_commands=True, policy_commands=True, won=True, lost=True, score=True,
        max_score=True, objective=True, description=True, inventory=True,
    )


class TextWorldEpisode:
    """One play of one generated game; see the module docstring."""

    env = ENV_NAME

    def __init__(self, game: GameFile, seed: int = 0, episode_id: str = "", horizon: int | None = None,
                 quest_length_feature: bool = False):
        self.game = game
        self.quest_length_feature = quest_length_feature
        self.seed = seed
        self.episode_id = episode_id or f"tw-{game.spec.key}-{seed}"
        self.horizon = int(horizon) if horizon is not None else default_horizon(game.spec.quest_length)
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}.")
        self.history: list[str | None] = []
        """Commands run, one per move (None: a wasted move); what ``clone`` replays."""
        self.rewards: list[float] = []
        self._env = None
        self._state = None
        self._last_command: str | None = None
        self._last_feedback: str | None = None
        self._last_gain_step = 0

    def __repr__(self) -> str:
        return f"TextWorldEpisode({self.episode_id!r}, step={self.steps}/{self.horizon})"

    # -- the Episode protocol -------------------------------------------------------------

    @property
    def steps(self) -> int:
        return len(self.history)

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    @property
    def done(self) -> bool:
        state = self.state
        unwinnable = not state["won"] and not state["policy_commands"]
        return bool(state["won"] or state["lost"] or unwinnable or self.steps >= self.horizon)

    @property
    def progress(self) -> float:
        state = self.state
        if state["won"]:
            return 1.0
        return float(state["score"] or 0) / max(1, int(state["max_score"] or 1))

    def observe(self) -> Observation:
        state = self.state
        commands = list(state["admissible_commands"] or [])
        features = {
            "progress": self.progress,
            "n_admissible": float(len(commands)),
            "steps_since_progress": float(self.steps - self._last_gain_step),
            "steps_left": float(self.horizon - self.steps),
        }
        if self.quest_length_feature:  # an ablation: the generator's setting, not something the agent sees
            features["quest_length"] = float(self.game.spec.quest_length)
        return Observation(
            episode_id=self.episode_id,
            env=ENV_NAME,
            task_id=self.game.spec.key,
            step=self.steps,
            state_text=self._render(state, commands),
            horizon=self.horizon,
            features=features,
        )

    def step(self, action: Action) -> StepResult:
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} is over (step {self.steps}); it takes no more actions.")
        before = self.progress
        command, how = resolve_command(action.text, list(self.state["admissible_commands"] or []))
        self._play(command, normalise_command(action.text))
        reward = self.progress - before
        self.rewards.append(reward)
        done = self.done
        if done:
            self.close()
        info = {"command": command, "resolved": how, "score": self.state["score"], "won": self.won}
        return StepResult(reward, done, info)

    def expert_action(self) -> Action:
        """The next move of the game's winning policy from here (actor ``human``)."""
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} is over: there is no expert move.")
        return Action(self.state["policy_commands"][0], actor=HUMAN)

    def success(self) -> float:
        return 1.0 if self.won else 0.0

    def clone(self) -> TextWorldEpisode:
        """An independent copy at the same point; its interpreter is rebuilt on first use."""
        other = TextWorldEpisode(self.game, self.seed, self.episode_id, self.horizon, self.quest_length_feature)
        other.history = list(self.history)
        other.rewards = list(self.rewards)
        other._last_command = self._last_command
        other._last_feedback = self._last_feedback
        other._last_gain_step = self._last_gain_step
        if self._env is None and self._state is not None:  # finished: the state is all there is
            other._state = self._state
        return other

    def close(self) -> None:
        """Release the interpreter (the final state stays readable)."""
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- internals ------------------------------------------------------------------------

    @property
    def state(self):
        """TextWorld's ``GameState`` now (the interpreter starts, or replays, on first use)."""
        if self._state is None:
            self._start()
        return self._state

    def _start(self) -> None:
        import textworld

        with warnings.catch_warnings():
            # The interpreter warns that it cannot track score in generated games; TextWorld
            # tracks score, moves and the policy itself, so the warning is noise.
            warnings.filterwarnings("ignore", message=".*is not fully supported.*")
            self._env = textworld.start(str(self.game.path), request_infos=_request_infos())
        self._state = self._env.reset()
        for command in self.history:
            if command is not None:
                self._state, _, _ = self._env.step(command)

    def _play(self, command: str | None, typed: str) -> None:
        before = self.state["score"]
        if command is not None:
            self._state, _, _ = self._env.step(command)
        self.history.append(command)
        self._last_command = command if command is not None else typed
        self._last_feedback = None if command is not None else WASTED_FEEDBACK
        if self._state["won"] or (self._state["score"] or 0) > (before or 0):
            self._last_gain_step = self.steps

    def _render(self, state, commands: list[str]) -> str:
        objective = _clean(self.game.meta.get("objective") or state["objective"])
        score = f"{int(state['score'] or 0)}/{int(state['max_score'] or 1)}"
        lines = [f"Goal: {objective}", f"Move {self.steps + 1} of {self.horizon}. Score {score}."]
        if self.steps:
            feedback = self._last_feedback or _clean(state["feedback"])
            lines += [f"Last command: {self._last_command}", f"Feedback: {feedback}"]
        lines.append(f"Room: {_clean(state['description'])}")
        lines.append(f"Inventory: {_clean(state['inventory'])}")
        lines.append(ADMISSIBLE_HEADER)
        lines += [f"- {command}" for command in commands]
        return "\n".join(lines)


class TextWorldSource:
    """The games of one split, generated on first use, and the episodes drawn from them.

    The train games are fixed by ``(split, n_games, quest_lengths, nb_rooms, nb_objects, dense,
    games_seed)``. The held-out (``test``) games are drawn per episode seed (``specs_for``): each
    seed plays its own ``n_games`` games, so seeds of a sweep resample games too; train and test
    never share a game. Episode ``i`` plays game ``i % n_games`` of its seed's set with the seed
    ``derive_seed(seed, i)`` and an id naming both, so any subset of indices can be built alone and
    the agents' draws (keyed by episode id) differ between collection seeds.
    """

    def __init__(
        self,
        split: str = "train",
        n_games: int = 48,
        quest_lengths: tuple[int, ...] = (3, 4, 5, 6, 7, 8),
        nb_rooms: int = 5,
        nb_objects: int = 10,
        dense: bool = True,
        horizon: int | None = None,
        games_seed: int = 0,
        cache_dir: str | Path | None = None,
        quest_length_feature: bool = False,
    ):
        if n_games < 1:
            raise ValueError(f"n_games must be >= 1, got {n_games}.")
        self.split = split
        self._suite = (n_games, split, tuple(quest_lengths), nb_rooms, nb_objects, games_seed, dense)
        self.specs = game_suite(*self._suite)
        """The split's fixed games (train's; for test, the games drawn without a seed)."""
        self.horizon = horizon
        self.quest_length_feature = quest_length_feature
        self.cache_dir = cache_dir
        self._games: dict[str, GameFile] = {}
        self._drawn: dict[int, list[GameSpec]] = {}

    @property
    def max_horizon(self) -> int:
        """The longest episode any game of the split allows (the "always intervene" budget)."""
        if self.horizon is not None:
            return self.horizon
        return max(default_horizon(spec.quest_length) for spec in self.specs)

    def specs_for(self, seed: int | None) -> list[GameSpec]:
        """The games the episodes of ``seed`` play: train's fixed set; test's drawn for this seed."""
        if self.split != "test" or seed is None:
            return self.specs
        if seed not in self._drawn:
            self._drawn[seed] = game_suite(*self._suite, draw=seed)
        return self._drawn[seed]

    def game(self, g: int, seed: int | None = None) -> GameFile:
        spec = self.specs_for(seed)[g]
        if spec.key not in self._games:
            self._games[spec.key] = ensure_game(spec, self.cache_dir)
        return self._games[spec.key]

    def episode(self, index: int, seed: int) -> TextWorldEpisode:
        specs = self.specs_for(seed)
        g = index % len(specs)
        episode_id = f"{ENV_NAME}-{self.split}-s{seed}-{index:06d}-{specs[g].key}"
        return TextWorldEpisode(self.game(g, seed), derive_seed(seed, index), episode_id, self.horizon,
                                self.quest_length_feature)

    def episodes(self, indices, seed: int) -> list[TextWorldEpisode]:
        return [self.episode(i, seed) for i in indices]


def make_episodes(
    n: int = 16,
    split: str = "train",
    seed: int = 0,
    start: int = 0,
    **source_options,
) -> list[TextWorldEpisode]:
    """Episodes ``start .. start+n-1`` of a ``TextWorldSource(split, **source_options)``."""
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got n={n}, start={start}.")
    return TextWorldSource(split, **source_options).episodes(range(start, start + n), seed)


def episode_for(spec: GameSpec, seed: int = 0, horizon: int | None = None,
                cache_dir: str | Path | None = None) -> TextWorldEpisode:
    """One episode of the game ``spec`` (generated if needed)."""
    return TextWorldEpisode(ensure_game(spec, cache_dir), seed, horizon=horizon)
