"""The one episode loop: many episodes in lockstep, a budget of interventions, optional gate.

    records = run_episodes(episodes, base_agent, strong=None, gate=None, budget=2,
                           explore_p=0.3, rng_seed=0)
    records = run_episodes(episodes, base_agent, helps=[Help("compute", price=1), Help("human", price=4)],
                           budget=6, explore_p=0.3)              # several kinds of help, each at its price

At every decision point of every live episode, in this order:

1. ``budget_left`` is what is still allowed in that episode (``budget`` at the start), counted by
   one ``agile.budget.EpisodeBudget`` keyed by the episode's position (two episodes that share an
   id still count apart).
2. If ``budget_left > 0`` the gate, when there is one, is asked
   ``gate.should_intervene(observation, budget_left)``; independently, when ``explore_p`` is set,
   a Bernoulli(p) draw decides (offline collection). The draw is a pure function of
   ``(rng_seed, episode_id, step)``, so it does not depend on batching or on other episodes.
3. Intervene = budget left and (gate said yes or the draw said yes). The strong actor then acts
   (``strong=None``: the episode's ``expert_action()``, i.e. the human) and ``budget_left``
   drops by one; otherwise the base agent acts. The budget can never be exceeded.
4. The chosen actor may call tools first (``StepResult.info["tool"]``, e.g. ``[SearchProduct]``):
   the loop asks the same actor again on the new observation of the same decision point; the
   recorded ``action_text`` is the whole exchange: each call, then the env's
   ``info["tool_output"]`` line, and the final action last.

Agents are called once per round with the observations of every episode they act for (batched).
Every observation an agent is handed carries a per-decision seed (``Observation.seed``,
``decision_seed(rng_seed, episode_id, step, tool_round)``), the same under every gate and budget, so
a stochastic agent that draws from ``observation.rng()`` is paired across methods (common random
numbers); the gate's observations carry none (a gate's draws are its own).
An agent that needs the live episodes (scripted and oracle agents read the gold answer) sets
``needs_episodes = True`` and is called as ``agent.act(observations, episodes=episodes)``.

Decide after the proposal (``decide_after="proposal"``, automatic when the gate has
``decide_after = "proposal"``): at a decision point with budget left, the base agent first plays
the decision on a clone of the episode (tool rounds included; all such clones in one batched
``decide``), then the gate reads that proposal (``should_intervene(observation, budget_left,
proposal=Action(transcript, signals=...))``) and the exploration draw is made. Kept: the real
episode replays the proposal's actions, so the base agent is asked once per decision. Replaying
gives the clone's outcome in every built-in environment (ProductQA, TextWorld, plug-in examples:
deterministic given the actions); an environment whose replay differs (a random tool) gets the
replay's own outcome logged and a warning. Every row then also logs ``proposal_text``,
``proposal_reward`` (the clone's reward of the proposal: for ProductQA whether it was right, known
where an intervention replaced it too) and ``proposal_signals``; where no budget is left the base
agent acts directly and its action is logged as the proposal. In ``state`` mode these columns are
empty (``""``, null, no signals).

Kinds of help (``helps=[agile.helps.Help(name, agent, price, cap, weight), ...]`` in place of ``strong``):
``budget`` is then a cost per episode in the unit of the prices, counted exactly by
``agile.tiered_budget.TieredBudget``. A kind is affordable while its price fits in the budget left and its calls are
under its cap; the gate is asked and the draw is made only where one is. An exploration draw that says
yes (``explore_p`` as above) then picks the kind among the affordable ones, weighted by ``Help.weight``
(uniform by default), by a second pure draw of ``(rng_seed, episode_id, step)``; a gate names the kind
itself: a gate of several kinds (``kinds`` and ``choose``, as ``helper.gates.tiered_helper_gate.TieredHelperGate``) is asked
``choose(observation, cost_left, calls_left)`` with the episode's exact rest, any other answers ``should_intervene``
with a kind's name, or false. So no episode ever spends past its budget or a kind past its
cap, and every row says which help it called and what it cost (``help_kind``, ``help_cost``; ``""`` and 0
where the agent acted; ``budget_left`` is the cost left, rounded down). A kind with no agent is the
episode's own expert of that kind (``agile.helps.expert_action``). Counterfactual rollouts take one strong
actor and are refused with several kinds.

``counterfactual=True`` adds, for every decision point, ``cf_base_success`` and
``cf_intervene_success``: the episode is cloned before the decision, the base action (resp. the
intervention) is taken, and the clone continues with the base agent alone to the end. All
branches of all episodes run in lockstep too. Cost: each decision point adds two rollouts of the
rest of the episode, i.e. about ``horizon + 1`` times the agent calls of the plain run (cheap for
the simulator; for an LLM agent expect roughly ``horizon`` times the plain run's time).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from agile.budget import EpisodeBudget
from agile.helps import EpisodeExpert, Help, as_helps, draw_kind, prices_and_caps
from agile.protocol import BASE, DECIDE_AFTER, Action, Agent, Episode, Gate, Observation, StepResult, gate_decides_after
from agile.seeding import derive_seed, stable_uniform  # noqa: F401  (re-exported: older imports)
from agile.tiered_budget import TieredBudget
from trajectories.rows import StepRecord

MAX_TOOL_ROUNDS = 8
"""A decision that is still calling tools after this many rounds is a bug in the env or agent."""


@dataclass
class _Decision:
    """What happened at one decision point of one episode."""

    action_text: str
    actor: str
    result: StepResult
    actions: list[Action] = field(default_factory=list)
    """Every action of the decision, one per tool round, the final one last (what a replay plays)."""


def decision_seed(run_seed: int, episode_id: str, step: int, tool_round: int = 0) -> int:
    """The seed handed to the agent at one decision (and tool round) of one episode: a pure function of what
    identifies the decision, never of the gate, the budget or the batch."""
    return derive_seed(run_seed, episode_id, step, tool_round, "agent")


def _keyed(observation: Observation, run_seed: int, tool_round: int) -> Observation:
    return replace(observation, seed=decision_seed(run_seed, observation.episode_id, observation.step, tool_round))


def _act(agent: Agent, episodes: list[Episode], observations: list[Observation]) -> list[Action]:
    if getattr(agent, "needs_episodes", False):
        actions = agent.act(observations, episodes=episodes)
    else:
        actions = agent.act(observations)
    name = getattr(agent, "name", type(agent).__name__)
    if not isinstance(actions, (list, tuple)) or len(actions) != len(observations):
        count = len(actions) if isinstance(actions, (list, tuple)) else type(actions).__name__
        raise ValueError(f"agent {name!r} returned {count} for {len(observations)} observations; act() must "
                         "return a list with one agile.protocol.Action per observation.")
    wrong = next((a for a in actions if not isinstance(getattr(a, "text", None), str)), None)
    if wrong is not None:  # a bare string would be played letter by letter or fail deep in the episode
        raise ValueError(f"agent {name!r} returned a {type(wrong).__name__} ({str(wrong)[:40]!r}) where an "
                         "agile.protocol.Action with a text is expected; return Action(text) objects.")
    return actions


def decide(episodes: list[Episode], actors: list[Agent | None], seed: int = 0) -> list[_Decision]:
    """Play one decision point in each episode with its actor (``None``: the expert).

    Episodes sharing an actor are batched into one ``act`` call per tool round; each observation carries
    ``decision_seed(seed, ...)``.
    """
    transcripts: list[list[str]] = [[] for _ in episodes]
    played: list[list[Action]] = [[] for _ in episodes]
    decisions: list[_Decision | None] = [None] * len(episodes)
    pending = list(range(len(episodes)))
    for tool_round in range(MAX_TOOL_ROUNDS):
        if not pending:
            return decisions  # type: ignore[return-value]
        by_actor: dict[int, list[int]] = {}
        for i in pending:
            by_actor.setdefault(id(actors[i]), []).append(i)
        still = []
        for indices in by_actor.values():
            actor = actors[indices[0]]
            batch = [episodes[i] for i in indices]
            if actor is None:
                actions = [episode.expert_action() for episode in batch]
            else:
                actions = _act(actor, batch, [_keyed(episode.observe(), seed, tool_round) for episode in batch])
            for i, action in zip(indices, actions):
                result = episodes[i].step(action)
                played[i].append(action)
                transcripts[i].append(action.text)
                if result.info.get("tool") and not result.done:
                    transcripts[i].append(str(result.info.get("tool_output", "")))
                    still.append(i)
                else:
                    decisions[i] = _Decision("\n".join(transcripts[i]), action.actor, result, played[i])
        pending = sorted(still)
    raise RuntimeError(
        f"episodes {[episodes[i].episode_id for i in pending]} still call tools after "
        f"{MAX_TOOL_ROUNDS} rounds; the environment must end a decision after a bounded number "
        "of tool calls."
    )


def _per_episode_p(explore_p: float | Sequence[float] | None, n: int) -> list[float | None]:
    if explore_p is None or isinstance(explore_p, (int, float)):
        return [explore_p] * n
    ps = list(explore_p)
    if len(ps) != n:
        raise ValueError(f"explore_p has {len(ps)} values for {n} episodes; give one per episode or a float.")
    return ps


def replay(episode: Episode, actions: Sequence[Action]) -> _Decision:
    """Step ``episode`` with the recorded ``actions`` of one decision (no agent is asked)."""
    transcript: list[str] = []
    result = None
    for k, action in enumerate(actions):
        result = episode.step(action)
        transcript.append(action.text)
        if result.info.get("tool") and not result.done and k + 1 < len(actions):
            transcript.append(str(result.info.get("tool_output", "")))
    return _Decision("\n".join(transcript), actions[-1].actor, result, list(actions))


def proposal_action(decision: _Decision) -> Action:
    """What a proposal-reading gate is shown: the transcript and the final action's signals."""
    final = decision.actions[-1] if decision.actions else None
    return Action(decision.action_text, BASE, dict(final.signals) if final is not None else {})


