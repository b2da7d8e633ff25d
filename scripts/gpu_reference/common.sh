# shellcheck shell=bash
# Sourced by every part (scripts/gpu_reference/part*.sh) with the part's arguments:
#
#   bash scripts/gpu_reference/partN_NAME.sh --out DIR [--results DIR] [--gpu-name NAME]
#   bash scripts/gpu_reference/partN_NAME.sh --dry-run [--gpu-name NAME]
#
#   --out DIR      where the part leaves its log (partN_NAME.log) and ONE archive
#                  (partN_NAME.tar.gz: its run folders and the log), finished, failed or interrupted
#   --results DIR  where the run folders go (default results/reference/<gpu-name>, the visible GPU's
#                  name from nvidia-smi; without a GPU, results/reference/$REFERENCE_GPU_DIR, by
#                  default NVIDIA-H100-80GB-HBM3); the part's are under DIR/partN_NAME/ and a
#                  second run continues them (--bench-resume)
#   --dry-run      launch nothing: each run's case count and the project's own duration estimate
#                  (pytest --collect-only) of what is still to measure, then the part's total. A
#                  run whose folder already holds every case ok at this measurement version
#                  (results.schema.MEASUREMENT_VERSION; older ones are re-run by --bench-resume)
#                  is "done" and counts 0; so is a fidelity report already written at it
#   --gpu-name     whose published figures the estimate uses (--bench-gpu-name; default: the visible
#                  GPU, else H100 SXM)
#   --archive-only run nothing: write the archive of what the part's run folders and log hold now
#                  (gpu_reference.sh, for a part that was killed before its EXIT trap could)
#
# FSDP_BENCH_REFERENCE_STANDIN=cpu swaps every case for a tiny CPU stand-in (gpt_tiny, 2 steps):
# the parts' robustness is tested with it on machines without a GPU (tests/integration/test_gpu_reference.py).
# Not -e: a failing step is reported and kept in the exit status, and the part goes on to its archive.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
source scripts/gpu_reference/steps.sh

part=$(basename "$0" .sh)
py=python3  # the GPU machine has no virtual environment
dry_run="" out="" results="" gpu_name="" archive_only=""
ARCHIVE_LIMIT_BYTES=$((16 * 1024 * 1024))
# "TRACES SNAPSHOTS" the archive keeps at most; the next, smaller pair when it is over the limit.
ARCHIVE_KEEP=("2 1" "1 1" "1 0" "0 0")

usage_error() {  # one line, exit 2
  echo "$part: $1 (usage: $0 --out DIR [--results DIR] [--gpu-name NAME] | --dry-run [--gpu-name NAME])" >&2
  exit 2
}

parse_part_args() {
  while (( $# )); do
    case $1 in
      --dry-run) dry_run=1 ;;
      --archive-only) archive_only=1 ;;
      --out|--results|--gpu-name)
        (( $# >= 2 )) && [[ -n $2 ]] || usage_error "$1 needs a value"
        case $1 in --out) out=$2 ;; --results) results=$2 ;; --gpu-name) gpu_name=$2 ;; esac
        shift ;;
      *) usage_error "unknown argument '$1'" ;;
    esac
    shift
  done
  [[ -n $dry_run || -n $out ]] || usage_error "--out DIR is required (where the log and the archive go)"
}

parse_part_args "$@"

# Every run of every part: one GPU, grad-accum 1 unless a run says otherwise (the option's default
# is 1,2, which doubled parts by accident), skip reasons shown, no cache folder in the checkout.
common=(-p no:cacheprovider -q -rs --bench-device=cuda --bench-nproc=1 --bench-timeout=900 --bench-grad-accum=1)
[[ -n $gpu_name ]] && common+=(--bench-gpu-name="$gpu_name")
standin=() standin_mode=""
if [[ ${FSDP_BENCH_REFERENCE_STANDIN:-} == cpu ]]; then
  standin_mode=cpu
  # Appended after a run's own options, so these win (pytest keeps an option's last value). Exactly
  # the steps asked: CPU's adaptive default measured each stand-in case for ~4 s more. No probe
  # steps: the tests of these scripts read none of their figures.
  standin=(--bench-device=cpu --bench-model=gpt_tiny --bench-seq-len=32 --bench-batch-sizes=2 --bench-steps=2
           --bench-warmup=0 --bench-precision=fp32 --bench-compile=off --bench-act-ckpt=off --bench-timeout=120
           --bench-target-ci-pct=0 --bench-no-probes)
