"""Collect offline trajectories: episodes with random interventions, one row per decision point.

    collect-offline-trajectories --out trajectories --episodes 200 --explore-p 0 0.1 0.3 0.5
    python -m helper.data.collect --agent llm --model smollm2 --episodes 16 --out traj-llm
    collect-offline-trajectories --env textworld --tw-games 8 --episodes 64 --out traj-tw
    collect-offline-trajectories --agent llm --model runs/agile_sft --decoding free --episodes 64 --out traj-agile
    collect-offline-trajectories --out traj --episodes 400 --shard-size 25 --ray   # over a Ray cluster
    collect-offline-trajectories --env examples.arith_chain:make_episodes \
        --agent examples.arith_chain:make_agent --episodes 64 --out traj-chain     # a plug-in env
    helpgate collect --agent openai:smollm2 --base-url http://127.0.0.1:8000/v1 --out traj-served
    collect-offline-trajectories --out traj-prop --decide-after proposal   # log the base agent's proposals
    collect-offline-trajectories --env examples.tiered_rapids:make_episodes --agent examples.tiered_rapids:make_agent \
        --help-kinds compute:1 stronger:2 human:4 --help-caps human=1 --budget 6 --out traj-tiered   # kinds of help

Episodes and agents come from ``helper.data.environment.EnvSetup``, the builder online evaluation
uses too. The base agent is the simulator (a scripted agent, no model) unless ``--agent`` names another, as
in every stage command; ``helpgate pipeline``'s default is the embedded LLM. Collect says which on its
first line (``[collect] base agent ...``) and records it in ``manifest.json`` (``config.base_agent``;
``--agent llm`` is recorded as its ``--model``).

Episode ``i`` is fully determined by ``(seed, i)`` (its group or game, its questions, its exploration
probability ``explore_p[i % len(explore_p)]``, every random draw), and episodes are written in whole shards
of ``shard_size`` consecutive indices. ``manifest.json`` lists the shards that are complete. Kill the run
at any moment and rerun it with the same arguments: the listed shards are skipped, the others are
(re)written, and the folder ends up identical to an uninterrupted run. Each listed shard is recorded with
its SHA-256; a listed shard whose bytes differ (another run's shard copied over it, an edited one) is
refused on the rerun, naming it (``trajectories.content``).
With ``--ray`` the shards are spread over Ray workers (``helper.data.ray_collect``); the folder is the
same as without it, since every episode is fixed by ``(seed, index)``.
A rerun with other arguments is refused with the name of the field that differs.

``--decide-after proposal`` lets the base agent propose before each intervention is decided
(``agile.rollout``) and logs ``proposal_text``, ``proposal_reward`` and ``proposal_signals`` at every
decision point, also where an intervention replaced the proposal; the manifest records the mode
(``decide_after``; a folder from before the option reads as ``state``).

``--help-kinds NAME:PRICE ...`` collects with several kinds of help in place of the one strong actor
(``helper.data.help_kinds``: the flags, who answers each kind): ``--budget`` is then a cost per episode, each
exploratory call draws its kind among those the budget and caps (``--help-caps``) still allow, weighted by
``--help-weights``, and every row names the kind called and its cost (``help_kind``, ``help_cost``). The kinds are
part of the folder's identity (a rerun with others is refused) and its manifest records them with their prices
and caps (``config.helps``, read by ``trajectories.manifest.helps_of``). Without the flag the shards are the
one-kind shards they always were.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import polars as pl

from helper.data import help_kinds
from helper.data.env_kinds import ENV_KINDS, PLUGIN
from helper.data.environment import ENV_FIELD, OPENAI_PREFIX, EnvSetup, EnvSpec
from helper.stored_config import flat
from trajectories.content import check_content
from trajectories.manifest import Manifest
from trajectories.outputs import out_folder
from trajectories.rows import frame_of
from trajectories.schema import HELP_COLUMNS, PROPOSAL_DEFAULTS
from trajectories.shards import read_trajectories, write_shard


@dataclass
class CollectConfig:
    """Collect offline trajectories (random interventions) for training a helper."""

    spec: ENV_FIELD = field(default_factory=EnvSpec)
    """The environment and its actors (``EnvSpec``; its fields are flags of their own: --env, --agent, ...)."""
    split: Literal["train", "test"] = "train"
    """Which split of the data to draw episodes from."""
    groups: list[str] | None = None
    """Product groups to use (folder names); default: every group of the split."""
    model: str = "smollm2"
    """Model of the LLM base agent with --agent llm: smollm2 (embedded), tiny, a Hugging Face id, a local folder or
    an SFT / PPO output folder of helpgate agile (then --decoding free, as it was trained)."""
    explore_p: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3, 0.5])
    """Intervention probabilities (a mixture): episode i uses the (i mod k)-th of the k values."""
    episodes: int = 200
    """Number of episodes to collect."""
    budget: int = 2
    """Interventions allowed per episode; with --help-kinds, the cost allowed per episode, in the unit of their
    prices."""
    help_kinds: list[str] = field(default_factory=list)
    """Several kinds of help, each NAME:PRICE (e.g. compute:1 stronger:2 human:4): the env's episodes' own kinds
    (their help_kinds), human (the episode's expert), on productqa compute (the base agent's majority turn of 8
    samples; compute@K: of K) or any actor --strong takes, NAME=ACTOR:PRICE naming it apart (stronger=runs/sft/model:2);
    an exploration draw calls a kind drawn among those the budget and caps still allow. Default: one kind, --strong,
    at price 1."""
    help_caps: list[str] = field(default_factory=list)
    """Most calls of a kind per episode, each KIND=CALLS (e.g. human=1); default: only the budget limits it."""
    help_weights: list[str] = field(default_factory=list)
    """A kind's share of the exploration draws, each KIND=WEIGHT (default: 1 each, uniform)."""
    seed: int = 0
    """Master seed: every episode and every random draw (the actors' too) derives from (seed, episode index)."""
    out: str = "trajectories"
    """Output folder for the Parquet shards and manifest.json."""
    shard_size: int = 50
    """Episodes per shard (the unit that a killed run redoes)."""
    counterfactual: bool = False
    """Also record cf_base_success / cf_intervene_success at every decision (costly for an LLM)."""
    decide_after: Literal["state", "proposal"] = "state"
    """proposal: the base agent proposes first (on a copy of the episode) at every decision with budget left,
    and its proposal, the proposal's reward and signals are logged also where an intervention replaced it
    (proposal_text, proposal_reward, proposal_signals); state: the intervention is decided before it acts."""
    batch_size: int = 16
    """Episodes run in lockstep (batched agent calls)."""
    ray: bool = False
    """Spread shards over Ray workers (one per GPU for an LLM agent, else one per CPU); same data as without."""
    ray_address: str | None = None
    """Ray cluster to join (default: the running one, or a new local one)."""
    ray_workers: int | None = None
    """Number of Ray workers (default: one per GPU for an LLM agent, else one per CPU of the cluster)."""


