"""Environments and agents of the user's own, named on the command line.

    collect-offline-trajectories --env mypkg.tasks:make_episodes --agent mypkg.agent:make_agent
    helpgate sweep --env gridquiz --agent gridquiz-base ...        # installed entry points

A name is resolved, in this order, as an entry point of the group ``helpgate.envs`` (resp.
``helpgate.agents``) of an installed package, then as a ``package.module:factory`` reference.
The current folder is put on ``sys.path`` first (as ``python -m`` does), so a module beside the
command's working folder imports without installing it.

- An env factory is called as ``factory(split, count, seed)`` and returns a list of ``count``
  ``agile.protocol.Episode``. Episode ``i`` must depend only on ``(split, seed, i)``: a resumed
  collection calls the factory again with a larger ``count`` and keeps the episodes it needs.
- An episode may offer kinds of help of its own (``--help-kinds``): it lists their names in ``help_kinds`` (distinct,
  non-empty str) and answers ``expert_action(kind=name)`` for each; ``expert_action()`` with no kind stays its one
  expert (``agile.helps``). ``examples.tiered_rapids`` is one.
- An agent factory is called with no arguments and returns an ``agile.protocol.Agent``.
- The horizon (the budget of "always intervene" in a sweep) is the largest, over the episodes, of
  ``episode.horizon`` when an episode has that attribute, else of ``episode.observe().horizon``.

Every refusal names the reference and what is wrong: not importable, not callable, a wrong return
type (a class where an instance is due), an episode or agent missing a method, two episodes with one id (also
across batches: episode ``i``'s id may depend only on ``(split, seed, i)``), a ``sys.exit`` or a
``KeyboardInterrupt`` of its own (the user's Ctrl-C still stops the run). Once built, episodes and agents run under
``helper.data.plugin_limits``: a time limit per call (``--plugin-timeout-s``) and per episode a cap on its decisions
(``--plugin-max-steps``, default its horizon), with their returns checked.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import os
import re
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from agile.protocol import STRONG, Action, Observation
from helper.data.plugin_limits import DEFAULT_TIMEOUT_S, LimitedAgent, LimitedEpisode, PluginError, limited_call

ENV_GROUP = "helpgate.envs"
AGENT_GROUP = "helpgate.agents"
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
"""``package.module:factory`` (the factory may be a dotted attribute path: ``module:Class.build``)."""
MODEL_SCHEMES = ("openai:",)
"""Prefixes that name a model behind an endpoint (``openai:MODEL``), never a plug-in module."""
EPISODE_METHODS = ("observe", "step", "expert_action", "success", "clone")
EPISODE_ATTRIBUTES = ("episode_id", "done")


def is_plugin(name: str | None, group: str) -> bool:
    """Whether ``name`` is a ``module:factory`` reference or an installed entry point of ``group``."""
    if not name or name.startswith(MODEL_SCHEMES):
        return False
    return bool(REFERENCE.match(name)) or _entry_point(name, group) is not None


def _entry_point(name: str, group: str):
    matches = [ep for ep in entry_points(group=group) if ep.name == name]
    return matches[0] if matches else None


def resolve(name: str, group: str) -> Callable:
    """The factory ``name`` names (an entry point of ``group`` or ``module:factory``)."""
    point = _entry_point(name, group)
    if point is not None:
        try:
            factory = point.load()
        except Exception as error:  # an installed plug-in that fails to import: say which
            raise PluginError(f"{name}: the {group} entry point {point.value!r} does not load "
                              f"({describe(error)}).") from error
    elif REFERENCE.match(name):
        module_name, _, attribute = name.partition(":")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise PluginError(f"{name}: module {module_name!r} is not importable ({error}); install its package "
                              "or run from the folder that holds it (or set PYTHONPATH).") from error
        except Exception as error:  # the module's own code failed on import (a SyntaxError, a raise)
            raise PluginError(f"{name}: importing module {module_name!r} raised {describe(error)}; fix the "
                              "module.") from error
        except (SystemExit, KeyboardInterrupt) as error:
            _not_an_exit(name, f"importing module {module_name!r}", error)
        factory = module
        for part in attribute.split("."):
            if not hasattr(factory, part):
                raise PluginError(f"{name}: module {module_name!r} has no attribute {attribute!r}.")
            factory = getattr(factory, part)
    else:
        installed = sorted(ep.name for ep in entry_points(group=group))
        raise PluginError(f"{name!r} is neither an installed {group} entry point (installed: {installed or 'none'}) "
                          "nor a package.module:factory reference.")
    if not callable(factory):
        raise PluginError(f"{name}: {type(factory).__name__} object is not callable; name a factory function.")
    return factory


def describe(error: BaseException) -> str:
    """``Type: message`` of a plug-in's exception, with the file and line a SyntaxError points at."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"SyntaxError at {error.filename}:{error.lineno} ({error.msg})"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def call_factory(name: str, factory: Callable, *args):
    """``factory(*args)``; what the user's factory raises is reported naming it (a bug of theirs): an exception, a
    ``sys.exit`` or a ``KeyboardInterrupt`` it raises itself (the user's Ctrl-C still stops the run)."""
    try:
        return factory(*args)
    except PluginError:
        raise
    except Exception as error:
        raise PluginError(f"{name}: the factory raised {describe(error)}.") from error
    except (SystemExit, KeyboardInterrupt) as error:
        _not_an_exit(name, "the factory", error)