elif [[ -n ${FSDP_BENCH_REFERENCE_STANDIN:-} ]]; then
  usage_error "FSDP_BENCH_REFERENCE_STANDIN='$FSDP_BENCH_REFERENCE_STANDIN': the only stand-in is 'cpu'"
fi

# --- dry run: the project's own estimate of each run ---------------------------------------------

part_cases=0 part_seconds=0 figures="" last_estimate_s=0

estimate_fields() {  # the estimate line's "<seconds> <cases> <repeats>" (1m05s or 2h03m formats)
  awk '{
    for (i = 1; i <= NF; i++) {
      if ($i == "duration" && d == "") d = $(i + 1)
      if ($i == "for" && n == "") n = $(i + 1)
      if ($i == "repeats" && r == "") r = $(i - 1)
    }
    if (d ~ /h/) { split(d, a, /[hm]/); s = a[1] * 3600 + a[2] * 60 } else { split(d, a, /[ms]/); s = a[1] * 60 + a[2] }
    print s, n + 0, (r ? r : 1)
  }' <<<"$1"
}

estimate_run() {  # estimate_run NAME PYTEST-ARGS...: count and time one run by `pytest --collect-only`
  local name=$1 text line rc=0 seconds cases repeats collected kept
  shift
  text=$("$py" -m pytest benchmarks --collect-only "$@" 2>&1) || rc=$?
  line=$(grep -m1 '^fsdp-bench: estimated duration' <<<"$text")
  if (( rc != 0 )) || [[ -z $line ]]; then
    echo "!! $name: pytest --collect-only exited $rc without an estimate:" >&2
    tail -3 <<<"$text" >&2
    status=1
    last_estimate_s=-1
    return 0
  fi
  read -r seconds cases repeats < <(estimate_fields "$line")
  kept=$(grep -Eo '\(([0-9]+) kept from the resumed run\)' <<<"$line" | grep -Eo '[0-9]+')
  kept=${kept:-0}
  collected=$(grep -Eo '^[0-9]+(/[0-9]+)? tests? collected' <<<"$text" | grep -Eo '^[0-9]+')
  figures=${line##*a rough figure from model FLOPs }  # "with <GPU>'s published peak, see ..."
  if (( ${collected:-0} > cases + kept )); then
    echo "!! $name: $((collected - cases - kept)) collected case(s) would be skipped: drop them from the run" >&2
  fi
  last_estimate_s=$seconds
  if (( cases == 0 )); then  # every case kept: nothing left to measure
    printf '  %-26s done (%d case(s) ok at measurement version %s)\n' "$name" "$kept" "$(measurement_version)"
    last_estimate_s=0
    return 0
  fi
  local runs="" minutes
  (( repeats > 1 )) && runs=" x $repeats runs"
  minutes=$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s / 60 }')
  printf '  %-26s %3d case(s)%-10s %5s min' "$name" "$cases" "$runs" "$minutes"
  (( kept )) && printf '  (%d kept)' "$kept"
  echo
  part_cases=$((part_cases + cases * repeats))
  part_seconds=$((part_seconds + seconds))
}

measurement_version() {  # the worker loop's version (results.schema): what a resume keeps
  local v
  v=$("$py" -c 'from fsdp_bench.results.schema import MEASUREMENT_VERSION; print(MEASUREMENT_VERSION)')
  # a folder named "-m" would read as done for any version: stop instead
  [[ $v =~ ^[0-9]+$ ]] || { echo "!! $py cannot read fsdp_bench.results.schema's MEASUREMENT_VERSION" >&2; return 1; }
  echo "$v"
}

