"""SFT and PPO under ``accelerate launch`` with 2 CPU processes (gloo): gradients are averaged,
so both processes hold identical weights after steps on different data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from agile.productqa import default_productqa_root

ROOT = default_productqa_root()
pytestmark = [
    pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate CLI not installed"),
    pytest.mark.skipif(not (ROOT / "train" / "blades").is_dir(), reason=f"ProductQA not found at {ROOT}"),
]

SCRIPT = textwrap.dedent('''
    import json, random, sys
    import torch
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from agile.agile_command import PPOConfig, SFTConfig, run_ppo, run_sft
    from agile.models import load_causal_lm
    from agile.ppo import Sample, build_policy, prepare, update

    out = sys.argv[1]

    def digest(model):
        return {n: float(p.detach().double().sum()) for n, p in model.named_parameters()
                if "lora" in n or "value" in n}

    # 1. SFT: each process trains on its own shard of the gold sessions.
    sft = run_sft(SFTConfig(model="tiny", groups=["blades"], questions_per_group=4, max_steps=2,
                            batch_size=1, micro_batch_size=1, lr=1e-2, lora_r=4, device="cpu",
                            out_dir=out + "/sft", log_every=1))
    # 2. PPO update on data that differs between processes (rank-dependent rewards).
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    lm, tok = load_causal_lm("tiny", device="cpu", seed=rank)  # different init on purpose
    cfg = PPOConfig(estimator="gae", lora_r=4, lr=1e-2, minibatch_size=2, micro_batch_size=1,
                    update_epochs=1)
    model, ref = build_policy(lm, cfg)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    policy, optimizer = accelerator.prepare(model, optimizer)
    prompt = list(range(200, 230))
    samples = [Sample(prompt + [300 + rank, 301], [0] * 30 + [1, 1], reward=float(rank) + i, task=i)
               for i in range(2)]
    prepared = prepare(model, ref, samples, cfg, tok.pad_token_id, "cpu")
    update(policy, optimizer, prepared, cfg, tok.pad_token_id, accelerator, random.Random(rank))
    # 3. The whole PPO command, one iteration (it must not hang with two processes).
    ppo = run_ppo(PPOConfig(model="tiny", groups=["blades"], questions_per_episode=2,
                            episodes_per_iteration=1, iterations=1, max_new_tokens=4, device="cpu",
                            out_dir=out + "/ppo", save=False, minibatch_size=2, micro_batch_size=1,
                            update_epochs=1, lora_r=4))
    state = accelerator.state
    json.dump({"rank": rank, "world": state.num_processes, "backend": str(state.backend),
               "sft": digest(sft["model"]), "ppo_update": digest(model),
               "ppo_run_sessions": ppo["history"][0]["sessions"]},
              open(f"{out}/rank{rank}.json", "w"))
''')


def test_two_cpu_processes_keep_identical_weights(tmp_path):
    script = tmp_path / "two_processes.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    # On CPU, accelerate's multi-process launcher (torchrun underneath) starts the processes;
    # with no visible GPU they join a gloo process group.
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", "29533", str(script), str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (a["rank"], b["rank"]) == (0, 1) and a["world"] == b["world"] == 2
    assert a["backend"] == b["backend"] == "gloo"
    for key in ("sft", "ppo_update"):
        assert a[key] and a[key].keys() == b[key].keys()
        assert all(a[key][n] == b[key][n] for n in a[key]), key
        # The steps did something: some LoRA B matrix (zero at init) moved.
        assert any(v != 0.0 for n, v in a[key].items() if "lora_B" in n), key
    assert a["ppo_run_sessions"] == b["ppo_run_sessions"] == 2
