#!/usr/bin/env bash
# GPT-2 124M, FSDP2 and accelerate strategies x batch size, up to a batch that does not fit.
source "$(dirname "$0")/common.sh"
expect 7 "part 3: GPT-2 124M sweep, FSDP2 and accelerate"
run gpt2-124m-sweep-fsdp2 --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=8,16,32,64,128 \
    --bench-grad-accum=1 --bench-precision=bf16 --bench-steps=30 --bench-warmup=5 \
    --bench-strategies=fsdp2,fsdp2_no_reshard,fsdp2_offload,accelerate_fsdp2
finish