bare_loop_version() {  # what a fidelity report compared against: scripts/bare_loop.py's BARE_LOOP_VERSION
  local v
  v=$(sed -n 's/^BARE_LOOP_VERSION = \([0-9][0-9]*\)$/\1/p' scripts/bare_loop.py)
  # a report named "-b" would read as done for any version: stop instead
  [[ -n $v ]] || { echo "!! scripts/bare_loop.py has no 'BARE_LOOP_VERSION = N' line" >&2; return 1; }
  echo "$v"
}

worker_hash() {  # 8 hex digits of the worker's source: a smoke per version of the code that measures
  find fsdp_bench/worker -name '*.py' | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-8
}


# --- a real run: log, traps, archive -------------------------------------------------------------

results_folder() {  # the default --results: results/reference/<gpu-name>
  local name
  if [[ -n $standin_mode ]]; then
    echo "results/reference/cpu-standin"
    return
  fi
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' /' '--')
  if [[ -z $name && -n $dry_run ]]; then  # planning without a GPU: the GPU whose results are committed
    echo "results/reference/${REFERENCE_GPU_DIR:-NVIDIA-H100-80GB-HBM3}"
    return
  fi
  [[ -n $name ]] || { echo "!! no NVIDIA GPU listed by nvidia-smi, whose name the default results folder takes: without a GPU, plan with --dry-run; if the GPU is there but nvidia-smi cannot list it, give --results DIR (where the run folders go) to run anyway" >&2; return 1; }
  echo "results/reference/$name"
}

start_log() {  # everything this part prints also goes to its log; fds 3 and 4 keep the terminal
  mkdir -p "$out" || usage_error "--out: cannot create '$out'"
  out=$(cd "$out" && pwd)
  log="$out/$part.log"
  archive="$out/$part.tar.gz"
  exec 3>&1 4>&2
  # tee ignores the signals: it must outlive them to log the stop and the archive
  exec > >(trap '' INT TERM HUP; exec tee -a "$log") 2>&1
  tee_pid=$!
}

close_log() {  # restore the terminal and let tee write the last lines before the log is packed
  exec 1>&3 2>&4
  local _
  for _ in {1..50}; do
    kill -0 "$tee_pid" 2>/dev/null || return 0
    sleep 0.1
  done
}

archive_list() {  # archive_list TRACES SNAPSHOTS: the part's files under $results, at most that many of each
  local traces=0 snapshots=0 f
  [[ -n $results && -d $results/$part ]] || return 0
  (cd "$results" && find "$part" -type f ! -name '*.pid' ! -name '.lock' | LC_ALL=C sort) |
    while IFS= read -r f; do
      case $f in
        *.pt.trace.json*) (( traces++ < $1 )) && echo "$f" ;;
        *.pickle) (( snapshots++ < $2 )) && echo "$f" ;;
        *) echo "$f" ;;
      esac
    done
  return 0
}

write_archive() {  # one tar.gz of the part's run folders and its log, under the size limit
  local list tmp="$archive.partial" keep size folders=()
  list=$(mktemp)
  # no run folder yet (the part stopped before its first run): the log alone
  [[ -n $results && -d $results/$part ]] && folders=(-C "$results" -T "$list")
  for keep in "${ARCHIVE_KEEP[@]}"; do
    # shellcheck disable=SC2086  # keep is "TRACES SNAPSHOTS"
    archive_list $keep >"$list"
    if ! tar -czf "$tmp" "${folders[@]}" -C "$out" "$part.log"; then
      echo "!! $part: tar failed; the run folders are in $results/$part" >&2
      rm -f "$list" "$tmp"
      return 1
    fi
    size=$(stat -c %s "$tmp")
    (( size < ARCHIVE_LIMIT_BYTES )) && break
    echo "!! $part: archive of $size bytes with traces/snapshots '$keep' is over 16 MiB; keeping fewer" >&2
  done
  rm -f "$list"
  mv -f "$tmp" "$archive"
  echo "== $part: archive $archive ($size bytes; log $log)"
  (( size < ARCHIVE_LIMIT_BYTES )) || echo "!! $part: still over 16 MiB without traces or snapshots" >&2
}