def _not_an_exit(name: str, what: str, error: BaseException) -> None:
    """Raise the one-line refusal of a plug-in's ``sys.exit`` or own ``KeyboardInterrupt``; the user's Ctrl-C goes on
    up (``helper.config_cli.user_interrupted``)."""
    from helper.config_cli import user_interrupted

    if isinstance(error, SystemExit):
        raise PluginError(f"{name}: {what} called sys.exit({error.code!r}); a plug-in returns or raises an "
                          "exception, it does not end the process.") from None
    if user_interrupted():
        raise error
    raise PluginError(f"{name}: {what} raised KeyboardInterrupt itself (no Ctrl-C was pressed); raise an Exception "
                      "for an error.") from None


def check_episodes(name: str, episodes, count: int) -> list:
    """``episodes`` as a list, or raise naming the factory and the first problem found."""
    if not isinstance(episodes, (list, tuple)):
        raise PluginError(f"{name}: returned {type(episodes).__name__}, expected a list of agile.protocol.Episode.")
    made = next((e for e in episodes if isinstance(e, type)), None)
    if made is not None:
        raise PluginError(f"{name}: returned the class {made.__name__}, not an episode; return instances, "
                          f"{made.__name__}(...).")
    if len(episodes) != count:
        raise PluginError(f"{name}: returned {len(episodes)} episodes for count={count}; return exactly count.")
    seen: dict[str, int] = {}
    for i, episode in enumerate(episodes):
        for method in EPISODE_METHODS:
            if not callable(getattr(episode, method, None)):
                raise PluginError(f"{name}: episode {i} ({type(episode).__name__}) has no method {method}(); an "
                                  f"episode needs {', '.join(EPISODE_METHODS)} (agile.protocol.Episode).")
        for attribute in EPISODE_ATTRIBUTES:
            if not hasattr(episode, attribute):
                raise PluginError(f"{name}: episode {i} ({type(episode).__name__}) has no attribute {attribute!r} "
                                  "(agile.protocol.Episode).")
        if not isinstance(episode.episode_id, str) or not episode.episode_id:
            raise PluginError(f"{name}: episode {i} has the episode_id {episode.episode_id!r} "
                              f"({type(episode.episode_id).__name__}); an episode_id is a non-empty str.")
        check_help_kinds(name, i, episode)
        if episode.episode_id in seen:
            raise PluginError(f"{name}: episodes {seen[episode.episode_id]} and {i} share the episode_id "
                              f"{episode.episode_id!r}; give every episode its own id.")
        seen[episode.episode_id] = i
    return list(episodes)


def check_help_kinds(name: str, i: int, episode) -> None:
    """An episode's own kinds of help (``help_kinds``, optional): distinct non-empty names, and an ``expert_action``
    that takes the ``kind`` to answer (else the first call of a kind would fail deep in the loop)."""
    kinds = getattr(episode, "help_kinds", None)
    if kinds is None:
        return
    names = list(kinds) if isinstance(kinds, (list, tuple)) else None
    if names is None or not all(isinstance(k, str) and k for k in names) or len(set(names)) != len(names):
        raise PluginError(f"{name}: episode {i} has help_kinds={kinds!r}; list the kinds of help it offers as distinct "
                          "non-empty names (a tuple of str).")
    try:
        inspect.signature(episode.expert_action).bind(kind=names[0] if names else "")
    except TypeError:
        raise PluginError(f"{name}: episode {i} lists help_kinds {names} but its expert_action() takes no kind; "
                          "define expert_action(self, kind=None) answering each kind.") from None
    except ValueError:  # a builtin without a signature: called as it is
        pass


