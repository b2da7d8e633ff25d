#!/usr/bin/env bash
# The accelerate FSDP2 benchmark's question: optimizer built after / before / before+fixed;
# then ZeRO-2 vs ZeRO-3 on the Qwen2-1.5B shape (the suite fixes bf16, compile, fused AdamW).
source "$(dirname "$0")/common.sh"
expect 7 "part 1: optimizer timing, ZeRO-2 vs ZeRO-3"
run optimizer-timing --bench-suite=optimizer-timing --bench-steps=30 --bench-warmup=5
run zero2-vs-zero3 --bench-suite=zero2-vs-zero3 --bench-steps=20 --bench-warmup=5
finish