def run_episodes(
    episodes: Sequence[Episode],
    base_agent: Agent,
    strong: Agent | None = None,
    gate: Gate | None = None,
    budget: int = 0,
    explore_p: float | Sequence[float] | None = None,
    rng_seed: int = 0,
    counterfactual: bool = False,
    decide_after: str | None = None,
    helps: Sequence[Help] | Mapping | None = None,
) -> list[list[StepRecord]]:
    """Run ``episodes`` (mutated in place) to the end; one list of records per episode. ``rng_seed`` keys the
    exploration draws and the seeds handed to the agents (``decision_seed``).

    ``decide_after``: ``"state"`` or ``"proposal"`` (see the module docstring); default: the
    gate's own ``decide_after``, else ``"state"``. ``helps``: several kinds of help in place of ``strong``
    (see "Kinds of help" in the module docstring); ``budget`` is then in the unit of their prices."""
    episodes = list(episodes)
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}.")
    if helps is not None:
        helps, spend, answer = _several_helps(helps, strong, counterfactual, budget)
    gate_mode = gate_decides_after(gate)
    mode = _decision_mode(gate, gate_mode, decide_after)
    ps = _per_episode_p(explore_p, len(episodes))
    for p in ps:
        if p is not None and not 0.0 <= p <= 1.0:
            raise ValueError(f"explore_p must lie in [0, 1], got {p}.")
    count = EpisodeBudget(budget)
    records: list[list[StepRecord]] = [[] for _ in episodes]
    branches: list[tuple[int, int, Episode, Episode]] = []  # (episode, record, base, intervene)
    live = [i for i, episode in enumerate(episodes) if not episode.done]
    while live:
        observations = {i: episodes[i].observe() for i in live}
        if counterfactual:
            for i in live:
                branches.append((i, len(records[i]), episodes[i].clone(), episodes[i].clone()))
        if helps is None:
            left = {i: count.left(i) for i in live}
            room = left
        else:  # the record's budget_left is the cost left, rounded down; room: the kinds still affordable
            allowed = {i: spend.affordable(i) for i in live}
            affordable = {i: [h for h in helps if h.name in allowed[i]] for i in live}
            left = {i: int(spend.left(i)) for i in live}
            room = {i: len(affordable[i]) for i in live}
        proposals = _propose(episodes, live, room, base_agent, rng_seed) if mode == "proposal" else {}
        intervene: dict[int, bool] = {}
        called: dict[int, Help] = {}
        chosen: dict[int, Agent | None] = {}
        for i in live:
            limits = None if helps is None else (spend.left(i), spend.calls_left(i))
            intervene[i], kind = _asks_for_help(
                gate, gate_mode, observations[i], left[i], room[i], proposals[i][0] if i in proposals else None,
                None if helps is None else affordable[i], ps[i], rng_seed, limits)
            if kind is not None:
                called[i] = kind
            chosen[i] = (strong if helps is None else answer[called[i].name]) if intervene[i] else base_agent
        decisions = _play(episodes, live, chosen, intervene, proposals, mode, rng_seed)
        for i, decision in zip(live, decisions):
            obs = observations[i]
            kind = called.get(i) if intervene[i] else None
            seed = getattr(episodes[i], "seed", rng_seed)
            records[i].append(_record(obs, decision, intervene[i], left[i], ps[i], seed, helps is not None, kind,
                                      proposals[i][0] if mode == "proposal" else None))
            if kind is not None and not spend.spend(i, kind.name):  # the kind was affordable when drawn
                raise RuntimeError(f"episode {obs.episode_id!r}: help {kind.name!r} was chosen but is not affordable")
            elif intervene[i]:
                count.spend(i)
            # Optional gate hooks: a PRM-backed gate reads earlier actions, and frees per-episode state.
            if gate is not None and hasattr(gate, "record_action"):
                gate.record_action(obs, decision.action_text)
            if gate is not None and episodes[i].done and hasattr(gate, "end_episode"):
                gate.end_episode(obs.episode_id)
            if episodes[i].done:
                count.end(i)
                if helps is not None:
                    spend.end(i)
        live = [i for i in live if not episodes[i].done]
    for i, episode in enumerate(episodes):
        outcome = float(episode.success())
        for record in records[i]:
            record.success = outcome
    if counterfactual and branches:
        _fill_counterfactuals(branches, records, base_agent, strong, rng_seed)
    return records


