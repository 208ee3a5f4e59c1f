"""Seeds and uniform draws that are pure functions of printable parts.

    from agile.seeding import derive_seed, stable_uniform
    seed = derive_seed(master_seed, episode_index)          # one episode's seed
    u = stable_uniform(seed, episode_id, step, "explore")   # one draw in [0, 1)

Every random decision of an episode (its group, its questions, an agent's draw, an exploration
coin) is keyed by what identifies it, not by a shared generator's position, so results do not
depend on batching, on the order episodes run in, or on the machine.
"""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from printable parts (identical on every machine and Python run)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def stable_uniform(*parts: Any) -> float:
    """A uniform draw in [0, 1) that is a pure function of ``parts``."""
    return derive_seed(*parts) / 2.0**63