on_exit() {  # EXIT: the archive, whatever ended the part; then the part's exit status
  local rc=$?
  trap '' INT TERM HUP  # a second Ctrl-C must not cut the archive short
  echo "== $part: ended $(date -u +%FT%TZ) with status $rc; writing its archive"
  close_log
  write_archive 2>&1 | tee -a "$log" || rc=1
  exit "$rc"
}

archive_now() {  # --archive-only: the archive of what is there, noted in the log; exits
  mkdir -p "$out" || usage_error "--out: cannot create '$out'"
  out=$(cd "$out" && pwd)
  log="$out/$part.log" archive="$out/$part.tar.gz"
  [[ -n $results ]] || results=$(results_folder) || exit 2
  [[ -d $results ]] && results=$(cd "$results" && pwd)
  echo "== $part: killed before its own archive; archived by gpu_reference.sh $(date -u +%FT%TZ)" | tee -a "$log"
  write_archive 2>&1 | tee -a "$log"
  exit "${PIPESTATUS[0]}"
}

start_part() {  # start_part TITLE: the log and the traps (the dry run has neither)
  if [[ -n $dry_run ]]; then
    [[ -n $results ]] || results=$(results_folder)
    echo "$part ($1), by the project's own estimate (pytest --collect-only), against $results:"
    return
  fi
  if [[ -n $archive_only ]]; then
    archive_now
  fi
  start_log
  trap on_exit EXIT
  trap_signals
  echo "== $part: $1; started $(date -u +%FT%TZ) on ${HOSTNAME:-?}"
  if [[ -z $results ]]; then
    results=$(results_folder) || exit 2
  fi
  mkdir -p "$results/$part" || exit 2
  results=$(cd "$results" && pwd)
  echo "== run folders under $results/$part; log $log; archive $archive"
}

# --- what the parts call ---------------------------------------------------------------------------

