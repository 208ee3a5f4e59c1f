"""``agile eval``: per-group metrics, policy advice beside a gate, ablations, command parsing."""

from __future__ import annotations

import json

import pytest

from agile.executor.agent_eval import markdown_table, run_eval
from helper.gates.simple import NoveltyGate, RandomGate, UniformGate
from agile.models import load_causal_lm
from agile.protocol import Observation
from agile.train.command import EvalConfig, parse_command
from helper.evaluation.agile_advice import AgileEvalConfig, make_gate

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def test_builtin_gates_follow_the_protocol():
    obs = Observation("e", "productqa", "q", 0, "", 3, {"memory_top_similarity": 0.2})
    # The protocol's promise to an agent that keeps no count: asked with no budget_left, a gate with a
    # per-episode budget grants that many interventions per episode and then refuses, until the episode ends.
    for gate in (NoveltyGate(0.5, budget=2), RandomGate(1.0, budget=2)):
        assert [gate.should_intervene(obs) for _ in range(3)] == [True, True, False], gate.name
        assert gate.should_intervene(Observation("other", "productqa", "q", 0, "", 3, obs.features))
        gate.end_episode("e")
        assert gate.should_intervene(obs), gate.name
    assert NoveltyGate(0.5).should_intervene(obs, 1)
    assert not NoveltyGate(0.5).should_intervene(obs, 0)
    assert not NoveltyGate(0.1).should_intervene(obs, 1)
    assert not RandomGate(1.0).should_intervene(obs, 0)


def test_random_gate_draws_in_sequence_for_agile_eval_and_by_key_for_the_sweep():
    """One RandomGate, two draw orders: agile eval's one draw of random.Random(seed) per decision asked
    (its rows reproduce), the sweep's pure function of (seed, episode, step)."""
    import random

    from agile.seeding import stable_uniform

    obs = [Observation("e", "productqa", "q", step, "", 8) for step in range(8)]
    rng = random.Random(7)
    sequential = RandomGate(0.5, seed=7, draws="sequential")
    assert [sequential.should_intervene(o, 8) for o in obs] == [rng.random() < 0.5 for _ in obs]
    keyed = RandomGate(0.5, seed=7)
    assert [keyed.should_intervene(o, 8) for o in obs] == [stable_uniform(7, "e", o.step, "random-gate") < 0.5
                                                           for o in obs]


def test_uniform_gate_spends_exactly_its_budget_at_uniformly_drawn_questions():
    """Every episode spends the whole budget; over many episodes each 2-of-5 set of questions is
    drawn about equally often (10 sets, 1/10 each)."""
    from collections import Counter
    from itertools import combinations

    gate, sets, episodes = UniformGate(seed=4), Counter(), 20_000
    for e in range(episodes):
        left, asked = 2, []
        for step in range(5):
            if gate.should_intervene(Observation(f"e{e}", "agile", "q", step, "", 5), left):
                left, asked = left - 1, asked + [step]
        assert len(asked) == 2
        sets[tuple(asked)] += 1
    assert set(sets) == set(combinations(range(5), 2))
    assert all(abs(n / episodes - 0.1) < 0.01 for n in sets.values())
    assert not gate.should_intervene(Observation("x", "agile", "q", 0, "", 5), 0)


def test_the_gate_run_alone_skips_the_policy_run(tmp_path):
    model, tokenizer = load_causal_lm("tiny", device="cpu")
    cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings"], questions_per_group=3, gate="uniform", budget=2,
                     policy_run=False, max_new_tokens=4, out=str(tmp_path))
    rows = run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
    assert {r["mode"] for r in rows} == {"gate:UniformGate"}
    assert rows[-1]["advice_rate"] == pytest.approx(2 / 3)  # budget 2 of 3 questions, all spent
    assert len((tmp_path / "sessions.jsonl").read_text().splitlines()) == 3


