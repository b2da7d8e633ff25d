#!/usr/bin/env bash
# Part 5: what torch.compile adds to the Llama-style 1B model's MFU (part 2 measured it compiled
# only): batch 8 at 2048 tokens, FSDP2, bf16, fused AdamW, eager and compiled in one run, then the
# same pair again in a run of its own (its run-to-run noise).
source "$(dirname "$0")/common.sh"
start_part "llama3_1b eager vs compiled"
run eager-vs-compiled-llama3_1b --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2 \
    --bench-precision=bf16 --bench-compile=off,on --bench-optimizer-impl=fused --bench-batch-sizes=8 \
    --bench-steps=20 --bench-warmup=5
run eager-vs-compiled-llama3_1b-again --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2 \
    --bench-precision=bf16 --bench-compile=off,on --bench-optimizer-impl=fused --bench-batch-sizes=8 \
    --bench-steps=20 --bench-warmup=5
finish