# ---- run_episodes' steps ------------------------------------------------------------------------


def _several_helps(helps: Sequence[Help] | Mapping, strong: Agent | None, counterfactual: bool,
                   budget: float) -> tuple[list[Help], TieredBudget, dict[str, Agent | None]]:
    """The kinds of help, the budget that prices them, and the agent answering each kind; refused beside
    ``strong`` or a counterfactual rollout."""
    if strong is not None:
        raise ValueError("run_episodes: give strong (one kind of help) or helps (several), not both.")
    if counterfactual:
        raise ValueError("run_episodes: counterfactual rollouts replay one intervention; with several helps "
                         "there is no one intervention to replay. Collect them without counterfactual.")
    helps = as_helps(helps)
    prices, caps = prices_and_caps(helps)
    spend = TieredBudget(prices, budget, caps, owner="run_episodes")
    # One answering agent per kind, so episodes calling the same kind are batched together.
    answer = {h.name: h.agent if h.agent is not None else EpisodeExpert(h.name) for h in helps}
    return helps, spend, answer


def _decision_mode(gate: Gate | None, gate_mode: str, decide_after: str | None) -> str:
    """``decide_after``, else the gate's own; refused where a proposal-reading gate would get no proposal."""
    mode = decide_after or gate_mode
    if mode not in DECIDE_AFTER:
        raise ValueError(f"decide_after={mode!r}: use one of {DECIDE_AFTER}.")
    if mode == "state" and gate_mode == "proposal":
        raise ValueError(f"decide_after='state' but the gate {getattr(gate, 'name', type(gate).__name__)!r} "
                         "reads the base agent's proposal (decide_after='proposal'); run with "
                         "decide_after='proposal' or use a gate that decides on the state.")
    return mode


