"""What a plug-in's episodes and agents may not do to a run: hang, run forever, exit, or return the wrong thing.

    episode = LimitedEpisode(raw, "mypkg.tasks:make_episodes", timeout_s=300, max_steps=None)
    agent = LimitedAgent(raw_agent, "mypkg.agent:make_agent", timeout_s=300)

Every call of a plug-in episode (``observe``, ``step``, ``expert_action``, ``success``, ``clone``) and of a plug-in
agent (``act``, one batch) must return within ``timeout_s`` seconds (``--plugin-timeout-s``, default 300): past it
the call is stopped and the run refused in one line naming the plug-in, the method and the flag. An episode that is
not done after ``max_steps`` decisions (``--plugin-max-steps``; default: its own horizon, ``episode.horizon`` or its
observation's, which every reader of the data takes as the most decisions an episode has) is stopped there and
refused the same way. A ``sys.exit`` inside a plug-in, a ``KeyboardInterrupt`` it raises itself (not the user's
Ctrl-C, which still stops the run: ``helper.config_cli.user_interrupted``), a ``success()`` that is not a number
in [0, 1], a ``step()`` that returns no ``StepResult`` and an ``observe()`` that returns no ``Observation`` are each
one line naming the plug-in. An exception a plug-in raises goes up as it is (the CLI names its file and line).

The clock is ``SIGALRM`` (``signal.setitimer``): it stops Python code and blocking calls alike, and costs two system
calls per plug-in call. It runs only in the main thread of a process (the only one signals reach); elsewhere, e.g.
in a Ray worker's thread, the calls run without a time limit. Calls nest (an agent reading its episodes): the
outermost one's limit holds, and its name is the one reported.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading

from agile.protocol import Observation
from helper.config_cli import user_interrupted

DEFAULT_TIMEOUT_S = 300.0


class PluginError(ValueError):
    """A plug-in that cannot be used or misbehaved; the message names it and what is wrong. (Defined here, below
    ``helper.data.plugins``, which builds on these limits and is its import path.)"""


class _Expired(BaseException):
    """Raised by the alarm inside a plug-in's call; a BaseException, so a plug-in's ``except Exception`` lets it by."""


_state = threading.local()
_CLOCK = hasattr(signal, "setitimer")
_MAIN = threading.main_thread()


def _on_alarm(signum, frame):
    if getattr(_state, "depth", 0):
        raise _Expired()


def limited_call(name: str, what, timeout_s: float | None, function, *args):
    """``function(*args)``, a plug-in's call: at most ``timeout_s`` seconds (main thread only), its exits and
    interrupts named. ``what`` (text, or a function giving it: built only for an error) names the call."""
    depth = getattr(_state, "depth", 0)
    timed = depth == 0 and timeout_s is not None and _CLOCK and threading.current_thread() is _MAIN
    if timed:
        if signal.getsignal(signal.SIGALRM) is not _on_alarm:
            signal.signal(signal.SIGALRM, _on_alarm)  # left installed: it does nothing outside a plug-in's call
        signal.setitimer(signal.ITIMER_REAL, float(timeout_s), 1.0)  # again each second, should one be swallowed
    _state.depth = depth + 1
    try:
        return function(*args)
    except _Expired:
        if depth:
            raise  # the outermost call's limit, and its name
        raise PluginError(f"{name}: {_text(what)} did not return within {timeout_s:g} s (--plugin-timeout-s); make "
                          "it return sooner, or raise --plugin-timeout-s.") from None
    except SystemExit as stop:
        raise PluginError(f"{name}: {_text(what)} called sys.exit({stop.code!r}); a plug-in returns or raises an "
                          "exception, it does not end the process.") from None
    except KeyboardInterrupt:
        if user_interrupted():
            raise
        raise PluginError(f"{name}: {_text(what)} raised KeyboardInterrupt itself (no Ctrl-C was pressed); raise "
                          "an Exception for an error.") from None
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
        _state.depth = depth


def _text(what) -> str:
    return what() if callable(what) else what


def check_success(name: str, episode_id: str, value) -> float:
    """``value`` as the outcome in [0, 1], or refused naming the plug-in."""
    number = isinstance(value, (int, float)) or type(value).__module__ == "numpy" and hasattr(value, "__float__")
    if not number or not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:
        raise PluginError(f"{name}: episode {episode_id!r} success() returned {value!r} "
                          f"({type(value).__name__}); return the episode's outcome as a number in [0, 1].")
    return float(value)


def check_observation_fields(name: str, observation: Observation) -> None:
    """Refuse an observation a row cannot hold as it is, naming the plug-in and the field: ``state_text`` not text,
    a feature not a number, or ``step`` not an integer >= 0."""
    where = f"episode {observation.episode_id!r} observe()"
    if not isinstance(observation.state_text, str):
        raise PluginError(f"{name}: {where} returned a state_text of type {type(observation.state_text).__name__}; "
                          "state_text must be a str.")
    features = observation.features if isinstance(observation.features, dict) else {None: observation.features}
    for key, value in features.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise PluginError(f"{name}: {where} returned the feature {key!r}: {value!r} ({type(value).__name__}); "
                              "features map names to numbers (NaN for a missing one).")
    step = observation.step
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise PluginError(f"{name}: {where} returned step={step!r}; a step is the decision's index in its episode, "
                          "an integer >= 0.")


class LimitedEpisode:
    """A plug-in episode whose calls are timed and checked (see the module docstring); attributes pass through."""

    def __init__(self, episode, name: str, timeout_s: float | None = DEFAULT_TIMEOUT_S, max_steps: int | None = None,
                 horizon: int | None = None):
        self.__dict__.update(_inner=episode, _name=name, _timeout=timeout_s, _decisions=0,
                             _cap=max_steps if max_steps is not None else horizon,
                             _flag="--plugin-max-steps" if max_steps is not None else "its horizon")

    def __getattr__(self, attribute):
        return getattr(self._inner, attribute)

    def __setattr__(self, attribute, value):
        setattr(self._inner, attribute, value)

    def _call(self, method: str, *args):
        return limited_call(self._name, lambda: f"episode {self._inner.episode_id!r} {method}()", self._timeout,
                            getattr(self._inner, method), *args)

    def observe(self) -> Observation:
        observation = self._call("observe")
        if not isinstance(observation, Observation):
            raise PluginError(f"{self._name}: observe() returned {type(observation).__name__}, expected an "
                              f"agile.protocol.Observation (episode {self._inner.episode_id!r}).")
        check_observation_fields(self._name, observation)
        return observation

    def step(self, action):
        result = self._call("step", action)
        if not (hasattr(result, "reward") and hasattr(result, "done") and isinstance(getattr(result, "info", None),
                                                                                   dict)):
            raise PluginError(f"{self._name}: episode {self._inner.episode_id!r} step() returned "
                              f"{type(result).__name__}, expected an agile.protocol.StepResult.")
        if not (result.info.get("tool") and not result.done):  # a tool call is part of the same decision
            self.__dict__["_decisions"] += 1
            if self._cap is not None and self._decisions >= self._cap and not self.done:
                raise PluginError(f"{self._name}: episode {self._inner.episode_id!r} is not done after "
                                  f"{self._decisions} decisions ({self._flag}, {self._cap}); end each episode "
                                  "within its horizon, or raise --plugin-max-steps.")
        return result

    def expert_action(self, kind: str | None = None):
        # A kind of the episode's own (``help_kinds``) is asked by name; the one expert with no argument, as ever.
        action = self._call("expert_action") if kind is None else limited_call(
            self._name, lambda: f"episode {self._inner.episode_id!r} expert_action(kind={kind!r})", self._timeout,
            lambda: self._inner.expert_action(kind=kind))
        if not isinstance(getattr(action, "text", None), str):
            raise PluginError(f"{self._name}: episode {self._inner.episode_id!r} expert_action() returned "
                              f"{type(action).__name__}, expected an agile.protocol.Action with a text.")
        return action

    def success(self) -> float:
        return check_success(self._name, self._inner.episode_id, self._call("success"))

    def clone(self) -> LimitedEpisode:
        copy = LimitedEpisode(self._call("clone"), self._name, self._timeout)
        copy.__dict__.update(_decisions=self._decisions, _cap=self._cap, _flag=self._flag)
        return copy


class LimitedAgent:
    """A plug-in agent whose ``act`` is timed and checked (see the module docstring); attributes pass through."""

    def __init__(self, agent, name: str, timeout_s: float | None = DEFAULT_TIMEOUT_S):
        self.__dict__.update(_inner=agent, _name=name, _timeout=timeout_s)

    def __getattr__(self, attribute):
        return getattr(self._inner, attribute)

    def __setattr__(self, attribute, value):
        setattr(self._inner, attribute, value)

    def act(self, observations, episodes=None):
        what = f"act() on {len(observations)} observation(s)"
        if episodes is None:
            return limited_call(self._name, what, self._timeout, self._inner.act, observations)
        return limited_call(self._name, what, self._timeout, lambda: self._inner.act(observations, episodes=episodes))
