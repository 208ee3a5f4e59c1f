"""Drive executors in lockstep through a policy, keeping each turn and its signals (the decoding tests' loop)."""


def play_turns(policy, runs):
    """Every turn ``policy`` writes until each executor of ``runs`` is done: ``(ids, signals)`` in round order."""
    turns = []
    while live := [e for e in runs if not e.done]:
        out = policy(live)
        turns += [(tuple(t), s) for t, s in zip(out, policy.last_signals)]
        for executor, turn in zip(live, out):
            executor.act(turn)
    return turns
