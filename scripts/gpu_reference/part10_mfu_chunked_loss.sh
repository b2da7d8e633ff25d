#!/usr/bin/env bash
# Part 10: MFU of the Llama-style 1B model past batch 8 (issue 33's goal: 50% on one GPU). Part 2's
# batch 8 was the memory ceiling, and most of it was the full loss's vocab-wide fp32 tensors; the
# chunked loss (--bench-loss chunked) keeps none, so batch 12 and 16 fit by the peak model
# (55.6 and 69.1 GiB predicted). FSDP2, bf16, torch.compile, fused AdamW, as part 2.
source "$(dirname "$0")/common.sh"
start_part "MFU past batch 8: llama3_1b with the chunked loss"
run mfu-llama3_1b-chunked-loss --bench-model=llama3_1b --bench-seq-len=2048 --bench-strategies=fsdp2 \
    --bench-precision=bf16 --bench-compile=on --bench-optimizer-impl=fused --bench-loss=chunked \
    --bench-batch-sizes=8,12,16 --bench-steps=20 --bench-warmup=5
finish