MAX_SHARDS = 100_000
"""Shards one collection folder may hold (its manifest lists each one)."""
IGNORED_ON_RESUME = ("out", "device", "ray", "ray_address", "ray_workers", "base_url", "base_agent",
                     "plugin_timeout_s", "helps")
"""Fields that may change between a run and its resumption (they do not change the data), and ``base_agent`` and
``helps``, recorded for the reader: they follow from ``agent`` and ``model`` (resp. the ``help_*`` flags), which
are compared (a folder from before they were recorded resumes)."""
ADDED_SINCE = {"decide_after": "state", "agent_dtype": "auto", "consistency_samples": 0, "decoding": "free",
               "memory": "embedding", "restate_question": False, "list_advice_with_gate": False,
               "yes_no_threshold": 0.0, "plugin_max_steps": None, "help_kinds": [], "help_caps": [],
               "help_weights": []}
"""Fields added since older folders were collected, with the value those folders had."""


def check(config: CollectConfig) -> None:
    """Refuse values that cannot work, naming the field."""
    positive = {"episodes": config.episodes, "questions_per_episode": config.spec.questions_per_episode,
                "shard_size": config.shard_size, "batch_size": config.batch_size,
                "max_new_tokens": config.spec.max_new_tokens}
    for name, value in positive.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}.")
    if config.budget < 0:
        raise ValueError(f"budget must be >= 0, got {config.budget}.")
    shards = -(-config.episodes // config.shard_size)
    if shards > MAX_SHARDS:
        # The manifest is rewritten after every shard: past this many the bookkeeping alone is days.
        raise ValueError(f"episodes={config.episodes} in shards of shard_size={config.shard_size} make {shards:,} "
                         f"shards, more than {MAX_SHARDS:,} per folder; raise --shard-size or lower --episodes.")
    if not config.explore_p or any(not 0.0 <= p <= 1.0 for p in config.explore_p):
        raise ValueError(f"explore_p must be one or more values in [0, 1], got {config.explore_p}.")
    if help_kinds.parse(config.help_kinds, config.help_caps, config.help_weights, config.budget):
        if config.counterfactual:
            raise ValueError("--counterfactual replays one intervention per decision; with --help-kinds there are "
                             "several, so collect them without --counterfactual.")
        if config.spec.strong != "human":
            raise ValueError(f"--strong {config.spec.strong} names the one strong actor; with --help-kinds name every "
                             f"help there instead (e.g. --help-kinds {config.spec.strong}:2 human:4).")


def env_setup(config: CollectConfig) -> EnvSetup:
    """The episodes and actors of ``config`` (checked: bad values raise naming the field)."""
    spec = config.spec
    if spec.agent == "llm":  # the LLM agent of --model
        spec = replace(spec, agent=config.model)
    return EnvSetup(spec, config.split, config.groups, agent_seed=config.seed, strong_seed=config.seed)


def agent_line(setup: EnvSetup, kinds=()) -> str:
    """What collect prints first: the base agent it runs (the simulator unless told; ``helpgate pipeline``'s
    default is the embedded LLM) and the strong actor, so that no default passes unsaid."""
    from helper.data.plugins import AGENT_GROUP, is_plugin

    agent = setup.spec.agent
    if agent == "simulator":
        what = ("simulator: a scripted agent of known accuracy, no model (--agent smollm2 runs the embedded LLM, "
                "--agent module:factory your own agent)")
    elif agent.startswith(OPENAI_PREFIX):
        what = f"{agent}: a served model"
    elif is_plugin(agent, AGENT_GROUP):
        what = f"{agent}: a plug-in agent"
    else:
        what = f"{agent}: a local LLM"
    if kinds:  # several kinds of help stand where the one strong actor stood
        helps = ", ".join(f"{k.name} at {k.price:g}" + (f" (cap {k.cap})" if k.cap is not None else "") for k in kinds)
        return f"[collect] base agent {what}; kinds of help {helps}"
    return f"[collect] base agent {what}; strong actor {setup.spec.strong}"


NOT_IDENTITY = {"plugin_timeout_s"}
"""Fields that change no row: a resume under another value goes on."""


def identity(config: CollectConfig, setup: EnvSetup) -> dict:
    """What the manifest compares on resume: the config, less the fields only another environment reads."""
    others = {name for kind in (*ENV_KINDS.values(), PLUGIN) for name in kind.fields}
    others -= set(config.spec.kind.fields)  # a field two environments share stays when either runs
    others |= NOT_IDENTITY
    values = {k: v for k, v in flat(config).items() if k not in others}
    if setup.root is not None:
        values["data"] = str(setup.root)  # the resolved root: the same data under any spelling
    return values


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


def records_frame(records, counterfactual: bool, kinds: bool = False) -> pl.DataFrame:
    optional = ("horizon", "features", *PROPOSAL_DEFAULTS)
    if counterfactual:
        optional += ("cf_base_success", "cf_intervene_success")
    if kinds:  # a one-kind collection writes the shards it always wrote
        optional += HELP_COLUMNS
    return frame_of((record for episode in records for record in episode), optional)


def actors(setup: EnvSetup, config: CollectConfig) -> tuple:
    """``(base agent, strong)``: ``strong`` the strong actor (None: the human), or with --help-kinds the kinds of help
    (``agile.helps.Help``s)."""
    kinds = help_kinds.parse(config.help_kinds, config.help_caps, config.help_weights, config.budget)
    if not kinds:
        return setup.base_agent(), setup.strong_actor()
    return setup.base_agent(), help_kinds.resolve(setup, kinds, help_kinds.own_kinds(setup, config.seed))


def collect_shard(setup: EnvSetup, config: CollectConfig, k: int, base, strong, progress=None) -> pl.DataFrame:
    """The rows of shard ``k`` (episodes ``k * shard_size`` onwards), played in batches; ``strong`` as ``actors``
    gives it."""
    from agile.rollout import run_episodes

    first = k * config.shard_size
    indices = list(range(first, min(first + config.shard_size, config.episodes)))
    records = []
    for start in range(0, len(indices), config.batch_size):
        chunk = indices[start:start + config.batch_size]
        episodes = setup.episodes(chunk, config.seed)
        ps = [config.explore_p[i % len(config.explore_p)] for i in chunk]
        several = isinstance(strong, tuple)
        records += run_episodes(
            episodes, base, strong=None if several else strong, budget=config.budget, explore_p=ps,
            rng_seed=config.seed, counterfactual=config.counterfactual, decide_after=config.decide_after,
            helps=strong if several else None,
        )
        if progress is not None:
            progress(len(chunk))
    return records_frame(records, config.counterfactual, kinds=bool(config.help_kinds))


def shard_episodes(config: CollectConfig, k: int) -> tuple[int, int]:
    """``(first episode index, episodes)`` of shard ``k``."""
    first = k * config.shard_size
    return first, min(config.shard_size, config.episodes - first)


def run(config: CollectConfig) -> dict:
    """Collect (or finish collecting) ``config.out``; return the summary of the whole folder."""
    from tqdm import tqdm

    check(config)
    out = out_folder(config.out, "runs/demo/trajectories")  # '' would collect into the current folder
    if config.ray:
        from helper.data.ray_collect import require_ray

        require_ray()
    setup = env_setup(config)
    kinds = help_kinds.parse(config.help_kinds, config.help_caps, config.help_weights, config.budget)
    print(agent_line(setup, kinds), flush=True)
    setup.source()  # a bad data root or group is refused before any file is written
    if kinds:
        help_kinds.check_names(setup, kinds, help_kinds.own_kinds(setup, config.seed))
    ident = identity(config, setup)
    # A default fills a field only where this run has it (another env's field is left out of both).
    manifest = Manifest.open(out, ident, ignore=IGNORED_ON_RESUME,
                             defaults={k: v for k, v in ADDED_SINCE.items() if k in ident})
    manifest.config["base_agent"] = setup.spec.agent  # the resolved name: --agent llm is its --model
    if kinds:  # what readers of the folder take the kinds from (trajectories.helps)
        manifest.config["helps"] = [kind.as_entry() for kind in kinds]
    for stale in out.glob(".*.tmp"):  # a shard or manifest write cut short by a kill
        stale.unlink(missing_ok=True)
    # A finished shard is skipped on a rerun: it must still be ours (another run's shard copied over it is refused).
    check_content(out, [out / name for name in manifest.shards if (out / name).is_file()])
    n_shards = -(-config.episodes // config.shard_size)
    todo = [k for k in range(n_shards) if not manifest.is_done(shard_name(k))]
    done_episodes = config.episodes - sum(shard_episodes(config, k)[1] for k in todo)

    owners = {episode: name for name, info in manifest.shards.items() if isinstance(info, dict)
              for episode in info.get("episodes", ())}  # which listed shard holds each episode id

    def save(k: int, frame: pl.DataFrame) -> None:
        # Only this process writes shards and the manifest, so a worker's shard is on disk
        # before the manifest lists it, whichever worker made it.
        ids = check_new_ids(frame, shard_name(k), owners, setup.spec.env)
        write_shard(frame, out / shard_name(k))
        first, count = shard_episodes(config, k)
        manifest.mark_done(shard_name(k), first=first, count=count, rows=frame.height,
                           human_calls=human_calls(frame), episodes=ids)

    with tqdm(total=config.episodes, initial=done_episodes, unit="ep", desc="collect", file=sys.stderr) as bar:
        if todo and config.ray:
            from helper.data.ray_collect import collect_with_ray

            for k, frame in collect_with_ray(config, todo, env_setup, collect_shard, actors):
                save(k, frame)
                bar.update(shard_episodes(config, k)[1])
        elif todo:
            base, strong = actors(setup, config)  # models load only when work is left
            for k in todo:
                save(k, collect_shard(setup, config, k, base, strong, progress=bar.update))
                if config.spec.consistency_samples:  # after every shard: a long run shows its cost early
                    print_sampling_cost(base)
    manifest.complete = True
    manifest.save()
    return summarize(out)


def check_new_ids(frame: pl.DataFrame, name: str, owners: dict[str, str], env: str) -> list[str]:
    """The shard's episode ids, recorded in ``owners`` (id -> shard); one that another listed shard holds (a plug-in
    whose ids depend on more than ``(split, seed, i)``) is refused before the shard is written and marked complete:
    readers would refuse the folder later."""
    ids = frame["episode_id"].unique(maintain_order=True).to_list()
    clash = next((i for i in ids if owners.get(i, name) != name), None)
    if clash is not None:
        raise ValueError(f"env={env}: {name} would hold episode {clash!r}, which {owners[clash]} already holds; an "
                         "episode's id must depend only on (split, seed, index).")
    owners.update(dict.fromkeys(ids, name))
    return ids


def print_sampling_cost(agent) -> None:
    """The base agent's seconds per decision with its consistency samples and without them, measured
    in this run (the samples are timed apart from the greedy answer they follow)."""
    if not getattr(agent, "decisions", 0):
        return
    per = agent.act_seconds / agent.decisions
    sampling = agent.sample_seconds / agent.decisions
    print(f"[collect] base agent, {agent.decisions} decisions: {per:.3f} s per decision with "
          f"{agent.consistency_samples} consistency samples, {per - sampling:.3f} s without them "
          f"(sampling {sampling:.3f} s, x{per / max(per - sampling, 1e-9):.2f})", flush=True)


def human_calls(frame: pl.DataFrame) -> int:
    """Interventions the human answered: what collecting these rows cost in human calls."""
    return int((frame["intervened"] & (frame["actor"] == "human")).sum())


def summarize(out: str | Path) -> dict:
    """Episodes, decision points, interventions and mean success of a trajectory folder."""
    frame = read_trajectories(out)
    episodes = frame.group_by("episode_id").agg(
        pl.col("success").first(), pl.col("explore_p").first(), pl.col("intervened").sum()
    )
    by_p = episodes.group_by("explore_p").agg(
        pl.len().alias("episodes"), pl.col("success").mean(), pl.col("intervened").mean()
    ).sort("explore_p")
    kinds = {}
    if "help_kind" in frame.columns:  # what each kind of help was called, and the cost per episode
        called = frame.filter(pl.col("help_kind") != "")
        kinds = {"calls_by_kind": dict(sorted(called.group_by("help_kind").len().iter_rows())),
                 "cost_per_episode": float(frame["help_cost"].sum() / max(episodes.height, 1))}
    return kinds | {
        "episodes": episodes.height,
        "decision_points": frame.height,
        "interventions": int(frame["intervened"].sum()),
        "human_calls": human_calls(frame),
        "intervention_rate": float(frame["intervened"].mean()),
        "mean_success": float(episodes["success"].mean()),
        "by_explore_p": by_p.to_dicts(),
    }


def print_summary(summary: dict, seconds: float | None = None) -> None:
    print(f"episodes: {summary['episodes']}  decision points: {summary['decision_points']}  "
          f"interventions: {summary['interventions']} (human calls {summary['human_calls']}) "
          f"(rate {summary['intervention_rate']:.3f} per decision)  "
          f"mean success: {summary['mean_success']:.3f}")
    if "calls_by_kind" in summary:
        calls = ", ".join(f"{kind} {n}" for kind, n in summary["calls_by_kind"].items()) or "none"
        print(f"help calls by kind: {calls}; cost per episode {summary['cost_per_episode']:.3f}")
    for row in summary["by_explore_p"]:
        print(f"  explore_p={row['explore_p']:.2f}: {row['episodes']} episodes, "
              f"success {row['success']:.3f}, interventions/episode {row['intervened']:.2f}")
    if seconds is not None and seconds > 0:
        print(f"{summary['episodes'] / seconds:.1f} episodes/s over {seconds:.1f} s (this run)")


def main(argv: list[str] | None = None) -> int:
    from helper.config_cli import quiet_pipe

    return quiet_pipe(lambda: _main(argv))


def _main(argv: list[str] | None = None) -> int:
    from helper.config_cli import parse_config, run_reporting_errors, split_debug
    from helper.experiment_options import experiment_flag

    prog = "collect-offline-trajectories"
    argv, debug = split_debug(list(sys.argv[1:] if argv is None else argv))
    refused = experiment_flag(argv, CollectConfig, "collect")
    if refused:  # as helpgate collect refuses it
        print(f"{prog}: error: {refused}", file=sys.stderr)
        return 2
    config = parse_config(CollectConfig, argv, prog=prog)
    wall, started = time.time(), time.perf_counter()
    code, summary = run_reporting_errors(prog, run, config, debug)
    if code == 0:
        print_summary(summary, time.perf_counter() - started)
        if Path(config.out).is_dir():
            from helper.provenance import write_stage

            write_stage(config.out, "collect", wall, time.perf_counter() - started, [prog, *argv])
    return code


if __name__ == "__main__":
    sys.exit(main())
