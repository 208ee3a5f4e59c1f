"""The helper gate as an HTTP service: one call per decision point, budgets kept by the server.

    helpgate serve-gate --helper runs/demo/helper --port 8100 --budget 2

    POST /v1/gate                      {"episode_id": "e1", "step": 0, "state_text": "...",
                                        "features": {"type_fact_qa": 1.0}, "proposal": "[PredictAnswer] yes"}
                                    -> {"intervene": false, "budget_left": 2, "score": 0.31, "horizon": 4}
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

Horizon: the episode's number of decision points comes from the helper (``horizon`` in its
``helper.json``, the longest training episode). A request may send its own ``horizon`` (episodes of
varying length) up to that one; a longer one is refused (the helper never saw such episodes), and
every answer names the ``horizon`` it decided with. A helper folder that records no horizon (an
older one) needs ``--horizon``; one that records it refuses a different ``--horizon``.

Features: every request must carry exactly the observation features the helper reads (the
``f_<key>`` inputs of its classifier and fallback, ``/health`` lists them): a missing or unknown
key is a 422 naming it, on every request (an empty ``features`` would otherwise be imputed and
decide, and spend budget, on nothing).

PRM: a helper whose recorded PRM is missing, does not load, or is not the one it was distilled
with does not start, unless ``--allow-fallback``: then it decides on its fallback classifier and
``/health`` says ``"status": "degraded"`` with the reason.

Limits: a body over ``--max-body-bytes`` (default 1 MiB) is a 413 before it is parsed
(``helper.serve.guard``); text that is not UTF-8 (a lone surrogate) a 422 naming the field.

Retries: the gate is idempotent per ``(episode_id, step)``: a request repeated (a client's retry after
a timeout) gets the first answer again and spends nothing (the same step asked with another body is a
further decision point at that step, decided anew). Types are strict: ``step`` a JSON integer, each feature a JSON number (not text, not a boolean).

Errors: an invalid body is a 422 naming the field, an unknown episode at ``/end`` or
``/actions`` a 404, and more live episodes than the gate can track a 503 (end your episodes).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agile.budget import BudgetedGate
from agile.protocol import Action, Observation
from helper.serve.guard import DEFAULT_MAX_BODY, BodyLimit, utf8_text

Text = Annotated[str, AfterValidator(utf8_text)]
# Strict: a JSON number only (an integer is one), never text or a boolean; JSON's NaN would be imputed as a
# missing feature.
Number = Annotated[float, Field(allow_inf_nan=False, strict=True)]


@dataclass
class ServeGateConfig:
    """Serve a helper folder as an HTTP gate with per-episode budgets."""

    helper: str
    """Helper folder written by helpgate distill."""
    budget: int | None = None
    """Interventions per episode (default: the largest budget the helper was trained for)."""
    horizon: int | None = None
    """Decision points per episode, for an older helper folder that does not record its own (helper.json)."""
    allow_fallback: bool = False
    """Serve a helper whose PRM is missing, broken or not its own on its fallback classifier (/health: degraded)."""
    max_body_bytes: int = DEFAULT_MAX_BODY
    """Largest request body in bytes; a larger one is answered 413 without being parsed."""
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
    """One decision point. Types are strict: a step is a JSON integer (not "0", not true), a feature a JSON
    number (not "14", not true); anything else is a 422 naming the field."""

    model_config = ConfigDict(extra="forbid")
    episode_id: Text = Field(min_length=1)
    step: int = Field(ge=0, strict=True)
    state_text: Text
    features: dict[Text, Number] = Field(default_factory=dict)
    proposal: Text | None = None
    horizon: int | None = Field(default=None, ge=1, strict=True)
    env: Text = ""
    task_id: Text = ""


class ActionReport(BaseModel):
    """What was played at a step (the PRM of the helper reads it at later steps)."""

    model_config = ConfigDict(extra="forbid")
    step: int = Field(ge=0, strict=True)
    action_text: Text
    state_text: Text = ""


class ServedGate(BudgetedGate):
    """Holds the per-episode budgets in front of any gate; ``decide`` also returns the gate's score.

    Idempotent per ``(episode_id, step)`` and request body: a decision point asked again (a client's retry after a
    timeout) gets the answer it was given the first time, and spends nothing (no budget, no PRM
    pass, no action recorded twice); the decisions of one episode are made one at a time, so a
    retry racing its original waits for it. The answers are kept until the episode ends.

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
        self._answers: dict[str, dict[tuple, tuple[str | None, tuple]]] = {}  # episode -> (step, request) -> answer
        self._locks: dict[str, threading.Lock] = {}  # one per open episode

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

    def decide(self, observation: Observation, proposal=None, request: str | None = None
               ) -> tuple[bool, int, float | None]:
        """``(intervene, budget left after it, score)`` for one decision point (``proposal``: the
        base agent's proposal, read by a gate that decides after it; a proposal it keeps is
        recorded as the step's action). The first answer for ``(episode_id, step)`` is the answer
        to every repeat; ``request`` (a fingerprint of the request body) tells a repeat from a
        further decision point at the same step (an environment that decides several times per
        step, as ProductQA's executor does within one question): another body is decided anew."""
        episode = observation.episode_id
        key = (observation.step, request)
        with self._open_lock:
            self._open.add(episode)
            lock = self._locks.setdefault(episode, threading.Lock())
        with lock:
            first = self._answers.get(episode, {}).get(key)
            if first is not None:
                return first[1]
            self._scores.value = None
            granted = self.should_intervene(observation, proposal=proposal)
            answer = (granted, self.budget - self.used(episode), self._scores.value)
            if proposal is not None and not granted:
                self.record_action(observation, proposal.text)  # the proposal is what will be played
            with self._open_lock:
                self._answers.setdefault(episode, {})[key] = (request, answer)
            return answer

    def is_open(self, episode_id: str) -> bool:
        with self._open_lock:
            return episode_id in self._open

    def end_episode(self, episode_id: str) -> None:
        with self._open_lock:
            self._open.discard(episode_id)
            self._answers.pop(episode_id, None)
            self._locks.pop(episode_id, None)
        super().end_episode(episode_id)
        if hasattr(self.gate, "end_episode"):
            self.gate.end_episode(episode_id)

    def record_action(self, observation: Observation, action_text: str) -> None:
        if hasattr(self.gate, "record_action"):
            self.gate.record_action(observation, action_text)


