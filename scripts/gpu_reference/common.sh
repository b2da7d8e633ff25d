# Sourced by every part: where the results go and `run`, which starts or resumes one run folder.
# Minutes are estimates for one H100, not measurements: no part has been timed yet.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' /' '--')
out="results/reference/${gpu}"
common=(--bench-device=cuda --bench-nproc=1 --bench-timeout=900 -q -rs)
status=0

expect() {  # expect MINUTES TITLE: say what is starting and how long it should take
  echo "== $2: expected about $1 minutes on one H100 (an estimate, not a measurement) =="
}

run() {  # run NAME pytest-args...: one run folder per question; an interrupted run continues
  local name=$1; shift
  local where=(--bench-results-dir="$out" --bench-run-id="$name")
  if [[ -d "$out/$name" ]]; then
    where=(--bench-resume "$out/$name")  # ok cases are kept, the rest run again
  fi
  local rc=0
  pytest benchmarks "${common[@]}" "${where[@]}" "$@" || rc=$?
  # Failed and oom cases are data (the report shows them), but the exit status still says so.
  if (( rc != 0 )); then
    echo "!! $name: pytest exited $rc (failed, oom or skipped-with-error cases; see the report)" >&2
    status=$rc
  fi
  find "$out/$name" \( -name '*.pt.trace.json*' -o -name '*.pickle' -o -name 'rank-*.pid' \) -delete
  python visualize.py "$out/$name" > /dev/null
}

finish() {
  echo "reference results in $out"
  exit "$status"
}
