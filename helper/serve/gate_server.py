"""The helper gate as an HTTP service: one call per decision point, budgets kept by the server.

    helpgate serve-gate --helper runs/demo/helper --port 8100 --budget 2

    POST /v1/gate                      {"episode_id": "e1", "step": 0, "state_text": "...",
                                        "features": {"type_fact_qa": 1.0}, "proposal": "[PredictAnswer] yes"}
                                    -> {"intervene": false, "budget_left": 2, "score": 0.31, "horizon": 4}
    POST /v1/episodes/e1/actions       {"step": 0, "action_text": "..."}   (optional, see below)
    POST /v1/episodes/e1/end        -> {"episode_id": "e1", "used": 1}
    GET  /health

The server holds each episode's budget: per ``episode_id`` it grants at most ``--budget``
interventions, whatever the number of concurrent requests, until ``/end`` frees the id. The budgets live in a
ledger (``helper.serve.ledger``: SQLite in WAL mode, ``--ledger``, default ``serve-ledger.sqlite`` in the helper
folder, so it moves with the helper whose episodes it counts and needs no global cache): a grant is committed before
it is answered, so a server killed at any moment (SIGKILL included) and restarted on the same ledger never grants
an episode more than its budget, and answers a retry as before. ``--ledger-sync full`` also survives a power loss,
at an fsync per decision. After a restart the PRM's memory of an episode's earlier states and actions is gone:
later decisions of a resumed episode read what the server saw since. An episode no request has touched for
``--idle-episode-s`` (default an hour) is ended as ``/end`` would (its id starts afresh).
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

A tiered helper (``helper.json`` names kinds, ``helper.gates.tiered_helper_gate``) answers which help to call:
``{"intervene": true, "kind": "stronger", "budget_left": 4.0, "calls_left": {"human": 1}, "score": 0.31, ...}``
(``kind`` null: the agent acts; ``budget_left`` in the unit of the prices, after this call; ``calls_left`` per
capped kind). ``--budget`` is then the cost per episode; its ledger (``helper.serve.tiered_ledger``) keeps each
episode's spend and each kind's calls, so a restart never grants more than the budget or a cap; ``/end`` answers
the cost the episode spent; ``/health`` lists the kinds, prices and caps.

Retries: the gate is idempotent per ``(episode_id, step)``: a request repeated (a client's retry after
a timeout) gets the first answer again and spends nothing (the same step asked with another body is a
further decision point at that step, decided anew). Types are strict: ``step`` a JSON integer, each feature a JSON number (not text, not a boolean).

Ids and steps: an ``episode_id`` is 1 to 256 letters, digits and ``_.:@+=~-`` (one URL path segment, so every
live episode can be ended); a step is below the episode's horizon, at ``/actions`` too (at most 10^9 anywhere).

Errors: an invalid body is a 422 naming the field, an unknown episode at ``/end`` or
``/actions`` a 404, and more live episodes than the gate can track a 503 (end your episodes). A port already in
use is refused in one line naming it (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agile.protocol import Action, Observation
from helper.serve.guard import DEFAULT_MAX_BODY, BodyLimit, utf8_text
from helper.serve.ledger import Ledger

Text = Annotated[str, AfterValidator(utf8_text)]
# Strict: a JSON number only (an integer is one), never text or a boolean; JSON's NaN would be imputed as a
# missing feature.
Number = Annotated[float, Field(allow_inf_nan=False, strict=True)]
EPISODE_ID = r"^[A-Za-z0-9_.:@+=~-]{1,256}$"
"""An episode id: 1 to 256 letters, digits and ``_.:@+=~-``, never ``.`` or ``..`` (``not_dots``): one path segment
as it is, so every live episode can be ended at ``/v1/episodes/{episode_id}/end``."""


def not_dots(value: str) -> str:
    """``value``, unless it is ``.`` or ``..`` (a client would resolve it out of the URL)."""
    if value in (".", ".."):
        raise ValueError("'.' and '..' are not episode ids (a URL path resolves them away); use letters or digits")
    return value


EpisodeId = Annotated[str, Field(pattern=EPISODE_ID), AfterValidator(not_dots)]
MAX_STEP = 10**9
"""A step or horizon past this is refused before the helper's horizon is read (the ledger stores 64-bit integers)."""
Step = Annotated[int, Field(ge=0, le=MAX_STEP, strict=True)]


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
    ledger: str | None = None
    """SQLite file of every live episode's used budget and answers, kept across restarts (default:
    serve-ledger.sqlite in the helper folder)."""
    ledger_sync: Literal["normal", "full"] = "normal"
    """normal: a grant survives the server's death (SIGKILL); full: also a power loss (an fsync per decision)."""
    idle_episode_s: float = 3600.0
    """End an episode no request has touched for this many seconds (its id then starts afresh)."""
    backend: Literal["features", "text", "table", "tiered_table"] | None = None
    """Override the helper's saved backend (table follows the solved policy table; tiered_table a tiered helper's)."""
    device: str | None = None
    """Torch device of the PRM / text classifier (default: cuda when available, else cpu)."""
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
    episode_id: EpisodeId
    step: Step
    state_text: Text
    features: dict[Text, Number] = Field(default_factory=dict)
    proposal: Text | None = None
    horizon: int | None = Field(default=None, ge=1, le=MAX_STEP, strict=True)
    env: Text = ""
    task_id: Text = ""