def create_app(gate: ServedGate, horizon: int, features: list[str] | None = None, degraded: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY):
    """The FastAPI application around ``gate`` (a ``ServedGate``), wrapped in the body limit.

    ``horizon``: the helper's (a request's own may be shorter, never longer); ``features``: the
    observation feature keys every request must carry exactly (None: not checked); ``degraded``:
    why the helper decides on its fallback although it has a PRM (reported by ``/health``)."""
    from fastapi import FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title="helpgate gate server")
    wanted = None if features is None else set(features)

    @app.exception_handler(RequestValidationError)
    def invalid(request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's 422 without the rejected input: echoing a lone surrogate back cannot be encoded (a 500).
        return JSONResponse({"detail": [{k: e[k] for k in ("loc", "msg", "type") if k in e} for e in exc.errors()]},
                            status_code=422)

    def observation(episode_id: str, step: int, state_text: str, features=None, request_horizon=None,
                    env: str = "", task_id: str = "") -> Observation:
        h = request_horizon or horizon
        if step >= h:
            raise HTTPException(422, f"step={step} is not below the episode's horizon {h}; send the episode's "
                                     f"'horizon' with the request (at most the helper's {horizon}).")
        return Observation(episode_id, env, task_id, step, state_text, h, dict(features or {}))

    def check(body: GateRequest) -> None:
        if body.horizon is not None and body.horizon > horizon:
            raise HTTPException(422, f"horizon={body.horizon}: this helper was trained on episodes of at most "
                                     f"{horizon} decision points (helper.json horizon); its decisions on longer "
                                     "ones would extrapolate. Distill a helper on such episodes.")
        if wanted is None:
            return
        missing, unknown = sorted(wanted - set(body.features)), sorted(set(body.features) - wanted)
        if missing or unknown:
            said = "; ".join(f"{kind} {keys}" for kind, keys in (("missing", missing), ("unknown", unknown)) if keys)
            raise HTTPException(422, f"features: {said}; this helper reads exactly {sorted(wanted)} "
                                     "(helper.json feature_names, also on /health).")

    promise = served_guarantee(gate)

    @app.get("/health")
    def health() -> dict:
        out = {"status": "degraded" if degraded else "ok", "gate": gate.name, "budget": gate.budget,
               "decide_after": gate.decide_after, "horizon": horizon, "features": features, "guarantee": promise}
        return out | ({"reason": degraded} if degraded else {})

    # Plain defs: FastAPI runs them in worker threads, so a slow decision (a PRM forward pass)
    # does not hold up the others; the budget itself is guarded by the gate's lock.
    @app.post("/v1/gate")
    def decide(body: GateRequest) -> dict:
        check(body)
        obs = observation(body.episode_id, body.step, body.state_text, body.features, body.horizon,
                          body.env, body.task_id)
        if gate.decide_after == "proposal" and body.proposal is None:
            raise HTTPException(422, "this helper decides after the base agent's proposal (decide_after="
                                     "'proposal'): send the agent's proposed action as 'proposal'.")
        proposal = None if body.proposal is None else Action(body.proposal)
        # What the request asks, whatever the order of its keys: a retry repeats it.
        request = hashlib.sha256(json.dumps(body.model_dump(), sort_keys=True).encode()).hexdigest()
        try:
            intervene, left, score = gate.decide(obs, proposal, request)
        except RuntimeError as error:  # e.g. more live episodes than the gate tracks
            raise HTTPException(503, str(error)) from error
        except ValueError as error:  # the request lacks what the helper reads (e.g. all its features)
            raise HTTPException(422, str(error)) from error
        return {"intervene": intervene, "budget_left": left, "score": score, "horizon": obs.horizon}

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

    return BodyLimit(app, max_body_bytes)


def served_guarantee(gate: ServedGate) -> dict | None:
    """What ``/health`` says of the helper's ``guarantee.json`` (None: it has none): the promise, and whether it
    covers this server (it does at the certified budget only, and for a priced member only with its table: a gate
    from ``helper.gate.priced_family.certified_gate`` names its ``price``)."""
    record = getattr(gate.gate, "guarantee", None)
    if not record:
        return None
    member = record["member"]
    price = member.get("price") if member.get("family", "budget") == "priced" else None
    shown = {"target": record["target"], "confidence": 1 - record["delta"], "eps": record["eps"],
             "delta": record["delta"], "n": record["n"], "budget": member["budget"], "success": member["success"],
             "interventions": member["interventions"], "data_fingerprint": record["data_fingerprint"]}
    if price is not None:
        shown["price"] = price
    shown["applies"] = gate.budget == member["budget"] and getattr(gate.gate, "price", None) == price
    return shown


def served_features(helper) -> list[str]:
    """The observation feature keys a helper's decisions read: its classifier's (features backend)
    and its fallback's (taken by the features and table backends when there is no PRM score)."""
    from helper.gate.identity import read_features

    names = list(helper.classifier.feature_names) if helper.backend == "features" else []
    if helper.backend != "text" and helper.fallback is not None:
        names += helper.fallback.feature_names
    return sorted(set(read_features(names)))


def load_helper(config: ServeGateConfig):
    """``(helper, horizon, degraded reason)``, refusing what cannot be served as trained."""
    from helper.gate.gate import HelperGate
    from helper.gate.identity import UntrustedPrm

    common = dict(budget=config.budget, backend=config.backend, device=config.device)
    degraded = None
    try:
        helper = HelperGate.load(config.helper, allow_fallback=False, **common)
    except UntrustedPrm as error:
        if not config.allow_fallback:
            raise ValueError(f"{error} To serve it on the fallback classifier anyway, pass --allow-fallback "
                             "(/health then reports degraded).") from error
        helper, degraded = HelperGate.load(config.helper, prm=False, **common), str(error)
    horizon = helper.horizon
    if horizon is None and config.horizon is None:
        raise ValueError(f"{config.helper}/helper.json records no horizon (an older helper folder): pass --horizon, "
                         "the decision points per episode it was trained on, or re-run helpgate distill.")
    if horizon is not None and config.horizon is not None and config.horizon != horizon:
        raise ValueError(f"--horizon {config.horizon}: the helper was trained on horizon {horizon} (helper.json "
                         "horizon); leave --horizon out (requests may send a shorter one of their own).")
    return helper, horizon or config.horizon, degraded


def run(config: ServeGateConfig) -> None:
    """Load the helper folder and serve it until interrupted."""
    import uvicorn

    if not 0 < config.port < 65536:
        raise ValueError(f"port={config.port}: choose a TCP port in 1..65535.")
    if config.horizon is not None and config.horizon < 1:
        raise ValueError(f"horizon={config.horizon}: must be >= 1.")
    if config.max_body_bytes < 1:
        raise ValueError(f"max_body_bytes={config.max_body_bytes}: must be at least 1 byte.")
    helper, horizon, degraded = load_helper(config)
    gate = ServedGate(helper, config.budget)
    state = f"DEGRADED ({degraded})" if degraded else "ok"
    print(f"serving {helper!r} on http://{config.host}:{config.port}/v1/gate (budget {gate.budget} per episode, "
          f"horizon {horizon}); status {state}", flush=True)
    app = create_app(gate, horizon, served_features(helper), degraded, config.max_body_bytes)
    uvicorn.run(app, host=config.host, port=config.port, log_level=config.log_level)
