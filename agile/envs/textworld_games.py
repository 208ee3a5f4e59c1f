"""Generate TextWorld games locally and cache them by their parameters and seed.

A game is named by a ``GameSpec`` (quest length, rooms, objects, seed, reward density). The
first request compiles it (TextWorld's own generator and bundled Inform 7 compiler, ~1-2 s)
into ``$HELPGATE_CACHE/textworld/tw<version>-f<format>/<key>/`` (or ``~/.cache/helpgate/...``); later
requests only read ``meta.json``. Generation runs under a per-game file lock and writes into a
temporary folder that is renamed into place, so parallel processes (pytest workers, Ray
collectors) never see or produce a half-written game.

Quest length: the sampled action chain can hold detours the game does not need, so a seed
counts as giving a quest of length L only when TextWorld's (shortest known) winning policy has
L moves; other seeds are replaced by derived ones (``meta["attempt"]``). The expert therefore
wins in exactly ``quest_length`` moves.

Dense rewards: TextWorld's generator scores a game only when the quest is complete
(max score 1). With ``dense=True`` every proper prefix of the winning policy becomes an
*optional* quest worth one point, so the in-game score counts milestones (max score = quest
length) and gives a process reward, while winning still depends only on the main quest.
A milestone can be scored and later undone (the key dropped again); its point stays.

Determinism: the same spec gives byte-identical files in any process (checked across Python
hash seeds); the compile step runs TextWorld's bundled Inform 7 tools in a subprocess.

``game_suite`` draws the game specs of a split; train and test seeds never overlap, so test
games are held out. With ``draw`` (the held-out split's episode seed) it draws the split's games
out of the split's whole seed range, a different set per draw: held-out games drawn per seed.

    from agile.envs.textworld_games import GameSpec, ensure_game
    game = ensure_game(GameSpec(quest_length=5, seed=3))
    game.path, game.meta["seconds"]
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agile.models import cache_root, file_lock
from agile.seeding import derive_seed

SPLIT_SEED_OFFSET = {"train": 0, "test": 1_000_000}
"""Game seeds of a split start here; a split holds fewer than 1e6 games, so splits never share one."""
SPLIT_SPAN = 1_000_000
"""Game seeds of a split lie in ``[offset, offset + SPLIT_SPAN)``."""

FORMAT = 1
"""Bumped whenever this module changes the games it writes, so old cache entries are not reused."""

MAX_ATTEMPTS = 20
"""Seeds on which the quest sampler finds no chain of the asked length are retried this often."""


@dataclass(frozen=True)
class GameSpec:
    """Everything that determines a generated game."""

    quest_length: int = 5
    """Number of actions of the shortest known winning policy (TextWorld's ``quest_length``)."""
    nb_rooms: int = 5
    """World size: number of rooms."""
    nb_objects: int = 10
    """Objects in the world, quest objects included (the rest are distractors)."""
    seed: int = 0
    """Generation seed: the same spec always yields the same game."""
    dense: bool = True
    """Score one point per milestone of the winning policy (process reward), else only the win."""

    @property
    def key(self) -> str:
        """Folder name in the cache, unique per spec."""
        rewards = "dense" if self.dense else "sparse"
        return f"q{self.quest_length}-r{self.nb_rooms}-o{self.nb_objects}-s{self.seed}-{rewards}"

    def validate(self) -> None:
        for name in ("quest_length", "nb_rooms", "nb_objects"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GameSpec.{name} must be a positive integer, got {value!r}.")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"GameSpec.seed must be a non-negative integer, got {self.seed!r}.")


@dataclass(frozen=True)
class GameFile:
    """A compiled game in the cache."""

    spec: GameSpec
    path: Path
    """The ``.z8`` story file (its ``.json`` game description lies beside it)."""
    meta: dict
    """``seconds`` (generation time), ``attempt``, ``walkthrough``, ``max_score``, ``objective``."""
    generated: bool
    """True when this call compiled the game, False when it came from the cache."""


def textworld_cache_dir() -> Path:
    """``$HELPGATE_CACHE/textworld/tw<major.minor>-f<FORMAT>``: games depend on TextWorld's
    version and on this module's format."""
    import textworld

    base = cache_root()
    version = ".".join(textworld.__version__.split(".")[:2])
    return base / "textworld" / f"tw{version}-f{FORMAT}"


def _read_meta(folder: Path) -> dict | None:
    meta_file = folder / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        return json.loads(meta_file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{meta_file}: not valid JSON ({error.msg}); delete the folder {folder} and it will "
            f"be regenerated."
        ) from error


def ensure_game(spec: GameSpec, cache_dir: str | Path | None = None) -> GameFile:
    """The compiled game for ``spec``: read from the cache, or generated once under a lock."""
    spec.validate()
    root = Path(cache_dir) if cache_dir is not None else textworld_cache_dir()
    folder = root / spec.key
    meta = _read_meta(folder)
    if meta is not None:
        return GameFile(spec, folder / "game.z8", meta, generated=False)
    with file_lock(root / ".locks" / f"{spec.key}.lock"):
        meta = _read_meta(folder)  # another process may have finished it while we waited
        if meta is not None:
            return GameFile(spec, folder / "game.z8", meta, generated=False)
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{spec.key}-"))
        try:
            meta = _generate(spec, staging)
            (staging / "meta.json").write_text(json.dumps(meta, indent=1))
            if folder.exists():  # a folder without meta.json is a leftover of a killed run
                shutil.rmtree(folder)
            staging.rename(folder)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return GameFile(spec, folder / "game.z8", meta, generated=True)


def _generate(spec: GameSpec, folder: Path) -> dict:
    """Compile the game of ``spec`` into ``folder/game.z8`` (+ ``.json``, ``.ni``)."""
    from textworld import GameOptions
    from textworld.generator import compile_game, make_game
    from textworld.generator.chaining import QuestGenerationError
    from textworld.generator.game import GameProgression

    start = time.perf_counter()
    last_error: Exception | None = None
    for attempt in range(MAX_ATTEMPTS):
        options = GameOptions()
        # A failed seed moves to a derived one, so the result is still a function of the spec.
        options.seeds = spec.seed if attempt == 0 else spec.seed * MAX_ATTEMPTS + attempt + 7_919
        options.nb_rooms = spec.nb_rooms
        options.nb_objects = spec.nb_objects
        options.quest_length = spec.quest_length
        options.quest_breadth = 1
        options.path = str(folder / "game.z8")
        options.force_recompile = True
        try:
            game = make_game(options)
        except (QuestGenerationError, ValueError, IndexError) as error:
            last_error = error
            continue
        # The sampled chain can hold detours the game does not need (walking somewhere before
        # eating food one carries); TextWorld's winning policy drops them. A game counts as
        # having quest length L only when its shortest known winning policy has L actions.
        policy = GameProgression(game).winning_policy or ()
        if len(game.quests) != 1 or len(policy) != spec.quest_length:
            last_error = ValueError(f"winning policy has {len(policy)} actions")
            continue
        break
    else:
        raise RuntimeError(
            f"TextWorld found no quest of length {spec.quest_length} in {MAX_ATTEMPTS} seeds for "
            f"{spec} (last error: {last_error}). Use more rooms/objects or a shorter quest_length."
        )
    objective = game.objective  # fixed now, so the milestones below do not enter the goal text
    if spec.dense:
        _add_milestones(game, policy)
    compile_game(game, options)
    _fix_serial(folder / "game.z8")
    return {
        "spec": asdict(spec),
        "seconds": round(time.perf_counter() - start, 3),
        "attempt": attempt,
        "objective": objective,
        "walkthrough": list(game.walkthrough or []),
        "max_score": int(game.max_score),
    }


SERIAL = slice(0x12, 0x18)
"""The story file header's serial number: six ASCII digits the compiler sets to the compile date (YYMMDD)."""


def _fix_serial(story: Path) -> None:
    """Set the serial to 000000, so a game is a function of its spec alone, whatever the day it was compiled on
    (the Z-machine's checksum covers the bytes after the header, so it still holds)."""
    data = bytearray(story.read_bytes())
    data[SERIAL] = b"000000"
    story.write_bytes(bytes(data))


def _add_milestones(game, policy) -> None:
    """One optional one-point quest per proper prefix of the winning policy (see module doc).

    Milestone ``i`` is reached when the postconditions of the prefix's last action hold *and*
    every fact the prefix added to the initial state holds (the key is in hand, the door open).
    The second part keeps a milestone that ends where the game starts ("go north, take key,
    go south") from counting at the first move, and keeps milestones in policy order.
    """
    from textworld.generator.game import Event, Quest

    state = game.world.state.copy()
    initial = set(state.facts)
    milestones = []
    for i, action in enumerate(policy[:-1], start=1):
        if not state.apply(action):
            raise RuntimeError(f"winning policy action {action} does not apply at step {i}; "
                               f"the generated game is inconsistent: regenerate it with another seed.")
        # Sorted: set order changes with Python's hash seed, and the game file must not.
        conditions = sorted(set(action.postconditions) | (set(state.facts) - initial), key=str)
        milestones.append(Quest(win_events=[Event(actions=policy[:i], conditions=conditions)],
                                reward=1, optional=True))
    game.quests = tuple(milestones) + tuple(game.quests)


def game_suite(
    n_games: int,
    split: str = "train",
    quest_lengths: tuple[int, ...] = (3, 4, 5, 6, 7, 8),
    nb_rooms: int = 5,
    nb_objects: int = 10,
    seed: int = 0,
    dense: bool = True,
    draw: int | None = None,
) -> list[GameSpec]:
    """``n_games`` specs cycling through ``quest_lengths``; seeds are disjoint between splits.

    Without ``draw`` the game seeds are ``offset + seed * 10000 + i``; with it, ``n_games`` distinct
    seeds of the split's range drawn by a pure function of ``(split, seed, draw)``: another draw,
    another set of games, still inside the split's range (so never a game of the other split)."""
    if split not in SPLIT_SEED_OFFSET:
        raise ValueError(f"split must be one of {sorted(SPLIT_SEED_OFFSET)}, got {split!r}.")
    if not quest_lengths:
        raise ValueError("quest_lengths is empty: give at least one quest length, e.g. (3, 5, 8).")
    if not 0 <= seed * 10_000 + n_games <= 999_999:
        raise ValueError(f"seed={seed}, n_games={n_games}: keep seed*10000 + n_games below 1e6 so "
                         f"train and test games never share a seed.")
    base = SPLIT_SEED_OFFSET[split] + seed * 10_000
    seeds = [base + i for i in range(n_games)]
    if draw is not None:
        picks = random.Random(derive_seed("textworld-games", split, seed, draw)).sample(range(SPLIT_SPAN), n_games)
        seeds = [SPLIT_SEED_OFFSET[split] + k for k in picks]
    return [
        GameSpec(quest_lengths[i % len(quest_lengths)], nb_rooms, nb_objects, game_seed, dense)
        for i, game_seed in enumerate(seeds)
    ]