def test_the_phrasing_rule_asks_on_the_questions_not_phrased_yes_no(tmp_path):
    from agile.envs.phrasing import is_yes_no_question
    from agile.envs.productqa import load_group

    model, tokenizer = load_causal_lm("tiny", device="cpu")
    cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings"], questions_per_group=8,
                     gate="not_yes_no", budget=8, policy_run=False, max_new_tokens=4, out=str(tmp_path))
    run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
    text = {q.id: q.question for q in load_group(ROOT / "test" / "leggings").questions}
    sessions = [json.loads(line) for line in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    kinds = [is_yes_no_question(text[r["question_id"]]) for r in sessions]
    assert len(set(kinds)) == 2  # both kinds are in these eight questions, so the rule is tested both ways
    assert [r["advised"] for r in sessions] == [not k for k in kinds]


def test_the_non_adaptive_gate_spends_the_budget_on_each_episodes_first_questions(tmp_path):
    model, tokenizer = load_causal_lm("tiny", device="cpu")
    cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings", "motherboards"], questions_per_group=4,
                     episodes_per_group=2, gate="first_k", budget=2, policy_run=False, max_new_tokens=4,
                     out=str(tmp_path))
    rows = run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
    assert {r["mode"] for r in rows} == {"gate:FirstKGate"}
    sessions = [json.loads(line) for line in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    assert len(sessions) == 2 * 2 * 4
    assert all(r["advised"] == (r["index"] < 2) for r in sessions)


def test_run_eval_reports_policy_and_gate_side_by_side(tmp_path):
    model, tokenizer = load_causal_lm("tiny", device="cpu")
    cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings", "motherboards"], questions_per_group=4,
                     ablations=["full", "no_advice"], gate="novelty", budget=2,
                     gate_threshold=2.0, max_new_tokens=4, out=str(tmp_path))
    rows = run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
    modes = {(r["ablation"], r["mode"]) for r in rows}
    # no_advice has no gate run: there is no advice to hand to a gate.
    assert modes == {("full", "policy"), ("full", "gate:NoveltyGate"), ("no_advice", "policy")}
    by = {(r["ablation"], r["mode"], r["group"]): r for r in rows}
    gate_avg = by[("full", "gate:NoveltyGate", "average")]
    # threshold 2.0: the gate always asks, so it spends exactly its budget (2 of 4 questions),
    # and advice is always correct: accuracy >= advice rate.
    assert gate_avg["advice_rate"] == pytest.approx(0.5)
    assert gate_avg["accuracy"] >= 0.5
    assert gate_avg["total_score"] == pytest.approx(gate_avg["accuracy"] - 0.3 * 0.5)
    for group in ("leggings", "motherboards"):
        assert by[("full", "policy", group)]["n"] == 4
    assert by[("no_advice", "policy", "average")]["advice_rate"] == 0.0
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert len(saved["rows"]) == len(rows)
    assert (tmp_path / "eval.csv").read_text().startswith("model,ablation,mode,group")
    assert len((tmp_path / "sessions.jsonl").read_text().splitlines()) == 3 * 2 * 4
    assert "| tiny | full | gate:NoveltyGate | average | 8 |" in markdown_table(rows)


def test_command_options_are_typed(capsys):
    command, cfg = parse_command(["ppo", "--model", "tiny", "--iterations", "2", "--kl-coef", "0.1",
                                  "--no-whiten-advantages", "--groups", "blades", "mice"])
    assert command == "ppo"
    assert (cfg.model, cfg.iterations, cfg.kl_coef, cfg.whiten_advantages, cfg.groups) == \
        ("tiny", 2, 0.1, False, ["blades", "mice"])
    assert parse_command(["eval", "--ablations", "full", "no_tools"])[1].ablations == ["full", "no_tools"]
    for bad in (["sft", "--nonsense", "1"], ["ppo", "--whiten-advantages", "tru"], ["ppo", "--iterations", "2.5"]):
        with pytest.raises(SystemExit) as stop:
            parse_command(bad)
        assert stop.value.code == 2
        assert "Traceback" not in capsys.readouterr().err


def test_unknown_ablation_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no_brain"):
        run_eval(EvalConfig(ablations=["no_brain"], out=str(tmp_path)))


