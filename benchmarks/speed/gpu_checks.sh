#!/usr/bin/env bash
# The checks a lent GPU runs in one go (shared/gpu-checklist.md), each under its own time cap, every output kept:
#   1. the agent's decisions per second, batched constrained decoding against one turn at a time (same run);
#   2. the evidence at size: the shared ProductQA pipeline cross-fitted over every product group, batched agent
#      in bf16, for each seed given (what finishes inside the cap is kept; a fold's folder says if it finished).
#
#   bash benchmarks/speed/gpu_checks.sh DATA OUT [SEED ...]
#
# DATA: a ProductQA root (train/ and test/); OUT: where the logs and a tarball of the run folders go.
# PIPELINE_SECONDS caps the seeds' pipelines together (default 300); COLLECT_SECONDS the throughput run (120).
# The knn baseline needs the sentence encoder: GPU machines without it pass METHODS without knn.
set -uo pipefail
DATA=$1; OUT=$2; shift 2
SEEDS=("${@:-0}")
mkdir -p "$OUT"
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no GPU") | tee "$OUT/gpu.txt"
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$OUT/gpu.txt"

timeout "${COLLECT_SECONDS:-120}" python benchmarks/speed/collect.py --sim-episodes 0 --data "$DATA" \
    --llm-episodes "${COLLECT_EPISODES:-16}" --questions 4 --memory lexical --device "${DEVICE:-cuda}" 2>&1 \
    | grep -v -i -E "warn|loading weights" | tee "$OUT/collect.txt"

deadline=$(( $(date +%s) + ${PIPELINE_SECONDS:-300} ))  # all seeds together; a seed gets what is left
for seed in "${SEEDS[@]}"; do
    start=$(date +%s); left=$(( deadline - start ))
    [ "$left" -gt 30 ] || { echo "seed $seed: not started, ${left} s left" | tee -a "$OUT/gpu.txt"; continue; }
    timeout "$left" python benchmarks/experiment.py pipeline --data "$DATA" --cross-fit "${FOLDS:-6}" --memory lexical \
        --eval-episodes "${EVAL_EPISODES:-32}" --episodes "${EPISODES:-96}" ${METHODS:+--methods $METHODS} ${EXTRA:-} \
        --seed "$seed" --out "runs/gpu-cf$seed" > "$OUT/pipeline$seed.log" 2>&1
    echo "seed $seed: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu.txt"
    tail -30 "$OUT/pipeline$seed.log"
done
for seed in "${SEEDS[@]}"; do  # one tarball a seed: each comes back on its own
    [ -d "runs/gpu-cf$seed" ] && tar czf "$OUT/runs$seed.tgz" --exclude='*.safetensors' --exclude='*.npz' "runs/gpu-cf$seed"
done
ls -la "$OUT"
