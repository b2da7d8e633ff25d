#!/usr/bin/env bash
# Part 2: MFU of the ~1B Llama-style model (llama3_1b: 16 layers, d=2048, GQA) at 2048 tokens,
# bf16, torch.compile, fused AdamW, FSDP2 on one GPU, as the batch grows (every case compiles
# in its fresh process, which is most of this part's time).
source "$(dirname "$0")/common.sh"
start_part "MFU, Llama-style 1B, compile, bf16"
run mfu-llama3_1b --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2 --bench-precision=bf16 \
    --bench-compile=on --bench-optimizer-impl=fused --bench-batch-sizes=2,4,8 --bench-steps=20 --bench-warmup=5
finish