class ActionReport(BaseModel):
    """What was played at a step (the PRM of the helper reads it at later steps)."""

    model_config = ConfigDict(extra="forbid")
    step: Step
    action_text: Text
    state_text: Text = ""


class ServedGate:
    """Holds the per-episode budgets in front of any gate, in a ``Ledger`` (``helper.serve.ledger``: a SQLite file
    that survives a restart, or memory); ``decide`` also returns the gate's score.

    Idempotent per ``(episode_id, step)`` and request body: a decision point asked again (a client's retry after a
    timeout, also across a restart on the same ledger) gets the answer it was given the first time, and spends
    nothing (no budget, no PRM pass, no action recorded twice); the decisions of one episode are made one at a
    time, so a retry racing its original waits for it. The answers are kept until the episode ends or is reaped.

    The wrapped gate is asked ``intervene_probability`` (a ``HelperGate``), else ``wants`` (any
    ``BudgetedGate``: their own count is never spent), else ``should_intervene`` (any
    ``agile.protocol.Gate``), so there is exactly one budget per episode: this one.
    """

    def __init__(self, gate, budget: int | None = None, ledger: Ledger | None = None):
        budget = getattr(gate, "budget", None) if budget is None else budget
        if budget is None:
            raise ValueError("serve-gate needs a per-episode budget: pass --budget C.")
        self.tiered = hasattr(gate, "pick_scored")  # several kinds of help, each at its price (TieredHelperGate)
        if self.tiered:
            from helper.serve.tiered_ledger import TieredLedger

            self.ledger = ledger or TieredLedger(None, gate.prices, budget, gate.caps)
            if not isinstance(self.ledger, TieredLedger):
                raise ValueError("a tiered helper keeps its spends in a TieredLedger (helper.serve.tiered_ledger)")
            self.budget = self.ledger.cost_budget
        else:
            self.ledger = ledger or Ledger(None, budget)
            self.budget = self.ledger.budget  # what new episodes get (an episode keeps the budget it started with)
        self.gate = gate
        self.decide_after = getattr(gate, "decide_after", "state")
        self.name = f"served:{getattr(gate, 'name', type(gate).__name__)}"
        self._scores = threading.local()  # the score of the decision this thread is making
        self._locks: dict[str, threading.Lock] = {}  # one per episode this process has decided
        self._locks_lock = threading.Lock()

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
        self.reap()
        episode, step, request = observation.episode_id, observation.step, request or ""
        with self._lock_of(episode):
            first = self.ledger.answer(episode, step, request)
            if first is not None:
                return first
            left = self.ledger.left(episode)
            wanted = None
            self._scores.value = None
            if left > 0:  # the gate decides outside the ledger's transaction (a PRM pass takes a while)
                wanted = self.wants(observation, left, proposal)
            answer = self.ledger.record(episode, step, request, wanted, self._scores.value, observation.horizon)
            if proposal is not None and not answer[0]:
                self.record_action(observation, proposal.text)  # the proposal is what will be played
            return answer

    def decide_kind(self, observation: Observation, proposal=None, request: str | None = None
                    ) -> tuple[str | None, float, dict[str, int], float | None]:
        """A tiered helper's ``decide``: ``(kind or None, budget left after it, calls left per capped kind, score)``,
        the kind spent in the ledger (``helper.serve.tiered_ledger``) in the transaction that records the answer;
        idempotent per request as ``decide``."""
        self.reap()
        episode, step, request = observation.episode_id, observation.step, request or ""
        with self._lock_of(episode):
            first = self.ledger.kind_answer(episode, step, request)
            if first is not None:
                return first
            left, calls = self.ledger.state(episode)
            # decided outside the ledger's transaction (a PRM pass takes a while); the ledger re-checks the spend
            kind, score = self.gate.pick_scored(observation, left, calls, proposal)
            answer = self.ledger.record_kind(episode, step, request, kind, score, observation.horizon)
            if proposal is not None and answer[0] is None:
                self.record_action(observation, proposal.text)  # the proposal is what will be played
            return answer

    def _lock_of(self, episode: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(episode, threading.Lock())

    def used(self, episode_id: str) -> float:
        """Interventions granted so far in this episode (a tiered helper: the cost spent); 0 for an unknown id."""
        return self.ledger.spent(episode_id)[0] if self.tiered else self.ledger.used(episode_id)

    def live_episodes(self) -> int:
        return self.ledger.live()

    def is_open(self, episode_id: str) -> bool:
        return self.ledger.is_open(episode_id)

    def end_episode(self, episode_id: str) -> int | None:
        """Forget the episode (its id starts afresh); the interventions it used, None when it was not open."""
        used = self.ledger.end(episode_id)
        self._forget(episode_id)
        return used

    def reap(self) -> list[str]:
        """End the episodes idle past the ledger's ``idle_s`` (checked at most every second)."""
        ended = self.ledger.reap(every_s=min(1.0, self.ledger.idle_s / 2))
        for episode_id in ended:
            self._forget(episode_id)
        return ended

    def _forget(self, episode_id: str) -> None:
        with self._locks_lock:
            self._locks.pop(episode_id, None)
        if hasattr(self.gate, "end_episode"):
            self.gate.end_episode(episode_id)

    def record_action(self, observation: Observation, action_text: str) -> None:
        self.ledger.touch(observation.episode_id)
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

    def path_id(episode_id: str) -> str:
        """The id of a URL path, checked as /v1/gate checks it (422 naming the field)."""
        if re.fullmatch(EPISODE_ID, episode_id) is None or episode_id in (".", ".."):
            shown = episode_id if len(episode_id) <= 40 else f"{episode_id[:40]}... ({len(episode_id)} characters)"
            raise HTTPException(422, f"episode_id={shown!r}: an episode id is 1 to 256 letters, digits and _.:@+=~- "
                                     "(not '.' or '..').")
        return episode_id
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
        if gate.tiered:  # which help it may name, at what price, how often
            out |= {"kinds": list(gate.gate.kinds), "prices": gate.gate.prices, "caps": gate.ledger.caps}
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
            if gate.tiered:
                kind, left, calls, score = gate.decide_kind(obs, proposal, request)
            else:
                intervene, left, score = gate.decide(obs, proposal, request)
        except RuntimeError as error:  # e.g. more live episodes than the gate tracks
            raise HTTPException(503, str(error)) from error
        except ValueError as error:  # the request lacks what the helper reads (e.g. all its features)
            raise HTTPException(422, str(error)) from error
        if gate.tiered:
            return {"intervene": kind is not None, "kind": kind, "budget_left": left, "calls_left": calls,
                    "score": score, "horizon": obs.horizon}
        return {"intervene": intervene, "budget_left": left, "score": score, "horizon": obs.horizon}

    @app.post("/v1/episodes/{episode_id}/actions")
    def record(episode_id: str, body: ActionReport) -> dict:
        played = gate.ledger.horizon(path_id(episode_id))
        if played is None:
            raise HTTPException(404, f"episode {episode_id!r} is not open: ask /v1/gate for it first.")
        gate.record_action(observation(episode_id, body.step, body.state_text, request_horizon=played),
                           body.action_text)
        return {"episode_id": episode_id, "step": body.step}

    @app.post("/v1/episodes/{episode_id}/end")
    def end(episode_id: str) -> dict:
        used = gate.end_episode(path_id(episode_id))
        if used is None:
            raise HTTPException(404, f"episode {episode_id!r} is not open (never asked, ended, or idle past "
                                     "--idle-episode-s).")
        return {"episode_id": episode_id, "used": used}

    return BodyLimit(app, max_body_bytes)


def served_guarantee(gate: ServedGate) -> dict | None:
    """What ``/health`` says of the helper's ``guarantee.json`` (None: it has none): the promise, and whether it
    covers this server (it does at the certified budget only, and for a priced member only with its table: a gate
    from ``helper.solve.priced_family.certified_gate`` names its ``price``)."""
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
    from helper.gates.identity import read_features

    names = list(helper.classifier.feature_names) if helper.backend in ("features", "tiered_features") else []
    if helper.backend != "text" and helper.fallback is not None:
        names += helper.fallback.feature_names
    return sorted(set(read_features(names)))


def load_helper(config: ServeGateConfig):
    """``(helper, horizon, degraded reason)``, refusing what cannot be served as trained."""
    from helper.gates.helper_gate import HelperGate
    from helper.gates.identity import UntrustedPrm

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


LEDGER_FILE = "serve-ledger.sqlite"
"""The default ledger, in the helper folder: it moves with the helper whose episodes it counts, and needs no
global cache (a helper folder that cannot be written takes --ledger)."""


def listening_socket(host: str, port: int):
    """A socket bound to ``host:port`` for uvicorn; a port in use or not ours is refused in one line."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait for TIME_WAIT
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise ValueError(f"port={port}: already in use on {host} (another server, or an earlier serve-gate still "
                             "running); stop it or pass another --port.") from None
        raise ValueError(f"port={port} on host={host!r}: cannot listen there ({error.strerror or error}); pass "
                         "another --port or --host.") from None
    sock.listen(2048)
    return sock


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
    budget = helper.budget if config.budget is None else config.budget
    if budget is None:
        raise ValueError("serve-gate needs a per-episode budget: pass --budget C.")
    where = config.ledger or f"{config.helper}/{LEDGER_FILE}"
    if hasattr(helper, "pick_scored"):  # a tiered helper: spends in cost units, calls per kind
        from helper.serve.tiered_ledger import TieredLedger

        ledger = TieredLedger(where, helper.prices, budget, helper.caps, idle_s=config.idle_episode_s,
                              sync=config.ledger_sync)
    else:
        ledger = Ledger(where, budget, idle_s=config.idle_episode_s, sync=config.ledger_sync)
    gate = ServedGate(helper, config.budget, ledger)
    sock = listening_socket(config.host, config.port)  # before the line that says it serves
    state = f"DEGRADED ({degraded})" if degraded else "ok"
    print(f"serving {helper!r} on http://{config.host}:{config.port}/v1/gate (budget {gate.budget} per episode, "
          f"horizon {horizon}, ledger {ledger.path}, {ledger.live()} live episodes); status {state}", flush=True)
    app = create_app(gate, horizon, served_features(helper), degraded, config.max_body_bytes)
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level))
    server.run(sockets=[sock])
