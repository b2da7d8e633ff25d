#!/usr/bin/env bash
# Part 3: GPT-2 124M at 1024 tokens, bf16: every strategy that runs at one real rank x batch size.
# FSDP1's sharded strategies (fsdp1_full_shard, fsdp1_shard_grad_op, fsdp1_offload) are left out:
# at world size 1 FSDP1 runs them as NO_SHARD, so they would be skipped (part 1 runs them simulated).
source "$(dirname "$0")/common.sh"
start_part "GPT-2 124M strategy sweep"
run gpt2-124m-sweep --bench-model=gpt_124m --bench-seq-len=1024 --bench-precision=bf16 --bench-batch-sizes=8,32 \
    --bench-strategies=ddp,fsdp1_no_shard,fsdp2,fsdp2_no_reshard,fsdp2_offload,accelerate_fsdp2 \
    --bench-steps=20 --bench-warmup=5
finish
