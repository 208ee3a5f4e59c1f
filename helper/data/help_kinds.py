"""Kinds of help on a collection's command line: parsed, checked, and resolved to who answers each.

    collect-offline-trajectories --env examples.tiered_rapids:make_episodes --agent examples.tiered_rapids:make_agent \
        --help-kinds compute:1 stronger:2 human:4 --help-caps human=1 --help-weights human=2 --budget 6

- ``--help-kinds NAME:PRICE ...``: each kind and its price per call, in the unit of ``--budget`` (then a cost per
  episode). The price is what follows the last colon, so a served or plug-in actor keeps its own colon
  (``openai:gpt-4o-mini:2``, ``mypkg.helpers:make_stronger:2``). ``NAME=ACTOR:PRICE`` names a kind apart from who
  answers it (``stronger=runs/agile_sft/model:2``: the kind is ``stronger`` in every table and flag, the model in
  that folder answers it; the manifest records both).
- ``--help-caps KIND=CALLS``: the most calls of a kind in an episode (default: only the budget limits it).
- ``--help-weights KIND=W``: a kind's share of the exploration draws (default: 1 each, a uniform draw).

Who answers a kind (``resolve``, reading its actor where it has one, else its name): the episodes' own expert of that name where the env's episodes list it in
``help_kinds`` (``agile.helps``: ``expert_action(kind=...)``), ``human`` the episode's ``expert_action()``, the
base agent's own extra compute where the env kind names it so (ProductQA's ``compute`` and ``compute@K``:
``agile.executor.self_consistency``, on the base agent's loaded model), any other name the strong actor it names
as ``--strong`` would (``human-cli``, a model, ``openai:MODEL``, a plug-in agent). Every refusal is one line
naming the flag and the value.
"""

from __future__ import annotations

import math
from dataclasses import replace

from agile.helps import Help
from trajectories.helps import HelpKind, split_actor

FLAGS = "--help-kinds"
DECIMALS = 3
"""Prices with more decimals cannot be solved exactly (``tabular_rl.tiered.cost_units``)."""


def _number(text: str, flag: str, item: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{flag} {item!r}: {what} {text!r} is not a number.") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{flag} {item!r}: {what} {text!r} must be a finite number >= 0.")
    return value


def _by_kind(items: list[str], flag: str, names: list[str], what: str) -> dict[str, str]:
    """``KIND=VALUE`` items as a dict, each kind one of ``names`` and given once."""
    out: dict[str, str] = {}
    for item in items:
        kind, sep, value = item.partition("=")
        if not sep or not kind or not value:
            raise ValueError(f"{flag} {item!r}: give KIND={what.upper()}, e.g. {names[0] if names else 'human'}=1.")
        if kind not in names:
            raise ValueError(f"{flag} {item!r}: {kind!r} is not among --help-kinds ({', '.join(names) or 'none'}).")
        if kind in out:
            raise ValueError(f"{flag}: {kind!r} is given twice; give each kind once.")
        out[kind] = value
    return out


def parse(kinds: list[str], caps: list[str], weights: list[str], budget) -> list[HelpKind]:
    """The kinds of the flags, in the order given (empty: one kind, the strong actor), or ``ValueError`` in one line."""
    if not kinds:
        if caps or weights:
            raise ValueError(f"{'--help-caps' if caps else '--help-weights'} needs --help-kinds: name the kinds and "
                             "their prices first, e.g. --help-kinds compute:1 human:4.")
        return []
    parsed: dict[str, float] = {}
    actor_of: dict[str, str | None] = {}
    for item in kinds:
        named, sep, price = item.rpartition(":")
        name, actor_of_name = split_actor(named)
        if not sep or not name or actor_of_name == "":
            raise ValueError(f"{FLAGS} {item!r}: give each kind as NAME:PRICE or NAME=ACTOR:PRICE, e.g. human:4.")
        if name in parsed:
            raise ValueError(f"{FLAGS}: {name!r} is given twice; give each kind once.")
        value = _number(price, FLAGS, item, "price")
        if round(value, DECIMALS) != value:
            raise ValueError(f"{FLAGS} {item!r}: give the price with at most {DECIMALS} decimals, so that costs add up "
                             "exactly.")
        if value > budget:
            raise ValueError(f"{FLAGS} {item!r}: a call costs {value:g}, more than --budget {budget}, so it would "
                             "never be called; raise --budget or drop the kind.")
        parsed[name], actor_of[name] = value, actor_of_name
    names = list(parsed)
    cap_of = {}
    for kind, text in _by_kind(caps, "--help-caps", names, "calls").items():
        if not text.isdigit():
            raise ValueError(f"--help-caps {kind}={text}: a cap is a whole number of calls >= 1.")
        if int(text) == 0:
            raise ValueError(f"--help-caps {kind}=0: a kind capped at 0 calls is never called; drop it from "
                             "--help-kinds.")
        cap_of[kind] = int(text)
    weight_of = {}
    for kind, text in _by_kind(weights, "--help-weights", names, "weight").items():
        weight = _number(text, "--help-weights", f"{kind}={text}", "weight")
        if weight == 0:
            raise ValueError(f"--help-weights {kind}={text}: a kind of weight 0 is never drawn; drop it from "
                             "--help-kinds.")
        weight_of[kind] = weight
    return [HelpKind(name, price, cap_of.get(name), weight_of.get(name, 1.0), actor_of[name])
            for name, price in parsed.items()]


