#!/usr/bin/env bash
# Part 8: peak memory at shapes the peak model (fsdp_bench/analysis/fit.py) was never fitted on,
# eager, against max_memory_allocated: GPT-2 124M at batch 16 x 512 tokens (ddp, fsdp2) and the
# Llama-style 1B at batch 6 x 2048 (fsdp2, fused AdamW). Few steps: the peak is what is asked.
source "$(dirname "$0")/common.sh"
start_part "peak memory out of sample"
run memory-gpt2-bs16-sl512 --bench-model=gpt_124m --bench-seq-len=512 --bench-batch-sizes=16 --bench-precision=bf16 \
    --bench-strategies=ddp,fsdp2 --bench-steps=5 --bench-warmup=2
run memory-llama3_1b-bs6 --bench-model=llama3_1b --bench-seq-len=2048 --bench-batch-sizes=6 --bench-precision=bf16 \
    --bench-strategies=fsdp2 --bench-optimizer-impl=fused --bench-steps=5 --bench-warmup=2
finish