launch_run() {  # launch_run NAME PYTEST-ARGS... -- [RESUME-ARGS]: the run, in a new folder or resumed
  local name=$1 args=() where
  shift
  while (( $# )) && [[ $1 != -- ]]; do args+=("$1"); shift; done
  shift
  where=("$@")
  (( ${#where[@]} )) || where=(--bench-results-dir="$results/$part" --bench-run-id="$name")
  echo "== $name: pytest benchmarks ${args[*]} ${where[*]}"
  # Failed and oom cases are data (the report shows them); the exit status still says so.
  step "$name" "$py" -m pytest benchmarks "${args[@]}" "${where[@]}"
}

run() {  # run NAME PYTEST-ARGS...: one run folder per question; an interrupted run continues
  local name=$1
  shift
  local args=("${common[@]}" "$@" "${standin[@]}")
  local folder="$results/$part/$name" resume=()
  # ok cases of this measurement version are kept, the rest (failed, older loop) run again
  [[ -d $folder/cases ]] && resume=(--bench-resume "$folder")
  if [[ -n $dry_run ]]; then  # what is still to measure: a resume's estimate counts only that
    estimate_run "$name" "${args[@]}" "${resume[@]}"
    return 0
  fi
  if (( ${#resume[@]} )); then
    estimate_run "$name" "${args[@]}" "${resume[@]}" >/dev/null
    if (( last_estimate_s == 0 )); then
      echo "== $name: done, every case ok at measurement version $(measurement_version) ($folder)"
      return 0
    fi
  fi
  launch_run "$name" "${args[@]}" -- "${resume[@]}"
}

# A tuning stops after its case-seconds and may finish the round it is in (at most 3 cases x its
# repeats): the estimate of the whole grid would overstate it several times.
TUNE_ROUND_S=120
SESSION_EXTRA_S=20  # pytest's start and the report at the end

tune_run() {  # tune_run NAME TUNE-TIME-S PYTEST-ARGS...: --bench-tune, a folder per measurement version
  local name tune_s=$2 version
  version=$(measurement_version) || { status=2; return 0; }
  name="$1-m$version"
  shift 2
  local args=("${common[@]}" --bench-tune --bench-tune-time-s="$tune_s" "$@" "${standin[@]}")
  local folder="$results/$part/$name" resume=()
  if compgen -G "$folder/tune/tune-*.json" >/dev/null; then
    if [[ -n $dry_run ]]; then printf '  %-26s done (answered in %s/tune)\n' "$name" "$folder"
    else echo "== $name: done, answered ($folder/tune)"; fi
    return 0
  fi
  [[ -d $folder/cases ]] && resume=(--bench-resume "$folder")
  if [[ -n $dry_run ]]; then
    local before=$part_seconds cap=$((tune_s + TUNE_ROUND_S + SESSION_EXTRA_S))
    estimate_run "$name" "${args[@]}" "${resume[@]}"
    if (( part_seconds - before > cap )); then
      part_seconds=$((before + cap))
      echo "    (it stops after $tune_s case-seconds and the round it is in: counted as $cap s)"
    fi
    return 0
  fi
  launch_run "$name" "${args[@]}" -- "${resume[@]}"
}


# The fidelity measurement: the suite's step time vs scripts/bare_loop.py on the same case, paired
# repeats (bare loop then suite, back to back) so drift hits both alike.
fidelity_model=gpt_124m fidelity_seq=1024 fidelity_steps=20 fidelity_warmup=5 fidelity_repeats=2
if [[ -n $standin_mode ]]; then  # the same values the stand-in options give
  fidelity_model=gpt_tiny fidelity_seq=32 fidelity_steps=2 fidelity_warmup=0 fidelity_repeats=1
fi

fidelity() {  # fidelity STRATEGY PRECISION BATCH: scripts/measure_fidelity.py, its report in the run folders
  local strategy=$1 precision=$2 batch=$3
  [[ -n $standin_mode ]] && batch=2
  # the report names the measurement version of the suite's loop it compared (results.schema) and
  # the bare loop's version (scripts/bare_loop.py; reports without it were measured against 1)
  local bare version
  bare=$(bare_loop_version) || { status=2; return 0; }
  version=$(measurement_version) || { status=2; return 0; }
  local name="fidelity-$strategy-$precision-bs$batch-m$version-b$bare"
  if [[ -s $results/$part/$name.txt ]]; then  # a result is never overwritten: measured once per version
    [[ -n $dry_run ]] && printf '  %-26s done (%s)\n' "$name" "$results/$part/$name.txt"
    [[ -z $dry_run ]] && echo "== $name: done ($results/$part/$name.txt)"
    return 0
  fi
  if [[ -n $dry_run ]]; then
    # Estimated as the suite's case run twice per repeat: the bare loop does the same steps
    # without the probe steps, so counting it as a case errs long.
    estimate_run "$name" "${common[@]}" --bench-strategies="$strategy" --bench-model="$fidelity_model" \
      --bench-batch-sizes="$batch" --bench-seq-len="$fidelity_seq" --bench-steps="$fidelity_steps" \
      --bench-warmup="$fidelity_warmup" --bench-repeats=$((2 * fidelity_repeats)) --bench-precision="$precision" \
      "${standin[@]}"
    return 0
  fi
  local report="$results/$part/$name.txt"
  echo "== $name: scripts/measure_fidelity.py, report $report"
  # into a temporary file first: a stopped measurement leaves no half report
  # shellcheck disable=SC2016  # $@ and $0 are the inner bash's
  step "$name" bash -c 'exec "$@" >"$0"' "$report.partial" "$py" scripts/measure_fidelity.py --strategy "$strategy" \
    --model "$fidelity_model" --batch-size "$batch" --seq-len "$fidelity_seq" --nproc 1 --precision "$precision" \
    --steps "$fidelity_steps" --warmup "$fidelity_warmup" --repeats "$fidelity_repeats" --no-overhead
  if grep -q '^suite median step time' "$report.partial" 2>/dev/null; then
    mv -f "$report.partial" "$report"
    cat "$report"
  fi
  return 0
}

finish() {  # the part's total (dry run) or its exit status (the EXIT trap writes the archive)
  if [[ -n $dry_run ]]; then
    echo "$part: $part_cases case(s), $(awk -v s="$part_seconds" 'BEGIN { printf "%.1f", s / 60 }') min ($part_seconds s)"
    [[ -n $figures ]] && echo "  (estimated from model FLOPs $figures)"
  fi
  exit "$status"
}
