"""The helper decides the AGILE agent's advice, against the advice PPO learns online (issue 14, item 4).

For each advice cost c, on the test groups of ../shared/productqa (one episode per group, the same
questions for every row), accuracy / advice rate / total score = accuracy - c x advice rate of:

- ``PPO`` - the PPO agent trained at c, its own ``[SeekAdvice]`` (``agile_productqa.py``'s cost runs);
- ``PPO@helper-rate`` - the same agent asking at helper@c's advice rate: a threshold on its own ask score
  (``EvalConfig.ask_shift``) set from its scores in the PPO row's sessions (constrained agent only);
- ``helper@c`` - the SFT agent, advice decided by a helper solved at c (Lagrangian, no budget);
- ``helper@rate`` - the SFT agent, a helper solved for a hard budget of B = PPO's advice per episode;
- ``novelty@rate`` / ``random@rate`` / ``first@rate`` - the SFT agent, NoveltyGate / uniformly drawn questions /
  the episode's first B questions (AGILE's non-adaptive baseline) within B;
- ``rule`` - the same agent asking on every question not phrased yes/no (``PhrasingGate``): a reference line for
  an agent that answers yes/no questions and nothing else, not a learned gate;
- ``SFT`` - the SFT agent alone (it never asks).

The helpers learn from one offline collection through the SFT agent itself (the AGILE executor,
random advice, the train groups, episodes as long as the evaluated ones), a PRM on it with
out-of-fold scores, then ``solve`` and ``distill`` per c. Training human calls: PPO's rollouts
(every ``[SeekAdvice]`` is a human answer) against the collection's advice rows.

Shares ``agile_productqa.py``'s flags and ``--out``: the SFT model and the PPO cost runs are those
of that script (trained here if missing). Every stage is a file under ``--out``; a stopped run resumes.

    python benchmarks/agents/agile_join.py --out runs/bench_agile --threads 1 --test-questions 10 \\
        --collect-episodes 48 --costs 0.3,0.1,0.5,0.2,0.4 --budgets 2

``--budgets``: where a fixed number of advice per episode goes (helper, NoveltyGate, random), the
comparison that does not depend on how often PPO learned to ask. ``--decide-after proposal``: the
helpers read the session the SFT agent proposes (collection, PRM and helpers in ``join-proposal/``;
the evaluation lets the agent propose each session on a copy of the executor and replays it when kept).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from agile.envs.productqa import default_productqa_root  # noqa: E402
from benchmarks.agents.agile_productqa import (  # noqa: E402
    base_model,
    cost_stage,
    decoding,
    episodes_tag,
    evaluate,
    log,
    parser,
    prepare,
    sft_stage,
    stage,
)
from helper.evaluation.advice_join import (  # noqa: E402
    PPO_AT_HELPER_RATE,
    RULE,
    load_sessions,
    paired_difference,
    session_key,
    session_scores,
    write_manifest,
)
from helper.evaluation.agile_advice import AgileEvalConfig  # noqa: E402
from helper.evaluation.agile_advice import run as agile_eval  # noqa: E402

ROUTES = ("PPO", "PPO@helper-rate", "helper@c", "helper@rate", "novelty@rate", "random@rate", "first@rate", "rule",
          "SFT")


def listed(args) -> str:
    """The suffix of the folders whose runs list ``[SeekAdvice]`` for the agent while a gate decides."""
    return "-listed" if args.list_advice_with_gate else ""


def joined(args, out: Path) -> Path:
    """The folder of the helper's stages: ``join`` (decide on the state) or ``join-proposal`` (``-listed``: the
    agent's system text lists ``[SeekAdvice]`` in every gate's run and the collection, as in PPO's)."""
    return out / (("join" if args.decide_after == "state" else "join-proposal") + listed(args))


