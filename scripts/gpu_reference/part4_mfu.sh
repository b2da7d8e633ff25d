#!/usr/bin/env bash
# MFU of a ~1B Llama-style model at 2048 tokens: bf16, compile, fused AdamW, FSDP2 (each case
# compiles, so this part is the longest; it is half of the original MFU grid: act-ckpt on only
# where the batch needs it is a later question).
source "$(dirname "$0")/common.sh"
expect 8 "part 4: MFU, Llama-style 1B"
run mfu --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2,fsdp2_no_reshard \
    --bench-precision=bf16 --bench-compile=on --bench-optimizer-impl=fused --bench-batch-sizes=1,2,4,8 \
    --bench-act-ckpt=off --bench-steps=30 --bench-warmup=10
finish
