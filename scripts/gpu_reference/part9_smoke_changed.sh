#!/usr/bin/env bash
# Part 9: a 3-case smoke of the worker as it is now (ddp, fsdp2, accelerate_fsdp2; GPT-2 124M, bf16,
# batch 4, 1 warmup + 3 steps), first in every slot whose worker code changed since its last one:
# the run folder is named after a hash of fsdp_bench/worker's source, so an unchanged worker is done.
# Then one GPU-bound case profiled (ddp batch 32, 96% NVML-busy on the H100): its trace, in the
# archive, is the recorded GPU-bound timeline the busy-share tests lack (scripts/extract_trace_fixture.py).
source "$(dirname "$0")/common.sh"
start_part "smoke of the worker as changed"
run "smoke-worker-$(worker_hash)" --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=4 --bench-steps=3 \
    --bench-warmup=1 --bench-precision=bf16 --bench-strategies=ddp,fsdp2,accelerate_fsdp2
run "profile-gpu-bound-$(worker_hash)" --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=32 \
    --bench-steps=3 --bench-warmup=1 --bench-precision=bf16 --bench-strategies=ddp --bench-profile
finish