class StepGate:
    """Asks at fixed session indices; remembers what it was shown."""

    decide_after = "state"

    def __init__(self, steps):
        self.steps, self.seen = set(steps), []

    def should_intervene(self, observation, budget_left, proposal=None):
        self.seen.append((observation.step, proposal))
        return budget_left > 0 and observation.step in self.steps


class ProposalStepGate(StepGate):
    decide_after = "proposal"


def test_a_gate_reading_proposals_sees_the_llms_session_and_changes_nothing_else(tmp_path):
    """The same advice decisions taken after the LLM's proposal (episode loop, proposal on a copy,
    replayed when kept) give exactly the sessions of the gate inside the executor."""
    model, tokenizer = load_causal_lm("tiny", device="cpu")
    logs = {}
    for gate in (StepGate({1}), ProposalStepGate({1})):
        out = tmp_path / gate.decide_after
        cfg = EvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings", "motherboards"], questions_per_group=3, policy_run=False,
                         max_new_tokens=6, out=str(out))
        rows = run_eval(cfg, gate=gate, model=model, tokenizer=tokenizer, log=lambda *_: None, budget=1)
        assert rows[-1]["advice_rate"] == pytest.approx(1 / 3)
        # The loop hands the executor each turn's token ids, as its own loop does (the tiny random
        # model's ids do not survive decoding, so token counts would differ if it passed text).
        logs[gate.decide_after] = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
        if gate.decide_after == "proposal":
            # Shown at every decision with budget left: before the advice, sessions 0 and 1 of each group.
            assert sorted(step for step, _ in gate.seen) == [0, 0, 1, 1]
            assert all(proposal is not None and proposal.actor == "base" and proposal.text for _, proposal in gate.seen)
        else:
            assert all(proposal is None for _, proposal in gate.seen)
    assert logs["proposal"] == logs["state"]
    assert [r["advised"] for r in logs["state"]] == [False, True, False] * 2


def test_several_episodes_per_group_play_the_next_questions_each_with_its_own_budget(tmp_path):
    model, tokenizer = load_causal_lm("tiny", device="cpu")

    def sessions(episodes, out):
        cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings"], questions_per_group=3,
                         episodes_per_group=episodes, gate="uniform", budget=1, policy_run=False, max_new_tokens=4,
                         out=str(tmp_path / out))
        rows = run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
        return rows, [json.loads(line) for line in (tmp_path / out / "sessions.jsonl").read_text().splitlines()]

    _, one = sessions(1, "one")
    rows, two = sessions(2, "two")
    assert len(two) == 6 and rows[-1]["n"] == 6
    assert [r["episode_id"] for r in two] == ["eval-leggings"] * 3 + ["eval-leggings-1"] * 3
    # The first episode is the one-episode run's, session for session; the second asks the next three questions.
    keep = ("episode_id", "index", "question_id", "answer", "advised", "correct")
    assert [{k: r[k] for k in keep} for r in two[:3]] == [{k: r[k] for k in keep} for r in one]
    assert not {r["question_id"] for r in two[3:]} & {r["question_id"] for r in two[:3]}
    assert [sum(r["advised"] for r in two[e * 3:(e + 1) * 3]) for e in (0, 1)] == [1, 1]  # B = 1 per episode
    with pytest.raises(ValueError, match="fewer questions"):
        sessions(10_000, "too_many")


def test_lexical_memory_evaluates_without_the_sentence_encoder(tmp_path, monkeypatch):
    import agile.executor.agent_eval as evaluate_module

    def no_encoder(*_, **__):
        raise AssertionError("the MiniLM embedder was built for a lexical-memory evaluation")

    monkeypatch.setattr(evaluate_module, "Embedder", no_encoder)
    model, tokenizer = load_causal_lm("tiny", device="cpu")
    cfg = AgileEvalConfig(model="tiny", data_root=str(ROOT), groups=["leggings"], questions_per_group=3, memory="lexical",
                     gate="uniform", budget=1, policy_run=False, max_new_tokens=4, out=str(tmp_path))
    rows = run_eval(cfg, gate=make_gate(cfg), model=model, tokenizer=tokenizer, log=lambda *_: None)
    assert rows[-1]["n"] == 3 and rows[-1]["advice_rate"] == pytest.approx(1 / 3)
