"""The helper gate as an HTTP service: one call per decision point, budgets kept by the server.

    helpgate serve-gate --helper runs/demo/helper --port 8100 --budget 2

    POST /v1/gate                      {"episode_id": "e1", "step": 0, "state_text": "...",
                                        "features": {"type_fact_qa": 1.0}, "proposal": "[PredictAnswer] yes"}
                                    -> {"intervene": false, "budget_left": 2, "score": 0.31}
    POST /v1/episodes/e1/actions       {"step": 0, "action_text": "..."}   (optional, see below)
    POST /v1/episodes/e1/end        -> {"episode_id": "e1", "used": 1}
    GET  /health

The server holds each episode's budget: per ``episode_id`` it grants at most ``--budget``
interventions, whatever the number of concurrent requests, until ``/end`` frees the id.
``budget_left`` is what is left after this decision; ``score`` is the gate's probability of
intervening (null when no decision was needed: the budget was already spent). The helper's PRM
reads earlier actions: a ``proposal`` that the gate lets through is recorded as the action of
that step, and the action played on an intervention can be sent to ``/actions``. A helper that
decides after the proposal (its PRM was trained with ``--tag-after proposal``; ``/health`` says
``decide_after``) reads the ``proposal`` to decide, and requires it.

Errors: an invalid body is a 422 naming the field, an unknown episode at ``/end`` or
``/actions`` a 404, and more live episodes than the gate can track a 503 (end your episodes).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agile.protocol import Action, Observation
from helper.budget import BudgetedGate


@dataclass
class ServeGateConfig:
    """Serve a helper folder as an HTTP gate with per-episode budgets."""

    helper: str
    """Helper folder written by helpgate distill."""
    budget: int | None = None
    """Interventions per episode (default: the largest budget the helper was trained for)."""
    horizon: int = 8
    """Decision points per episode, for requests that do not give theirs."""
    backend: Literal["features", "text", "table"] | None = None
    """Override the helper's saved backend (table follows the solved policy table)."""
    device: str | None = None
    """Torch device of the PRM / text classifier (default: GPU when there is one)."""
    host: str = "127.0.0.1"
    """Interface to listen on (0.0.0.0 exposes the gate to the network)."""
    port: int = 8100
    """TCP port to listen on."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "warning"
    """uvicorn's log level."""


class GateRequest(BaseModel):
    """One decision point."""

    model_config = ConfigDict(extra="forbid")
    episode_id: str = Field(min_length=1)
    step: int = Field(ge=0)
    state_text: str
    features: dict[str, float] = Field(default_factory=dict)
    proposal: str | None = None
    horizon: int | None = Field(default=None, ge=1)
    env: str = ""
    task_id: str = ""


class ActionReport(BaseModel):
    """What was played at a step (the PRM of the helper reads it at later steps)."""

    model_config = ConfigDict(extra="forbid")
    step: int = Field(ge=0)
    action_text: str
    state_text: str = ""


class ServedGate(BudgetedGate):
    """Holds the per-episode budgets in front of any gate; ``decide`` also returns the gate's score.

    The wrapped gate is asked ``intervene_probability`` (a ``HelperGate``), else ``wants`` (any
    ``BudgetedGate``: their own count is never spent), else ``should_intervene`` (any
    ``agile.protocol.Gate``), so there is exactly one budget per episode: this one.
    """

    def __init__(self, gate, budget: int | None = None):
        budget = getattr(gate, "budget", None) if budget is None else budget
        if budget is None:
            raise ValueError("serve-gate needs a per-episode budget: pass --budget C.")
        super().__init__(budget)
        self.gate = gate
        self.decide_after = getattr(gate, "decide_after", "state")
        self.name = f"served:{getattr(gate, 'name', type(gate).__name__)}"
        self._scores = threading.local()  # the score of the decision this thread is making
        self._open: set[str] = set()
        self._open_lock = threading.Lock()

    def wants(self, observation: Observation, budget_left: int, proposal=None) -> bool:
        reads = {"proposal": proposal} if self.decide_after == "proposal" else {}
        if hasattr(self.gate, "intervene_probability"):
            p = float(self.gate.intervene_probability(observation, budget_left, **reads))
            self._scores.value = p
            return p >= getattr(self.gate, "threshold", 0.5)
        if hasattr(self.gate, "wants"):
            wanted = bool(self.gate.wants(observation, budget_left, **reads))
        else:  # any agile.protocol.Gate: its own answer, given what this server has left
            wanted = bool(self.gate.should_intervene(observation, budget_left, **reads))
        self._scores.value = float(wanted)
        return wanted

    def decide(self, observation: Observation, proposal=None) -> tuple[bool, int, float | None]:
        """``(intervene, budget left after it, score)`` for one decision point (``proposal``: the
        base agent's proposal, read by a gate that decides after it)."""
        with self._open_lock:
            self._open.add(observation.episode_id)
        self._scores.value = None
        granted = self.should_intervene(observation, proposal=proposal)
        return granted, self.budget - self.used(observation.episode_id), self._scores.value

    def is_open(self, episode_id: str) -> bool:
        with self._open_lock:
            return episode_id in self._open

    def end_episode(self, episode_id: str) -> None:
        with self._open_lock:
            self._open.discard(episode_id)
        super().end_episode(episode_id)
        if hasattr(self.gate, "end_episode"):
            self.gate.end_episode(episode_id)

    def record_action(self, observation: Observation, action_text: str) -> None:
        if hasattr(self.gate, "record_action"):
            self.gate.record_action(observation, action_text)


