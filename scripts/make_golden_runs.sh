#!/usr/bin/env bash
# Regenerate the golden runs under tests/data/golden/ from REAL small CPU sweeps (2 gloo ranks,
# gpt_tiny, 3 measured steps). Run it again after the result schema or metrics change.
#
#   base/  ddp, fsdp1_full_shard, fsdp2 x batch 1,2 x grad-accum 1,2 (optimizer after sharding),
#          fsdp2 at batch 1,2 / grad-accum 1 also with the optimizer built before sharding
#          (with and without the fix); ddp at batch 2 fails with an injected OOM; the
#          fsdp1_full_shard batch 2 / grad-accum 2 case hangs (injected) and hits a 20 s timeout.
#   new/   ddp, fsdp2 x batch 1,2, grad-accum 1, plus fsdp2_no_reshard batch 1 (only in new):
#          the second run that `visualize.py --compare` tests compare against base.
#
# Only what the report reads is kept: env.json and cases/*.json (traces, logs and rank files go).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=tests/data/golden
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

common=(benchmarks/test_strategy_sweep.py -q -p no:cacheprovider --benchmark-disable
        --bench-model gpt_tiny --bench-device cpu --bench-nproc 2 --bench-steps 3 --bench-warmup 1
        --bench-seq-len 32 --bench-no-report)
node() { echo "benchmarks/test_strategy_sweep.py::test_case[$1]"; }
HANG_CASE=fsdp1_full_shard-gpt_tiny-ws2-bs2-ga2-opt_after-sl32

# --bench-resume refuses other settings (sweep.json), so each part is its own run folder and
# base/ is their cases together, with part 1's env.json.
# base, part 1: the grid (OOM injected on rank 1 of ddp at batch 2), without the case that will hang
FSDP_BENCH_FAULTS="oom@measure:1/ddp-gpt_tiny-ws2-bs2" \
  pytest "${common[@]}" --bench-results-dir "$TMP/base" --bench-strategies ddp,fsdp1_full_shard,fsdp2 \
  --bench-batch-sizes 1,2 --bench-grad-accum 1,2 --bench-timeout 300 --deselect "$(node $HANG_CASE)" || true
runs=("$TMP"/base/*/)
RUN=${runs[0]}
# base, part 2: fsdp2 with the optimizer built before sharding, with and without the fix
pytest "${common[@]}" --bench-results-dir "$TMP/base_timing" --bench-strategies fsdp2 --bench-batch-sizes 1,2 \
  --bench-grad-accum 1 --bench-optimizer-timing before_shard,before_shard_fixed --bench-timeout 300 || true
# base, part 3: both ranks hang (outside any collective), so the case reaches its own timeout
FSDP_BENCH_FAULTS="hang@measure:0/$HANG_CASE,hang@measure:1/$HANG_CASE" \
  pytest "${common[@]}" --bench-results-dir "$TMP/base_hang" --bench-strategies fsdp1_full_shard \
  --bench-batch-sizes 2 --bench-grad-accum 2 --bench-timeout 20 "$(node $HANG_CASE)" || true

# new: a second, smaller run, plus fsdp2_no_reshard in a run of its own
pytest "${common[@]}" --bench-results-dir "$TMP/new" --bench-strategies ddp,fsdp2 --bench-batch-sizes 1,2 \
  --bench-grad-accum 1 --bench-timeout 300 || true
runs=("$TMP"/new/*/)
NEW=${runs[0]}
pytest "${common[@]}" --bench-results-dir "$TMP/new_reshard" --bench-strategies fsdp2_no_reshard --bench-batch-sizes 1 \
  --bench-grad-accum 1 --bench-timeout 300 || true

rm -rf "$DEST"
for name in base new; do
  src=$([ $name = base ] && echo "$RUN" || echo "$NEW")
  mkdir -p "$DEST/$name/cases"
  cp "$src/env.json" "$DEST/$name/"
  cp "$src"/cases/*.json "$DEST/$name/cases/"
done
cp "$TMP"/base_timing/*/cases/*.json "$TMP"/base_hang/*/cases/*.json "$DEST/base/cases/"
cp "$TMP"/new_reshard/*/cases/*.json "$DEST/new/cases/"
du -sh "$DEST"
ls "$DEST"/*/cases
