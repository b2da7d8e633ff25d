#!/usr/bin/env bash
# Part 4: the harness's fidelity, the suite's median step time against a hand-written loop of the
# same model, batch and precision (scripts/bare_loop.py), in paired repeats (target: 1%): bf16 at
# batch 8, where GPT-2 124M's steps are short and host work shows (the regime users decide in).
# The fp32 batch-8 pair of the first H100 run is GPU-bound and could not show a host-side gap;
# part 6 measures bf16 at batch 32, GPU-bound.
source "$(dirname "$0")/common.sh"
start_part "fidelity: suite vs bare loop, bf16"
fidelity ddp bf16 8
fidelity fsdp2 bf16 8
finish
