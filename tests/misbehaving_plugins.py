"""Plug-ins that misbehave in the ways a user's own code can: exit, interrupt, hang, never end, return the wrong thing
(a NaN or text success, a negative step, bytes as state, an int or empty id, a NaN or 0 horizon, None where an
episode, a result, an action or a list is due).

Copied as a module into a temporary folder by ``tests/helper/data/test_plugin_limits.py`` and
``benchmarks/trust/bad_inputs.py`` (with ``benchmarks/trust/hostile.py``), which load these factories by name
(``misbehaving:exits``, ...)."""
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


# Wrong returns of an episode or a factory (the bad-inputs suite's plug-in family).
class NanSuccess(ChainEpisode):
    def success(self):
        return float("nan")


nan_success = episodes_as(NanSuccess)


class TextSuccess(ChainEpisode):
    def success(self):
        return "yes"


text_success = episodes_as(TextSuccess)


class NegativeStep(ChainEpisode):
    def observe(self):
        observation = super().observe()
        return type(observation)(**{**observation.__dict__, "step": observation.step - 1})


negative_step = episodes_as(NegativeStep)


class HugeState(ChainEpisode):
    def observe(self):
        observation = super().observe()
        return type(observation)(**{**observation.__dict__, "state_text": observation.state_text + " x" * 10_000_000})


huge_state = episodes_as(HugeState)


class BytesState(ChainEpisode):
    def observe(self):
        observation = super().observe()
        return type(observation)(**{**observation.__dict__, "state_text": observation.state_text.encode()})


bytes_state = episodes_as(BytesState)


class TextFeature(ChainEpisode):
    def observe(self):
        observation = super().observe()
        return type(observation)(**{**observation.__dict__, "features": {"multiply": "high"}})


text_feature = episodes_as(TextFeature)


def zero_horizon(split, count, seed):
    episodes = make_episodes(split, count, seed)
    for episode in episodes:
        episode.horizon = 0
    return episodes


def nan_horizon(split, count, seed):
    episodes = make_episodes(split, count, seed)
    for episode in episodes:
        episode.horizon = float("nan")
    return episodes


def int_ids(split, count, seed):
    episodes = make_episodes(split, count, seed)
    for i, episode in enumerate(episodes):
        episode.episode_id = 1000 + i
    return episodes


def empty_ids(split, count, seed):
    episodes = make_episodes(split, count, seed)
    for i, episode in enumerate(episodes):
        episode.episode_id = ""
    return episodes


def returns_none(split, count, seed):
    return None


def returns_fewer(split, count, seed):
    return make_episodes(split, count, seed)[:-1]


def returns_strings(split, count, seed):
    return ["episode"] * count


def returns_generator(split, count, seed):
    return (episode for episode in make_episodes(split, count, seed))


def takes_no_arguments():
    return make_episodes("train", 4, 0)


not_callable = 5


class NoneStep(ChainEpisode):
    def step(self, action):
        super().step(action)
        return None


none_step = episodes_as(NoneStep)


class NoneExpert(ChainEpisode):
    def expert_action(self):
        return None


none_expert = episodes_as(NoneExpert)


class ActsNone(ChainAgent):
    def act(self, observations):
        return None


def acts_none():
    return ActsNone()


class ActsNumbers(ChainAgent):
    def act(self, observations):
        return [type(action)(text=7, actor=action.actor) for action in super().act(observations)]


def acts_numbers():
    return ActsNumbers()


class ActsExits(ChainAgent):
    def act(self, observations):
        sys.exit(3)


def acts_exits():
    return ActsExits()


class ActsInterrupts(ChainAgent):
    def act(self, observations):
        raise KeyboardInterrupt


def acts_interrupts():
    return ActsInterrupts()


def agent_needs_arguments(model_name):
    return ChainAgent()