def offline_stages(args, out: Path, train_groups: list[str]) -> dict:
    """Collection through the SFT agent with random advice, then PRM train and out-of-fold scores."""
    from helper.data.collect import CollectConfig
    from helper.data.collect import run as collect
    from helper.stored_config import config_of
    from prm.scoring.score import ScoreConfig, run_score
    from prm.training.train import TrainConfig, run_train

    folder = joined(args, out)
    data, prm = folder / "trajectories", folder / "prm"
    q = args.test_questions
    # Deciding after the proposal, the PRM scores the session the SFT agent proposes (was it right?);
    # on the state, the agent's correctness on the sessions it answered itself.
    target = "proposal" if args.decide_after == "proposal" else "process"
    # The agent as agile eval runs it: the SFT model writes its own turns (free), the embedded one is constrained.
    collected = stage(folder / "collect.json", lambda: collect(config_of(CollectConfig,
        env="agile", agent="llm", model=base_model(args, out), decoding=decoding(args), data=str(default_productqa_root()),
        groups=train_groups, split="train",
        episodes=args.collect_episodes, questions_per_episode=q, budget=q, explore_p=[0.0, 0.1, 0.2, 0.4],
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, shard_size=8, seed=args.seed,
        restate_question=args.restate_question, list_advice_with_gate=args.list_advice_with_gate,
        yes_no_threshold=args.yes_no_threshold,
        device="cpu", decide_after=args.decide_after, out=str(data))))
    stage(folder / "prm.json", lambda: run_train(TrainConfig(
        data=str(data), out=str(prm), model=args.prm_model, head="value", tag_after=args.decide_after, target=target,
        base_only=target == "process", layers=8 if args.prm_model == "smollm2" else None, folds=5, seed=args.seed,
        device="cpu")))
    stage(folder / "score.json", lambda: run_score(ScoreConfig(data=str(data), model=str(prm), device="cpu")))
    return collected


def helper_stage(args, out: Path, name: str, advice_cost: float | None, budget: int | None) -> Path:
    """Solve (at a cost, or for a budget) and distill one helper; returns its folder."""
    from helper.solve.distill import DistillConfig
    from helper.solve.distill import run as distill
    from helper.solve.solve_command import SolveConfig
    from helper.solve.solve_command import run as solve

    folder = joined(args, out) / name
    data = folder.parent / "trajectories"
    stage(folder / "solve.json", lambda: solve(SolveConfig(
        data=str(data), budgets=None if advice_cost is not None else [budget or 0], bins=6, advice_cost=advice_cost,
        out=str(folder / "solve"))))
    stage(folder / "distill.json", lambda: distill(DistillConfig(
        labels=str(folder / "solve"), prm=str(folder.parent / "prm"), out=str(folder / "helper"), seed=args.seed,
        device="cpu")))
    return folder / "helper"


def gate_eval(args, out: Path, label: str, advice_cost: float, **gate) -> tuple[dict, Path]:
    """The SFT agent with its advice decided by a gate (a helper folder or a built-in gate), gate run
    only: the result and its evaluation folder (a helper's with its mode's stages; a built-in gate's,
    which reads no proposal, in ``join`` or ``join-listed``, shared by both modes)."""
    shared = out / f"join{listed(args)}"
    folder = (joined(args, out) if gate.get("helper") else shared) / f"eval_{label}{episodes_tag(args)}"

    def run():
        cfg = AgileEvalConfig(model=base_model(args, out), split=args.eval_split, decoding=decoding(args),
                              groups=args.test_group_names,
                              questions_per_group=args.test_questions, episodes_per_group=args.test_episodes,
                              advice_cost=advice_cost,
                              max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, policy_run=False,
                              restate_question=args.restate_question, list_advice_with_gate=args.list_advice_with_gate,
                              yes_no_threshold=args.yes_no_threshold,
                              device="cpu", seed=args.seed, out=str(folder), **gate)
        return {"rows": agile_eval(cfg, log=log), "config": asdict(cfg)}
    return stage(folder.parent / f"{folder.name}.json", run), folder


def budget_routes(args, out: Path, budget: int, advice_cost: float) -> dict:
    """The SFT agent with B pieces of advice per episode placed by the helper solved for B, by
    NoveltyGate, at uniformly drawn questions and at the episode's first B questions (AGILE's non-adaptive
    baseline): route -> (result, eval folder)."""
    helper = helper_stage(args, out, f"helper_b{budget}", None, budget)
    routes = {}
    for route, tag, gate in (("helper@rate", f"helper_b{budget}", dict(helper=str(helper), budget=budget)),
                             ("novelty@rate", f"novelty_b{budget}", dict(gate="novelty", budget=budget)),
                             ("random@rate", f"uniform_b{budget}", dict(gate="uniform", budget=budget)),
                             ("first@rate", f"first_b{budget}", dict(gate="first_k", budget=budget))):
        routes[route] = gate_eval(args, out, f"{tag}_c{advice_cost:g}", advice_cost, **gate)
    return routes


