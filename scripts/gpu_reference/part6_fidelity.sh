#!/usr/bin/env bash
# World size 8 simulated on the one GPU, then the harness's fidelity: the suite's step time
# against a bare loop of the same model (target: within 1%).
source "$(dirname "$0")/common.sh"
expect 6 "part 6: simulated world size 8, harness fidelity"
run simulate-ws8 --bench-model=gpt_124m --bench-seq-len=1024 --bench-batch-sizes=8 --bench-precision=bf16 \
    --bench-strategies=ddp,fsdp2,fsdp2_no_reshard --bench-simulate-world-size=8
python scripts/measure_fidelity.py --strategy fsdp2 --model gpt_124m --batch-size 8 --seq-len 1024 \
    --nproc 1 --steps 50 --warmup 10 --repeats 3 | tee "$out/fidelity.txt"
finish
