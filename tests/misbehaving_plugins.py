"""Plug-ins that misbehave in the ways a user's own code can: exit, interrupt, hang, never end, return the wrong thing.

Copied as a module into a temporary folder by ``tests/helper/data/test_plugin_limits.py`` and
``benchmarks/trust/bad_inputs.py``, which load these factories by name (``misbehaving:exits``, ...)."""
import os
import signal
import sys
import time

from examples.arith_chain import ChainAgent, ChainEpisode, make_episodes


def exits(split, count, seed):
    sys.exit(0)


def interrupts(split, count, seed):
    raise KeyboardInterrupt


def presses_ctrl_c(split, count, seed):
    os.kill(os.getpid(), signal.SIGINT)  # what the user's Ctrl-C does
    time.sleep(30)


class NoOutcome(ChainEpisode):
    def success(self):
        return None


def episodes_as(cls):
    """An env factory whose chain episodes behave as ``cls``."""
    def factory(split, count, seed):
        episodes = make_episodes(split, count, seed)
        for episode in episodes:
            episode.__class__ = cls
        return episodes
    return factory


no_outcome = episodes_as(NoOutcome)


class Endless(ChainEpisode):
    @property
    def done(self):
        return False

    def observe(self):
        self.position = min(self.position, len(self.operations) - 1)
        return super().observe()

    def step(self, action):
        result = super().step(action)
        self.position = min(self.position, len(self.operations) - 1)
        return result


endless = episodes_as(Endless)


def ids_by_count(split, count, seed):
    """Unique ids within a call, but episode i's id depends on count: batches collide."""
    episodes = make_episodes(split, count, seed)
    for i, episode in enumerate(episodes):
        episode.episode_id = f"chain-{count - 1 - i}"
    return episodes


class Sleepy(ChainAgent):
    def act(self, observations):
        try:
            time.sleep(60)
        except Exception:  # a plug-in that swallows what it can: the limit still holds
            pass
        return super().act(observations)


def sleepy():
    return Sleepy()


def agent_class():
    return ChainAgent
