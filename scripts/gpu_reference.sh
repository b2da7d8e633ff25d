#!/usr/bin/env bash
# Reference results on one NVIDIA GPU (H100/H200), written under results/reference/<gpu-name>/.
# Run from the repository root on the GPU node, after installing the project:
#     bash scripts/gpu_reference.sh            # all runs (about 20-25 minutes on one H100)
#     bash scripts/gpu_reference.sh mfu        # only the MFU run
# Commit the run folders without traces and snapshots (the script deletes them at the end).
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' /' '--')
out="results/reference/${gpu}"
common=(--bench-device=cuda --bench-nproc=1 --bench-results-dir="$out" --bench-timeout=900 -q -rs)
only=${1:-all}

run() {  # run NAME pytest-args...: one run folder per question, named after it
  local name=$1; shift
  if [[ $only == all || $only == "$name" ]]; then
    pytest benchmarks "${common[@]}" --bench-run-id="$name" "$@" || true  # failed cases are data
  fi
}

# 1. The accelerate FSDP2 benchmark's question: optimizer built after / before / before+fixed.
run optimizer-timing --bench-suite=optimizer-timing --bench-steps=30 --bench-warmup=5
# 2. ZeRO-2 vs ZeRO-3 on the Qwen2-1.5B shape (the suite fixes bf16, compile, fused AdamW).
run zero2-vs-zero3 --bench-suite=zero2-vs-zero3 --bench-steps=20 --bench-warmup=5
# 3. GPT-2 124M: every strategy x batch size, up to a batch that does not fit (a real OOM).
run gpt2-124m-sweep --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=8,16,32,64,128 \
    --bench-grad-accum=1 --bench-precision=bf16 --bench-steps=30 --bench-warmup=5 \
    --bench-strategies=ddp,fsdp1_full_shard,fsdp1_shard_grad_op,fsdp1_no_shard,fsdp1_offload,fsdp2,fsdp2_no_reshard,fsdp2_offload,accelerate_fsdp2
# 4. MFU of a ~1B Llama-style model at 2048 tokens: bf16, compile, fused AdamW, FSDP2.
run mfu --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2,fsdp2_no_reshard \
    --bench-precision=bf16 --bench-compile=on --bench-optimizer-impl=fused --bench-batch-sizes=1,2,4,8 \
    --bench-act-ckpt=off,on --bench-steps=30 --bench-warmup=10
# 5. World size 8 simulated on the one GPU.
run simulate-ws8 --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=8 --bench-precision=bf16 \
    --bench-strategies=ddp,fsdp2,fsdp2_no_reshard --bench-simulate-world-size=8 --bench-nproc=1

# Harness fidelity: the suite's step time against a bare loop of the same model (target: within 1%).
if [[ $only == all || $only == fidelity ]]; then
  python scripts/measure_fidelity.py --strategy fsdp2 --model gpt_124m --batch-size 8 --seq-len 1024 \
      --nproc 1 --steps 50 --warmup 10 --repeats 3 | tee "$out/fidelity.txt"
fi

find "$out" \( -name '*.pt.trace.json*' -o -name '*.pickle' -o -name 'rank-*.pid' \) -delete
for run in "$out"/*/; do python visualize.py "$run" > /dev/null || true; done
echo "reference results in $out"
