"""serve-gate is idempotent per (episode_id, step) and strict about types, on a real server on 127.0.0.1
(uvicorn in a thread, stopped when the test ends): a retried decision point gets its first answer and
spends nothing, from many threads at once; a step or feature of the wrong JSON type is a 422 naming it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from test_serve import thread_server

from agile.budget import BudgetedGate
from helper.serve.gate_server import ServedGate, create_app


class CountingGate(BudgetedGate):
    """Wants every decision; counts how often it was asked (a repeat must not ask it)."""

    def __init__(self):
        super().__init__(budget=None)
        self.asked = 0
        self._lock = threading.Lock()

    def wants(self, observation, budget_left):
        with self._lock:
            self.asked += 1
        return True


@pytest.fixture()
def served():
    inner = CountingGate()
    gate = ServedGate(inner, budget=2)
    with thread_server(create_app(gate, horizon=4, features=["x"])) as url:
        yield url, gate, inner


def ask(url: str, **changes) -> httpx.Response:
    body = {"episode_id": "e", "step": 0, "state_text": "s", "features": {"x": 1.0}} | changes
    return httpx.post(f"{url}/v1/gate", json=body, timeout=30)


def test_retries_from_many_threads_get_the_first_answer_and_spend_nothing(served):
    url, gate, inner = served
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda _: ask(url), range(96)))
    assert {a.status_code for a in answers} == {200}
    assert all(a.json() == {"intervene": True, "budget_left": 1, "score": 1.0, "horizon": 4} for a in answers)
    assert gate.used("e") == 1 and inner.asked == 1  # one decision, one intervention, whatever the retries
    # The same body with its keys in another order is the same request.
    assert ask(url, features={"x": 1.0}, state_text="s").json()["budget_left"] == 1
    # The next step is a new decision point; its retries are free too.
    assert [ask(url, step=1).json()["budget_left"] for _ in range(3)] == [0, 0, 0]
    assert gate.used("e") == 2 and inner.asked == 2
    # Another body at a decided step is a further decision point there (budget spent: nothing to grant).
    other = ask(url, state_text="something else")
    assert other.status_code == 200 and other.json()["budget_left"] == 0 and inner.asked == 2
    # An ended episode's id starts afresh.
    assert httpx.post(f"{url}/v1/episodes/e/end").json() == {"episode_id": "e", "used": 2}
    assert ask(url).json()["budget_left"] == 1 and inner.asked == 3


@pytest.mark.parametrize("change, field", [
    ({"step": "0"}, "step"), ({"step": True}, "step"), ({"step": 1.0}, "step"),
    ({"features": {"x": "14"}}, "x"), ({"features": {"x": True}}, "x"), ({"horizon": "4"}, "horizon"),
])
def test_loose_types_are_422_naming_the_field(served, change, field):
    url, gate, inner = served
    answer = ask(url, **change)
    assert answer.status_code == 422, answer.text
    assert field in {str(part) for error in answer.json()["detail"] for part in error["loc"]}
    assert gate.used("e") == 0 and inner.asked == 0
    assert ask(url, features={"x": 14}).status_code == 200  # a JSON integer is a number
