#!/usr/bin/env bash
# Reference results on one NVIDIA GPU (H100/H200), written under results/reference/<gpu-name>/.
# The work is split into parts of at most about 8 minutes each (estimates, not measurements),
# scripts/gpu_reference/part*.sh; each can run alone and continues an interrupted run
# (--bench-resume). This runs them all in order, or the parts named:
#     bash scripts/gpu_reference.sh            # every part (about 43 minutes on one H100)
#     bash scripts/gpu_reference.sh 4 5        # parts 4 and 5
# Commit the run folders without traces and snapshots (each part deletes them).
set -euo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
(( ${#parts[@]} )) || parts=(1 2 3 4 5 6)
status=0
for n in "${parts[@]}"; do
  bash scripts/gpu_reference/part"${n}"_*.sh || status=$?
done
exit "$status"