def _asks_for_help(gate: Gate | None, gate_mode: str, obs: Observation, left: int, room: int,
                   proposal: _Decision | None, affordable: list[Help] | None, p: float | None,
                   rng_seed: int, limits: tuple[float, dict] | None = None) -> tuple[bool, Help | None]:
    """Whether one episode calls for help at this decision (steps 2-3 of the module docstring), and with several
    kinds (``affordable`` given) which one: the gate's named kind, else one drawn by the exploration. ``limits``:
    the episode's exact cost left and calls left per kind, which a gate of these kinds is asked with."""
    wants, kind = False, None
    if room > 0:
        if affordable is not None and _chooses_among(gate, affordable):
            cost_left, calls_left = limits
            wants = kind = _named_kind(gate, gate.choose(obs, cost_left, calls_left, proposal=(
                proposal_action(proposal) if gate_mode == "proposal" else None)), affordable)
            wants = bool(wants)
        elif gate is not None:
            if gate_mode == "proposal":
                wants = gate.should_intervene(obs, left, proposal=proposal_action(proposal))
            else:
                wants = gate.should_intervene(obs, left)
            if affordable is not None:
                wants = kind = _named_kind(gate, wants, affordable)
            wants = bool(wants)
        if p and stable_uniform(rng_seed, obs.episode_id, obs.step, "explore") < p:
            wants = True
            if affordable is not None and kind is None:
                kind = draw_kind(affordable, stable_uniform(rng_seed, obs.episode_id, obs.step, "kind"))
    return wants, kind


def _record(obs: Observation, decision: _Decision, intervened: bool, left: int, p: float | None, seed: int,
            several: bool, kind: Help | None, proposed: _Decision | None) -> StepRecord:
    """The row of one decision; with ``proposed`` (after the proposal) the base agent's proposal too."""
    record = StepRecord.of(obs, decision.action_text, decision.actor, intervened, left,
                           decision.result.reward, decision.result.done, p or 0.0, seed,
                           # rows of several kinds name theirs ("" for the agent); one kind's name none
                           kind=None if not several else kind.name if kind else "",
                           cost=None if not several else kind.price if kind else 0.0)
    if proposed is not None:
        record.proposal_text = proposed.action_text
        record.proposal_reward = float(proposed.result.reward)
        record.proposal_signals = dict(proposal_action(proposed).signals)
    return record