def check_observation(name: str, episodes) -> None:
    """Refuse an ``observe()`` that returns no ``Observation`` (asked of the first live episode)."""
    live = next((e for e in episodes if not e.done), None)
    if live is not None and not isinstance(observation := live.observe(), Observation):
        raise PluginError(f"{name}: observe() returned {type(observation).__name__}, expected an "
                          "agile.protocol.Observation.")


def episode_horizon(episode, name: str = "the env plug-in") -> int:
    """The decisions an episode may take: ``episode.horizon`` if set, else its observation's horizon; refused naming
    ``name`` unless an integer >= 1."""
    horizon = getattr(episode, "horizon", None)
    horizon = horizon if horizon is not None else episode.observe().horizon
    whole = isinstance(horizon, numbers.Real) and math.isfinite(horizon) and float(horizon).is_integer()
    if isinstance(horizon, bool) or not whole or horizon < 1:
        raise PluginError(f"{name}: episode {episode.episode_id!r} has horizon={horizon!r}; a horizon is the most "
                          "decisions the episode takes, an integer >= 1.")
    return int(horizon)


class PluginSource:
    """The episodes of an env factory, with the interface of the built-in episode sources; each is a
    ``helper.data.plugin_limits.LimitedEpisode`` (its calls timed, its decisions capped)."""

    def __init__(self, name: str, split: str, timeout_s: float | None = None, max_steps: int | None = None):
        self.name, self.split = name, split
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        self.max_steps = max_steps
        self.factory = resolve(name, ENV_GROUP)
        self.max_horizon = 0
        """The longest horizon among the episodes built so far."""
        self._ids: dict[int, dict[str, int]] = {}  # seed -> episode id -> the index that first had it

    def episodes(self, indices, seed: int) -> list:
        """Fresh episodes ``indices`` (episode ``i`` of ``factory(split, max(indices) + 1, seed)``)."""
        indices = list(indices)
        if not indices:
            return []
        count = max(indices) + 1
        built = check_episodes(self.name, call_factory(self.name, self.factory, self.split, count, seed), count)
        self._check_ids(built, seed)
        horizons = limited_call(self.name, "episode horizon", self.timeout_s,
                                lambda: [episode_horizon(built[i], self.name) for i in indices])
        chosen = [LimitedEpisode(built[i], self.name, self.timeout_s, self.max_steps, h)
                  for i, h in zip(indices, horizons)]
        check_observation(self.name, chosen)
        self.max_horizon = max([self.max_horizon, *horizons])
        return chosen

    def _check_ids(self, built: list, seed: int) -> None:
        """Episode ``i`` must be the same episode in every call (its id depends only on ``(split, seed, i)``): an id
        another index had in an earlier batch is refused when first seen, before any row of it is written."""
        known = self._ids.setdefault(int(seed), {})
        for i, episode in enumerate(built):
            first = known.setdefault(episode.episode_id, i)
            if first != i:
                raise PluginError(f"{self.name}: episode {i} has the id {episode.episode_id!r} that episode {first} "
                                  f"had in an earlier batch (split {self.split!r}, seed {seed}); an episode's id "
                                  "must depend only on (split, seed, index), not on count.")


def make_agent(name: str, actor: str | None = None, timeout_s: float | None = None):
    """The agent an agent factory returns (checked; its ``act`` timed, ``helper.data.plugin_limits``); ``actor``
    relabels its actions (a strong actor)."""
    agent = call_factory(name, resolve(name, AGENT_GROUP))
    if isinstance(agent, type):
        raise PluginError(f"{name}: returned the class {agent.__name__}, not an agent; return an instance, "
                          f"{agent.__name__}().")
    if not callable(getattr(agent, "act", None)):
        raise PluginError(f"{name}: returned {type(agent).__name__}, which has no act(observations) method "
                          "(agile.protocol.Agent).")
    if not hasattr(agent, "name"):
        try:
            agent.name = name
        except AttributeError:
            pass
    agent = LimitedAgent(agent, name, DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
    return agent if actor is None else AsActor(agent, actor)


class AsActor:
    """An agent whose actions are recorded under ``actor`` (a plug-in strong actor is ``strong``)."""

    def __init__(self, agent, actor: str = STRONG):
        self.agent, self.actor = agent, actor
        self.name = f"{actor}:{getattr(agent, 'name', type(agent).__name__)}"
        self.needs_episodes = getattr(agent, "needs_episodes", False)

    def act(self, observations, episodes=None):
        if self.needs_episodes:
            actions = self.agent.act(observations, episodes=episodes)
        else:
            actions = self.agent.act(observations)
        return [Action(action.text, actor=self.actor) for action in actions]
