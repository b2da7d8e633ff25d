#!/usr/bin/env bash
# GPT-2 124M, DDP and FSDP1 strategies x batch size, up to a batch that does not fit (a real OOM).
# FSDP1 sharded strategies at one rank are skipped (FSDP1 runs them as NO_SHARD at world size 1).
source "$(dirname "$0")/common.sh"
expect 7 "part 2: GPT-2 124M sweep, DDP and FSDP1"
run gpt2-124m-sweep-ddp-fsdp1 --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=8,16,32,64,128 \
    --bench-grad-accum=1 --bench-precision=bf16 --bench-steps=30 --bench-warmup=5 \
    --bench-strategies=ddp,fsdp1_full_shard,fsdp1_shard_grad_op,fsdp1_no_shard,fsdp1_offload
finish