def _play(episodes: list[Episode], live: list[int], chosen: dict[int, Agent | None], intervene: dict[int, bool],
          proposals: dict[int, tuple[_Decision, bool]], mode: str, rng_seed: int) -> list[_Decision]:
    """Each live episode's decision, in ``live``'s order. After the proposal only the helpers are asked: a kept
    proposal is replayed, and one played where no budget was left already stands."""
    if mode != "proposal":
        return decide([episodes[i] for i in live], [chosen[i] for i in live], rng_seed)
    direct = {i: d for i, (d, on_clone) in proposals.items() if not on_clone}  # no budget: already played
    acting = [i for i in live if intervene[i]]
    decisions = dict(zip(acting, decide([episodes[i] for i in acting], [chosen[i] for i in acting], rng_seed)))
    for i in live:
        if i in direct:
            decisions[i] = direct[i]
        elif not intervene[i]:
            decisions[i] = replay_checked(episodes[i], proposals[i][0])
    return [decisions[i] for i in live]


def _chooses_among(gate, affordable: list[Help]) -> bool:
    """Whether ``gate`` names kinds of these helps itself (``choose``, as ``TieredHelperGate``): a gate of one kind
    (``HelperGate.kinds == ("intervene",)``) or none answers ``should_intervene`` instead."""
    kinds = getattr(gate, "kinds", ())
    names = {h.name for h in affordable}
    return callable(getattr(gate, "choose", None)) and len(kinds) > 1 and bool(set(kinds) & names)


def _named_kind(gate, answer, affordable: list[Help]) -> Help | None:
    """The kind a gate's answer names among several helps: a kind's name (played if affordable, else the agent acts:
    the loop keeps the budget whatever the gate says), or a false answer; a bare True names none and is refused."""
    if not answer:
        return None
    if answer is True or not isinstance(answer, str):
        raise ValueError(f"gate {getattr(gate, 'name', type(gate).__name__)!r} answered {answer!r} with several kinds "
                         "of help; answer the name of the kind to call, or a false value for the agent.")
    return next((h for h in affordable if h.name == answer), None)


def _propose(episodes: list[Episode], live: list[int], left: dict[int, int],
             base_agent: Agent, seed: int = 0) -> dict[int, tuple[_Decision, bool]]:
    """The base agent's decision at every live episode, in one batched ``decide``: on a clone
    where budget is left (the gate may still replace it), else on the episode itself (nothing can
    replace it). Values: ``(decision, played on a clone)``."""
    on_clone = {i: left[i] > 0 for i in live}
    targets = [episodes[i].clone() if on_clone[i] else episodes[i] for i in live]
    decisions = decide(targets, [base_agent] * len(live), seed)
    return {i: (d, on_clone[i]) for i, d in zip(live, decisions)}


_warned_replay: set[str] = set()


def replay_checked(episode: Episode, proposed: _Decision) -> _Decision:
    """Replay a kept proposal on the real episode; warn once per environment when the replay's
    outcome differs from the clone's (an environment that is not deterministic given actions)."""
    decision = replay(episode, proposed.actions)
    same = (decision.action_text == proposed.action_text and decision.result.reward == proposed.result.reward
            and decision.result.done == proposed.result.done)
    if not same:
        env = getattr(episode, "env", type(episode).__name__)
        if env not in _warned_replay:
            _warned_replay.add(env)
            warnings.warn(
                f"environment {env!r}: replaying the base agent's proposal gave another outcome than on the "
                f"clone (episode {episode.episode_id!r}); it is not deterministic given the actions. The "
                "replay's own outcome is logged as the action; proposal_reward keeps the clone's.",
                stacklevel=3,
            )
    return decision


def _fill_counterfactuals(branches, records, base_agent: Agent, strong: Agent | None, seed: int = 0) -> None:
    """Play every (base here, intervene here) branch, then the base agent alone, in lockstep."""
    clones = [b for _, _, b, _ in branches] + [c for _, _, _, c in branches]
    first = [base_agent] * len(branches) + [strong] * len(branches)
    decide(clones, first, seed)
    live = [j for j, clone in enumerate(clones) if not clone.done]
    while live:
        decide([clones[j] for j in live], [base_agent] * len(live), seed)
        live = [j for j in live if not clones[j].done]
    n = len(branches)
    for k, (i, r, _, _) in enumerate(branches):
        records[i][r].cf_base_success = float(clones[k].success())
        records[i][r].cf_intervene_success = float(clones[n + k].success())
