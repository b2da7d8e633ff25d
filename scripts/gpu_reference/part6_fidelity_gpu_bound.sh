#!/usr/bin/env bash
# Part 6: the harness's fidelity where the GPU is busy (GPT-2 124M, bf16, batch 32): the same paired
# suite-vs-bare-loop repeats as part 4, beside its host-bound batch 8.
source "$(dirname "$0")/common.sh"
start_part "fidelity: suite vs bare loop, bf16, GPU-bound"
fidelity ddp bf16 32
fidelity fsdp2 bf16 32
finish
