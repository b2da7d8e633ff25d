"""Does every "fits" answer fit? `fit.largest_batch` for the three unseen configs in
tests/data/hf_configs, each strategy, world size and budget below, then that batch run for one
step on a simulated rank 0 (fake process group, on this CPU): its measured peak against the budget.

    python scripts/measure_fit_answers.py

Prints one line per answer (largest batch, predicted and measured peak as shares of the budget)
and the largest share; exits 1 when any measured peak exceeds its budget. About a minute on 2 CPU
cores. What an answer leaves unused is the margin (FIT_MARGIN: the prediction at most 93.5 % of
the budget) and one sample's step (the next batch's prediction, printed, is over it).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fsdp_bench.analysis.fit import FIT_MARGIN, largest_batch, predict_peak_bytes  # noqa: E402
from fsdp_bench.plan.case import Case  # noqa: E402
from fsdp_bench.plan.flavors import flavor_for  # noqa: E402

CONFIGS = sorted(f"hf:{p.parent}" for p in (ROOT / "tests" / "data" / "hf_configs").glob("*/config.json"))
STRATEGIES = ("ddp", "fsdp2", "fsdp2_no_reshard")
# (world size, budget in bytes): a few batches' worth above these models' state, and twice that
BUDGETS = ((2, 6_000_000), (8, 6_000_000), (2, 12_000_000))
SEQ_LEN = 32


def measured_peak(case: Case) -> int:
    """Rank 0's measured peak (MemTracker on CPU) of one simulated step of `case`."""
    from fsdp_bench.worker.loop import run
    from fsdp_bench.worker.simulate import fake_rank0

    with fake_rank0(case):
        return run(case)["memory"]["peak_allocated_bytes"]


def main() -> int:
    shares = []
    for model in CONFIGS:
        for strategy in STRATEGIES:
            for world, budget in BUDGETS:
                batch = largest_batch(strategy, flavor_for(model), world, budget, seq_len=SEQ_LEN)
                name = f"{Path(model).name} {strategy} ws{world} budget {budget:,} B"
                if batch < 1:
                    print(f"{name}: no batch fits")
                    continue
                case = Case(
                    strategy=strategy,
                    nproc=world,
                    simulate=True,
                    model=model,
                    batch_size=batch,
                    seq_len=SEQ_LEN,
                    # two steps: in a single one AdamW's state is made after backward's peak, so the
                    # measured peak lacked it (up to 24.5 % of a 6 MB budget: ddp, llama_odd_vocab)
                    # and read as budget left unused; the model counts it, as every later step has it
                    steps=1,
                    warmup=1,
                )
                peak = measured_peak(case)
                shares.append(peak / budget)
                verdict = "within" if peak <= budget else "OVER"
                predicted, following = (
                    predict_peak_bytes(strategy, flavor_for(model), world, b, seq_len=SEQ_LEN, buckets_from_start=True)[
                        "peak_bytes"
                    ]
                    for b in (batch, batch + 1)
                )
                print(
                    f"{name}: largest batch {batch}, measured peak {peak:,} B = {100 * peak / budget:.1f}% "
                    f"of the budget ({verdict}); predicted {100 * predicted / budget:.1f}%, batch {batch + 1} "
                    f"predicted {100 * following * (1 + FIT_MARGIN) / budget:.1f}% with the margin",
                    flush=True,
                )
    over = sum(s > 1 for s in shares)
    print(f"{len(shares)} answers, {over} over their budget; largest share of a budget {100 * max(shares):.1f}%")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
