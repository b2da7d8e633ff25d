#!/usr/bin/env bash
# Part 4: the harness's fidelity, the suite's median step time against a hand-written loop of the
# same model and batch (scripts/bare_loop.py), interleaved so drift hits both alike (target: 1%).
source "$(dirname "$0")/common.sh"
start_part "fidelity: suite vs bare loop"
fidelity fsdp2
fidelity ddp
finish
