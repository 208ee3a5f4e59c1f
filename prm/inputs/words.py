"""The state text's words as a verifier's only inputs: a lexical verifier for environments that say the risk in
words (``prm train --word-features``, one of the pipeline's verifier candidates on a plug-in environment).

With a few dozen training episodes a frozen LLM's hidden state can miss a risk the text names outright: on the
rapids (``examples/rapids.py``, 64 episodes) the verifier the training folds chose ranked held-out steps at 0.37 to
0.69 out of fold over 8 seeds, the words head at 0.79 and 0.70 on seeds 0 and 2 (``benchmarks/RESULTS.md``,
rapids). So the training folds may choose a head that reads words alone.

- The vocabulary (``word_keys``) is fixed from the training rows' state texts, without their labels: lower-case
  runs of letters that occur in at least ``MIN_SHARE`` and at most ``1 - MIN_SHARE`` of the rows (a word in
  every state says nothing), the ``MAX_WORDS`` most frequent, ties by the word.
- A state's inputs (``word_inputs``) are ``word:<w>`` = 1 for each vocabulary word it holds; a word it lacks is
  absent (0, with its missing flag: ``prm.inputs.signals``). The same function reads a logged row and a live
  observation (``prm.scoring.scorer``), so training and the gate agree.
- The head reads nothing else (no hidden state, no unpenalised signal), and every word column is penalised:
  the L2 penalty, chosen by cross-validation, is what keeps a few hundred rows from fitting each word's noise.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

import polars as pl

WORD_PREFIX = "word:"
MIN_SHARE = 0.02
MAX_WORDS = 256
_WORD = re.compile(r"[a-z]+")


def words(text: str) -> set[str]:
    """The distinct lower-case words of ``text`` (runs of letters)."""
    return set(_WORD.findall(str(text).lower()))


def word_keys(texts: Iterable[str]) -> list[str]:
    """The ``word:`` keys of the vocabulary of ``texts`` (module docstring), sorted."""
    texts = list(texts)
    counts = Counter(w for text in texts for w in words(text))
    low, high = MIN_SHARE * len(texts), (1.0 - MIN_SHARE) * len(texts)
    kept = [w for w, n in counts.items() if low <= n <= high and n < len(texts)]
    kept = sorted(kept, key=lambda w: (-counts[w], w))[:MAX_WORDS]
    return sorted(WORD_PREFIX + w for w in kept)


def word_inputs(text: str, keys: Iterable[str] | None = None) -> dict[str, float]:
    """``word:<w>`` = 1 for each word of ``text`` (among ``keys`` when given)."""
    found = {WORD_PREFIX + w: 1.0 for w in words(text)}
    return found if keys is None else {k: found[k] for k in keys if k in found}


def frame_word_features(frame: pl.DataFrame) -> list[dict[str, float]]:
    """Every row's ``word:`` inputs, in row order (needs ``state_text``)."""
    if "state_text" not in frame.columns:
        raise ValueError("word features read the column state_text; the data lacks it.")
    return [word_inputs(text) for text in frame["state_text"].to_list()]


def has_word_keys(keys: Mapping | list | tuple | None) -> bool:
    return any(str(k).startswith(WORD_PREFIX) for k in (keys or ()))


def penalised_width(keys: Iterable[str] | None) -> int:
    """Signal columns of ``keys`` the L2 penalty covers: a word's value and missing flag."""
    return 2 * sum(1 for k in (keys or ()) if str(k).startswith(WORD_PREFIX))