def own_kinds(setup, seed: int) -> tuple[str, ...]:
    """The kinds the env's episodes offer themselves (episode 0's ``help_kinds``; none for most envs)."""
    episode = setup.episodes([0], seed)[0]
    return tuple(str(k) for k in (getattr(episode, "help_kinds", ()) or ()))


def check_names(setup, kinds: list[HelpKind], own: tuple[str, ...]) -> None:
    """Refuse, before any file is written or model loaded, a kind that names no actor: on a plug-in env, one that is
    not the episodes' own, ``human``, ``human-cli``, ``openai:MODEL`` or a plug-in agent (a built-in env takes any
    model name; an unknown one is refused when it loads)."""
    from helper.data.environment import OPENAI_PREFIX, EnvSetup
    from helper.data.plugins import AGENT_GROUP, is_plugin

    for kind in kinds:
        name = kind.who
        _renamed_expert(kind, own)
        if name in own or name == "human" or _compute_samples(setup, kind) is not None:
            continue
        try:
            EnvSetup(replace(setup.spec, strong=name), setup.split, setup.groups)  # a plug-in that does not import
        except Exception as error:
            raise ValueError(f"{FLAGS} {name}:{kind.price:g}: {error}") from error
        if setup.spec.plugin and not (name == "human-cli" or name.startswith(OPENAI_PREFIX)
                                      or is_plugin(name, AGENT_GROUP)):
            raise ValueError(f"{FLAGS} {name}:{kind.price:g}: {name!r} is not one of the episodes' own kinds "
                             f"({', '.join(own) or 'none'}, their help_kinds) nor an actor of a plug-in env (human, "
                             "human-cli, openai:MODEL or a plug-in agent module:factory).")


def resolve(setup, kinds: list[HelpKind], own: tuple[str, ...]) -> tuple[Help, ...]:
    """Who answers each kind (see the module docstring), as the episode loop's ``Help``s."""
    from helper.data.environment import EnvSetup

    helps = []
    for kind in kinds:
        agent = None
        who = kind.who
        _renamed_expert(kind, own)
        samples = None if who in own or who == "human" else _compute_samples(setup, kind)
        if samples is not None:
            agent = setup.kind.compute_help(setup, who, samples)
        elif who not in own and who != "human":
            named = EnvSetup(replace(setup.spec, strong=who), setup.split, setup.groups,
                             setup.agent_seed, setup.strong_seed)
            try:
                agent = named.strong_actor()
            except Exception as error:  # the actor's own refusal, said as the flag's
                raise ValueError(f"{FLAGS} {kind.name}:{kind.price:g}: {who!r} is not one of the episodes' "
                                 f"own kinds ({', '.join(own) or 'none'}) and not an actor: {error}") from error
        helps.append(Help(kind.name, agent, kind.price, kind.cap, kind.weight))
    return tuple(helps)


def _renamed_expert(kind: HelpKind, own: tuple[str, ...]) -> None:
    """Refuse a new name for the episodes' own expert or the human: the episode answers a kind by its name."""
    if kind.actor is not None and (kind.actor in own or kind.actor == "human"):
        raise ValueError(f"{FLAGS} {kind.name}={kind.actor}:{kind.price:g}: the episodes' own experts and the human "
                         f"answer under their own names; give it as {kind.actor}:{kind.price:g}.")


def _compute_samples(setup, kind: HelpKind) -> int | None:
    """k where ``kind`` is the base agent's own extra compute on this env (``EnvKind.compute_samples``), refused in
    the flag's words where the base agent cannot give it."""
    try:
        return setup.kind.compute_samples(setup.spec, kind.who)
    except ValueError as error:
        raise ValueError(f"{FLAGS} {kind.name}:{kind.price:g}: {error}") from error
