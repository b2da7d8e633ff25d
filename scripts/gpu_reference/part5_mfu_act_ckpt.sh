#!/usr/bin/env bash
# The same MFU grid with activation checkpointing on (recompute: HFU above MFU).
source "$(dirname "$0")/common.sh"
expect 8 "part 5: MFU, Llama-style 1B, activation checkpointing"
run mfu-act-ckpt --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2,fsdp2_no_reshard \
    --bench-precision=bf16 --bench-compile=on --bench-optimizer-impl=fused --bench-batch-sizes=1,2,4,8 \
    --bench-act-ckpt=on --bench-steps=30 --bench-warmup=10
finish
