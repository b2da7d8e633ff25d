#!/usr/bin/env bash
# Part 7: `--bench-tune` on part 3's grid (GPT-2 124M, bf16, 6 strategies x batch 8, 32), judged
# against part 3's complete sweep of the same measurement version: is its pick within noise of the
# sweep's best, for at most 25% of the sweep's case-seconds? Its folder is per measurement version
# (tune-gpt2-124m-mN), so a changed timed loop tunes again.
source "$(dirname "$0")/common.sh"
start_part "--bench-tune on the GPT-2 124M grid"
tune_run tune-gpt2-124m 180 --bench-repeats=2 --bench-model=gpt_124m --bench-seq-len=1024 --bench-precision=bf16 \
    --bench-batch-sizes=8,32 --bench-strategies=ddp,fsdp1_no_shard,fsdp2,fsdp2_no_reshard,fsdp2_offload,accelerate_fsdp2 \
    --bench-steps=20 --bench-warmup=5
finish
