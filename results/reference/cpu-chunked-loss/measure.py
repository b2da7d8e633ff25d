import sys
from fsdp_bench.plan.case import Case
from fsdp_bench.analysis.fit import predict_case_peak
from tests.integration.test_peak_model import CONFIGS, _simulated_rank0
for name in sys.argv[1].split(","):
    for strategy, n in (("ddp", 2), ("fsdp2", 2), ("fsdp2", 64), ("fsdp2_no_reshard", 64)):
        for loss in sys.argv[2].split(","):
            for ba in ((2, 1), (2, 2)):
                case = Case(strategy=strategy, nproc=n, simulate=True, model=CONFIGS.get(name, name), batch_size=ba[0], grad_accum=ba[1], seq_len=32, steps=1, warmup=0, loss=loss)
                rec = _simulated_rank0(case)
                m = rec["memory"]["peak_allocated_bytes"]
                p = predict_case_peak(case)
                p = p["peak_bytes"] if isinstance(p, dict) else p
                print(f"{name:18s} {strategy:17s} {n:3d} ga{ba[1]} {loss:8s} measured {m:>11,d} predicted {p:>11,d} {100*(p-m)/m:+6.2f}%", flush=True)