def create_app(gate: ServedGate, horizon: int = 8):
    """The FastAPI application around ``gate`` (a ``ServedGate``)."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="helpgate gate server")

    def observation(episode_id: str, step: int, state_text: str, features=None, request_horizon=None,
                    env: str = "", task_id: str = "") -> Observation:
        h = request_horizon or horizon
        if step >= h:
            raise HTTPException(422, f"step={step} is not below the episode's horizon {h}; send 'horizon' "
                                     "with the request (or start the server with a larger --horizon).")
        return Observation(episode_id, env, task_id, step, state_text, h, dict(features or {}))

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "gate": gate.name, "budget": gate.budget, "decide_after": gate.decide_after}

    # Plain defs: FastAPI runs them in worker threads, so a slow decision (a PRM forward pass)
    # does not hold up the others; the budget itself is guarded by the gate's lock.
    @app.post("/v1/gate")
    def decide(body: GateRequest) -> dict:
        obs = observation(body.episode_id, body.step, body.state_text, body.features, body.horizon,
                          body.env, body.task_id)
        if gate.decide_after == "proposal" and body.proposal is None:
            raise HTTPException(422, "this helper decides after the base agent's proposal (decide_after="
                                     "'proposal'): send the agent's proposed action as 'proposal'.")
        proposal = None if body.proposal is None else Action(body.proposal)
        try:
            intervene, left, score = gate.decide(obs, proposal)
        except RuntimeError as error:  # e.g. more live episodes than the gate tracks
            raise HTTPException(503, str(error)) from error
        except ValueError as error:  # the request lacks what the helper reads (e.g. all its features)
            raise HTTPException(422, str(error)) from error
        if body.proposal is not None and not intervene:
            gate.record_action(obs, body.proposal)  # the proposal is what will be played
        return {"intervene": intervene, "budget_left": left, "score": score}

    @app.post("/v1/episodes/{episode_id}/actions")
    def record(episode_id: str, body: ActionReport) -> dict:
        if not gate.is_open(episode_id):
            raise HTTPException(404, f"episode {episode_id!r} is not open: ask /v1/gate for it first.")
        gate.record_action(observation(episode_id, body.step, body.state_text, request_horizon=body.step + 1),
                           body.action_text)
        return {"episode_id": episode_id, "step": body.step}

    @app.post("/v1/episodes/{episode_id}/end")
    def end(episode_id: str) -> dict:
        if not gate.is_open(episode_id):
            raise HTTPException(404, f"episode {episode_id!r} is not open (never asked, or already ended).")
        used = gate.used(episode_id)
        gate.end_episode(episode_id)
        return {"episode_id": episode_id, "used": used}

    return app


def run(config: ServeGateConfig) -> None:
    """Load the helper folder and serve it until interrupted."""
    import uvicorn

    from helper.gate import HelperGate

    if not 0 < config.port < 65536:
        raise ValueError(f"port={config.port}: choose a TCP port in 1..65535.")
    if config.horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {config.horizon}.")
    helper = HelperGate.load(config.helper, budget=config.budget, backend=config.backend, device=config.device)
    gate = ServedGate(helper, config.budget)
    print(f"serving {helper!r} on http://{config.host}:{config.port}/v1/gate (budget {gate.budget} per episode)",
          flush=True)
    uvicorn.run(create_app(gate, config.horizon), host=config.host, port=config.port, log_level=config.log_level)
