#!/usr/bin/env bash
# Part 1, smoke: does every path run on this GPU and torch? One small case each (GPT-2 124M,
# batch 4, 1 warmup + 3 steps): every strategy family at bf16, fp16, the simulated world of 8
# ranks with a 2x4 hybrid mesh (FSDP1's sharded strategies, offload included, run as NO_SHARD at
# one real rank, and a hybrid mesh needs more than one rank: simulated, rank 0 holds what it would
# hold at 8), torch.compile, activation checkpointing in the one profiled case with a memory
# snapshot (one case for the three saves a launch and a session), and a real OOM followed by a case
# that must still run.
source "$(dirname "$0")/common.sh"
start_part "smoke: every strategy family, precisions, compile, act-ckpt, profile, snapshot, OOM"
small=(--bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=4 --bench-steps=3 --bench-warmup=1)
run strategies "${small[@]}" --bench-precision=bf16 \
    --bench-strategies=ddp,fsdp1_no_shard,fsdp2,fsdp2_no_reshard,fsdp2_offload,accelerate_fsdp2
run fp16 "${small[@]}" --bench-precision=fp16 --bench-strategies=ddp,fsdp1_no_shard,fsdp2
run simulated-ws8-mesh2x4 "${small[@]}" --bench-precision=bf16 --bench-simulate-world-size=8 --bench-mesh=2x4 \
    --bench-strategies=fsdp1_full_shard,fsdp1_offload,fsdp1_hybrid_shard,fsdp2_hsdp
run compile "${small[@]}" --bench-precision=bf16 --bench-strategies=fsdp2 --bench-compile=on
run act-ckpt-profile-snapshot "${small[@]}" --bench-precision=bf16 --bench-strategies=fsdp2 --bench-act-ckpt=on \
    --bench-profile --bench-memory-snapshot
# Batch 512 x 1024 tokens needs about 300 GiB of activations in bf16 (analysis/fit.py), more than an
# H200 has: a real allocator OOM, recorded as `oom`; batch 4 after it shows the sweep goes on.
run oom-then-ok --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=512,4 --bench-steps=1 \
    --bench-warmup=0 --bench-no-probes --bench-precision=bf16 --bench-strategies=ddp
finish
