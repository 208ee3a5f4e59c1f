"""The AGILE function tokens: their names, who runs them, and how an LLM turn is parsed.

The LLM is a policy in a token-level MDP. Its actions are lines of text that start with a
function name; the executor (``agile.executor.executor``) runs the function and appends its output to the
context. Some functions are run by the executor on its own, as in AGILE:

- ``[GetQuestion]`` at the start of a session, then ``[RetrieveMemory]``;
- ``[SubmitAnswer]`` and ``[UpdateMemory]`` once an answer is known;
- ``[ClearContext]`` when the context must be emptied (a new session, or too many tokens).

The LLM chooses among ``[SeekAdvice]``, ``[SearchProduct] <SQL>`` and ``[PredictAnswer] <answer>``
and, after advice, writes ``[Reflection] <knowledge>`` (or ``[Reflection] no information``).
One LLM turn is one line: the function name, a space, the argument, a newline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GET_QUESTION = "[GetQuestion]"
RETRIEVE_MEMORY = "[RetrieveMemory]"
SEEK_ADVICE = "[SeekAdvice]"
REFLECTION = "[Reflection]"
UPDATE_MEMORY = "[UpdateMemory]"
SEARCH_PRODUCT = "[SearchProduct]"
PREDICT_ANSWER = "[PredictAnswer]"
SUBMIT_ANSWER = "[SubmitAnswer]"
CLEAR_CONTEXT = "[ClearContext]"

EXECUTOR_FUNCTIONS = (GET_QUESTION, RETRIEVE_MEMORY, UPDATE_MEMORY, SUBMIT_ANSWER, CLEAR_CONTEXT)
"""Run by the executor itself; the LLM never has to emit them."""
LLM_FUNCTIONS = (SEEK_ADVICE, SEARCH_PRODUCT, PREDICT_ANSWER, REFLECTION)
"""Chosen by the LLM; their tokens are the actions that SFT and PPO train."""
ALL_FUNCTIONS = EXECUTOR_FUNCTIONS + LLM_FUNCTIONS

# Markers of what the executor appends (tool output); they are context, never actions.
ADVICE = "[Advice]"
SEARCH_RESULT = "[SearchResult]"
ERROR = "[Error]"

_CALL = re.compile(r"\s*(\[[A-Za-z]+\])[ \t]*(.*)", re.DOTALL)


@dataclass(frozen=True)
class FunctionCall:
    """A parsed LLM turn: the function name (with brackets) and the rest of the line."""

    name: str
    argument: str = ""


def parse_call(text: str) -> FunctionCall | None:
    """Parse one LLM turn; None when it does not start with a known function name.

    Only the first non-empty line counts (a turn ends at the newline after it); surrounding
    spaces are dropped.
    """
    line = next((ln for ln in (text or "").split("\n") if ln.strip()), "")
    match = _CALL.match(line)
    if not match or match.group(1) not in ALL_FUNCTIONS:
        return None
    return FunctionCall(match.group(1), match.group(2).strip())


def format_call(name: str, argument: str = "") -> str:
    """The text of one turn, newline included (what the gold policy writes and SFT learns)."""
    if name not in ALL_FUNCTIONS:
        raise ValueError(f"unknown function {name!r}; expected one of {', '.join(ALL_FUNCTIONS)}")
    argument = " ".join(str(argument).split())  # a turn is one line
    return f"{name} {argument}\n" if argument else f"{name}\n"


def current_question(text: str) -> str:
    """The current session's question in a context or state text: after its last ``[GetQuestion]``, on that
    line ("" before any question)."""
    if GET_QUESTION not in text:
        return ""
    return text.rsplit(GET_QUESTION, 1)[-1].split("\n", 1)[0].strip()