def ppo_at_rate(args, out: Path, advice_cost: float, rate: float) -> tuple[dict, Path]:
    """PPO's own advice at ``rate``: its ask score shifted by the threshold (``shift_for_rate``) that puts that share
    of its greedy choices above it in its own evaluation at c (the agent's scores on those sessions, no outcome
    read: the rate matched on the sessions compared, as random@rate's budget is), then evaluated like PPO."""
    from agile.executor.choice_head import shift_for_rate
    from agile.executor.agent_eval import ASK_MARGINS_FILE

    tag = f"ppo_c{advice_cost:g}"
    own = out / f"eval_PPO c={advice_cost:g}{episodes_tag(args)}" / ASK_MARGINS_FILE
    shift = shift_for_rate(json.loads(own.read_text())["full"], rate)
    label = f"PPO c={advice_cost:g} at the helper's rate {rate:.3f}"
    result = stage(out / f"{tag}_matched_{rate:.3f}{episodes_tag(args)}.json", lambda: {
        **evaluate(args, str(out / tag / "model"), out, label, gate="none", advice_cost=advice_cost, ask_shift=shift),
        "ask_shift": shift})
    return result, out / f"eval_{label}{episodes_tag(args)}"


def answer_shares(eval_dir: Path) -> str:
    """What the agent answered where it answered itself (no advice): shares of yes, no, product ids and
    anything else (an agent whose answers are one string has learned nothing to decide for)."""
    from collections import Counter

    from agile.envs.answer_eval import parse_product_ids

    kinds = Counter()
    for line in (eval_dir / "sessions.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["advised"]:
            continue
        answer = str(r.get("answer") or "").strip().lower()
        kinds["yes" if answer == "yes" else "no" if answer == "no" else
              "product ids" if parse_product_ids(answer) else "other"] += 1
    n = sum(kinds.values())
    return ", ".join(f"{k} {v / n:.2f}" for k, v in kinds.most_common()) + f" (n = {n})" if n else "no own answers"


def targeting(folders: dict[str, Path]) -> str:
    """How often each route's advised sessions were ones the agent answers right alone (read where another
    route left that session to the agent): a gate that targets its advice finds the agent's mistakes."""
    logs = {route: {session_key(r): r for r in load_sessions(f)} for route, f in folders.items()}
    alone = {}
    for log_ in logs.values():
        for key, r in log_.items():
            if not r["advised"]:
                alone.setdefault(key, r["correct"])
    parts = []
    for route, log_ in logs.items():
        known = [alone[k] for k, r in log_.items() if r["advised"] and k in alone]
        parts.append(f"{route.split('@')[0]} {sum(known)}/{len(known)}")
    return (f"agent right alone on the advised sessions: {', '.join(parts)} (on all it plays alone: "
            f"{sum(alone.values())}/{len(alone)})")


def by_phrasing(folders: dict[str, Path]) -> str:
    """Each route's advice on yes/no-phrased questions and on the others, and how often the agent was right where
    it answered alone, by the same split (what the agent sees; ``agile_ppo_costs.unseen_advice``): whether a gate
    found more than the question's phrasing."""
    from benchmarks.agents.agile_ppo_costs import unseen_advice

    parts = []
    for route, folder in folders.items():
        a = unseen_advice(folder)
        parts.append(f"{route} asks {a['yes/no-phrased'][0]:.2f} / {a['not yes/no-phrased'][0]:.2f}, right alone "
                     f"{a['right alone, yes/no-phrased'][0]:.2f} / {a['right alone, not yes/no-phrased'][0]:.2f}")
    return "yes/no-phrased / others: " + "; ".join(parts)


def against_helper(routes: dict, advice_cost: float) -> dict[str, tuple]:
    """Each budget route's (mean, low, high, sessions) of the helper's total minus its own, paired by session."""
    helper = session_scores(routes["helper@rate"][1], advice_cost)
    return {route: paired_difference(helper, session_scores(folder, advice_cost)) for route, (_, folder) in routes.items()}


def record(args, out: Path, collected: dict, costs: dict) -> Path:
    """Add this run's comparisons (``costs`` and every --budgets route) to the helpers' folder's join.json."""
    c = float(args.costs.split(",")[0])
    budgets = [{"budget": b, "cost": c, "episodes_per_group": args.test_episodes, "helper_calls": collected["human_calls"],
                **{route.split("@")[0]: str(folder) for route, (_, folder) in budget_routes(args, out, b, c).items()}}
               for b in args.budgets]
    return write_manifest(joined(args, out), costs, budgets, {
        "agent": args.agent, "decide_after": args.decide_after, "test_groups": len(args.test_group_names),
        "questions_per_group": args.test_questions, "seed": args.seed,
        "collection": f"{collected['episodes']} episodes, {collected['human_calls']} human calls"})


def average_row(result: dict) -> dict:
    return next(r for r in result["rows"] if r["group"] == "average")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--collect-episodes", type=int, default=48, help="offline episodes through the SFT agent")
    p.add_argument("--prm-model", default="smollm2", help="PRM backbone (first 8 layers of the embedded SmolLM2)")
    p.add_argument("--budgets", type=int, nargs="*", default=[],
                   help="also compare helper, NoveltyGate and random at these fixed advice budgets per episode")
    p.add_argument("--decide-after", choices=("state", "proposal"), default="state",
                   help="the helper decides on the session's start (state) or after the SFT agent's proposed "
                        "session (proposal: its own collection, PRM and helpers in join-proposal/)")
    p.add_argument("--offline-only", action="store_true",
                   help="run only what needs no PPO (collection, PRM, the agent alone, helper@c per cost, --budgets), "
                        "e.g. beside the PPO runs of agile_productqa.py --stages cost")
    p.add_argument("--only-budgets", action="store_true",
                   help="with --offline-only: evaluate the --budgets routes alone (no helper@c per cost)")
    args = p.parse_args()
    out = Path(args.out)
    train_groups = prepare(args)
    q = args.test_questions
    sft_stage(args, out, train_groups)
    collected = offline_stages(args, out, train_groups)
    alone_folder = out / "join" / f"eval_SFT{episodes_tag(args)}"
    sft_alone = None if args.only_budgets else stage(alone_folder.with_suffix(".json"), lambda: {
        "rows": agile_eval(AgileEvalConfig(
            model=base_model(args, out), split=args.eval_split, decoding=decoding(args), groups=args.test_group_names,
            questions_per_group=q, episodes_per_group=args.test_episodes, gate="none",
            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, device="cpu",
            restate_question=args.restate_question, list_advice_with_gate=args.list_advice_with_gate,
            yes_no_threshold=args.yes_no_threshold,
            out=str(alone_folder)), log=log)})
    if args.offline_only:
        for c in [] if args.only_budgets else [float(x) for x in args.costs.split(",")]:
            gate_eval(args, out, f"helper_c{c:g}", c, helper=str(helper_stage(args, out, f"helper_c{c:g}", c, None)))
        c = float(args.costs.split(",")[0])
        for budget in args.budgets:
            routes = budget_routes(args, out, budget, c)
            for route, (mean, low, high, n) in against_helper(routes, c).items():
                log(f"B = {budget}, c = {c:g}: helper − {route.split('@')[0]} {mean:+.3f} [{low:+.3f}, {high:+.3f}] "
                    f"over {n} sessions")
            log(f"B = {budget}: {targeting({route: folder for route, (_, folder) in routes.items()})}")
        log(f"wrote {record(args, out, collected, {})}")
        log("offline stages done; run again without --offline-only once the PPO cost runs are there")
        return
    # The agent the helper decides for, with its own [SeekAdvice]: after SFT it rarely asks; the
    # untrained constrained policy asks for most questions (its function log-probabilities favour it).
    alone = "SFT alone" if args.agent == "sft" else "agent, own advice"
    log(f"the agent's own answers (no advice): {answer_shares(alone_folder)}")
    table = ["| c | route | accuracy | advice rate | total score | total − PPO's [95% CI] | training human calls |",
             "|---|---|---|---|---|---|---|"]
    manifest_costs = {}
    for c in [float(x) for x in args.costs.split(",")]:
        ppo = cost_stage(args, out, train_groups, c)
        ppo_train = json.loads((out / f"ppo_c{c:g}_train.json").read_text())
        ppo_calls = ppo_train.get("training_human_calls") or sum(h["human_calls"] for h in ppo_train["history"])
        rate_budget = int(round(average_row(ppo)["advice_rate"] * q))
        results = {"PPO": (ppo, out / f"eval_PPO c={c:g}{episodes_tag(args)}")}
        priced = helper_stage(args, out, f"helper_c{c:g}", c, None)
        results["helper@c"] = gate_eval(args, out, f"helper_c{c:g}", c, helper=str(priced))
        helper_rate = average_row(results["helper@c"][0])["advice_rate"]
        if args.agent == "constrained" and abs(helper_rate - average_row(ppo)["advice_rate"]) > 0.5 / q:
            results["PPO@helper-rate"] = ppo_at_rate(args, out, c, helper_rate)
        if 0 < rate_budget < q:  # at every question, each route is always-ask: nothing to place
            results |= budget_routes(args, out, rate_budget, c)
        results["rule"] = gate_eval(args, out, f"not_yes_no_c{c:g}", c, gate="not_yes_no", budget=q)
        results["SFT"] = (sft_alone, alone_folder)
        manifest_costs[c] = {"ppo": str(results["PPO"][1]), "helper": str(results["helper@c"][1]),
                             "rule": str(results["rule"][1]),
                             "ppo_calls": ppo_calls, "helper_calls": collected["human_calls"]}
        if "PPO@helper-rate" in results:
            manifest_costs[c]["ppo_at_helper_rate"] = str(results["PPO@helper-rate"][1])
        if "helper@rate" in results:
            manifest_costs[c]["at_ppo_rate"] = {"budget": rate_budget, **{
                route.split("@")[0]: str(results[route][1]) for route in
                ("helper@rate", "novelty@rate", "random@rate", "first@rate")}}
        log(f"c = {c:g}: PPO's own answers: {answer_shares(results['PPO'][1])}")
        reference = session_scores(results["PPO"][1], c)
        for route in ROUTES:
            if route not in results:
                continue
            result, folder = results[route]
            row = average_row(result)
            accuracy, rate = row["accuracy"], row["advice_rate"]
            mean, low, high, _ = paired_difference(session_scores(folder, c), reference)
            delta = "" if route == "PPO" else f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"
            calls = {"PPO": ppo_calls, "PPO@helper-rate": ppo_calls, "SFT": 0}.get(
                route, collected["human_calls"] if "helper" in route else 0)
            label = {"SFT": alone, "rule": RULE, "PPO@helper-rate": PPO_AT_HELPER_RATE}.get(route, route)
            label += f" (B={rate_budget})" if route.endswith("@rate") else ""
            table.append(f"| {c:g} | {label} | "
                         f"{accuracy:.3f} | {rate:.3f} | {accuracy - c * rate:.3f} | {delta} | {calls} |")
        log("\n".join(table))
        log(f"c = {c:g}: {by_phrasing({route: folder for route, (_, folder) in results.items()})}")
    print(f"\n## The helper against PPO's own advice ({len(args.test_group_names)} unseen groups)\n")
    print("\n".join(table))
    if args.budgets:
        c = float(args.costs.split(",")[0])
        print(f"\n## Where B pieces of advice per episode go ({args.agent} agent; total score at c = {c:g})\n")
        print("| B | route | accuracy | advice rate | total score | helper − route [95% CI] |\n|---|---|---|---|---|---|")
        for budget in args.budgets:
            routes = budget_routes(args, out, budget, c)
            differences = against_helper(routes, c)
            for route, (result, _) in routes.items():
                row = average_row(result)
                mean, low, high, _ = differences[route]
                delta = "" if route == "helper@rate" else f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"
                print(f"| {budget} | {route.split('@')[0]} | {row['accuracy']:.3f} | {row['advice_rate']:.3f} | "
                      f"{row['accuracy'] - c * row['advice_rate']:.3f} | {delta} |")
            print(f"\nB = {budget}: {targeting({route: folder for route, (_, folder) in routes.items()})}; "
                  f"the agent's own answers: {answer_shares(routes['random@rate'][1])}")
    manifest = record(args, out, collected, manifest_costs)
    log(f"wrote {manifest}: helpgate report agile={manifest.parent} makes these rows")
    print(f"\nOffline collection: {collected['human_calls']} human calls in {collected['episodes']} episodes "
          f"({collected.get('decision_points')} decisions) through the {args.agent} agent; helpers share it for every c.")


if __name__ == "__main__":
    main()
