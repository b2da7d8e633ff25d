#!/usr/bin/env bash
# Reference results on one NVIDIA GPU (H100/H200), in parts (scripts/gpu_reference/partN_*.sh):
#   1 smoke: every strategy family, bf16 and fp16, compile, act-ckpt, profile, snapshot, a real OOM
#   2 MFU of the Llama-style 1B model      3 GPT-2 124M strategy sweep      4 fidelity, bf16 batch 8
#   5 llama3_1b eager vs compiled          6 fidelity, bf16 batch 32        7 --bench-tune on part 3's grid
#   8 peak memory out of sample            9 a smoke of the worker as changed
#  10 llama3_1b MFU past batch 8 with the chunked loss
#
#   bash scripts/gpu_reference.sh --out DIR [--results DIR] [PART...]     # every part in order, or those named
#   bash scripts/gpu_reference.sh --budget-min M --out DIR [--results DIR] # a GPU slot: the queue, within M minutes
#   bash scripts/gpu_reference.sh --dry-run [--budget-min M] [--gpu-name NAME] [--results DIR] [PART...]
#
#   --out DIR        where each part leaves its log and archive (a dry run writes nothing)
#   --results DIR    where the run folders go; default results/reference/<the visible GPU's name>,
#                    so a run without it needs a GPU that nvidia-smi lists
#   --gpu-name NAME  whose published peak FLOPs the estimates use (a row of the table in
#                    fsdp_bench/analysis/flops.py; default: the visible GPU, else H100 SXM)
#   --budget-min M   run the queue (below) within M minutes
#   --dry-run        launch nothing: each part's cases and estimated minutes; no GPU needed
#   -h, --help       this text
#
# The queue is the parts in value order (QUEUE); each counts only what the results folder (default
# results/reference/<gpu>, see common.sh) does not hold yet at this measurement version, so a part
# that is done costs nothing and an interrupted one continues. --budget-min M runs, in queue order,
# each part whose estimate fits in what is left of M minutes (less a reserve for the last part's
# stop), under `timeout`; the dry run with --budget-min lists what the next slot would run.
# Each part leaves DIR/partN_NAME.tar.gz (its run folders and log, under 16 MiB), finished, failed,
# interrupted or killed (then this script writes it). A failed part does not stop the next; an
# interrupt stops all.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu_reference/steps.sh

PART_LIMIT_MIN=8
QUEUE_LIMIT_MIN=27  # the queue in at most three slots of 9 minutes of commands
QUEUE=(9 3 7 10 4 6 5 8)  # by value: smoke of a changed worker, sweep, tuner, MFU, fidelity, compile, memory
STOP_RESERVE_S=60  # a stopped part's pytest ends its case, writes its results, then the archive
MIN_PART_S=60      # a part with less left is not started

usage_error() {
  echo "gpu_reference.sh: $1 (usage: $0 --out DIR [--results DIR] [--budget-min M] [PART...] | --dry-run [--budget-min M] [--gpu-name NAME] [--results DIR] [PART...])" >&2
  exit 2
}

fail() {  # fail MESSAGE: a check before any part; one line, exit 2
  echo "gpu_reference.sh: $1" >&2
  exit 2
}

show_help() {  # the header above, which is the one place the usage and the options are written
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' scripts/gpu_reference.sh
  exit 0
}

part_script() {  # part_script N: the one script of part N
  local found=(scripts/gpu_reference/part"$1"_*.sh)
  [[ $1 =~ ^[0-9]+$ && -f ${found[0]} && ${#found[@]} == 1 ]] || return 1
  echo "${found[0]}"
}

pass=() parts=() dry_run="" budget_s="" out_dir="" results_dir="" gpu_name=""
while (( $# )); do
  case $1 in
    -h|--help) show_help ;;
    --dry-run) dry_run=1 ;;
    --budget-min)
      (( $# >= 2 )) && [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage_error "--budget-min needs a number of minutes"
      budget_s=$(awk -v m="$2" 'BEGIN { printf "%d", m * 60 }')
      (( budget_s > STOP_RESERVE_S + MIN_PART_S )) || usage_error "--budget-min $2: leaves no time for a part"
      shift ;;
    --out|--results|--gpu-name)
      (( $# >= 2 )) && [[ -n $2 ]] || usage_error "$1 needs a value"
      pass+=("$1" "$2")
      # the last one wins, as in the parts
      case $1 in --out) out_dir=$2 ;; --results) results_dir=$2 ;; --gpu-name) gpu_name=$2 ;; esac
      shift ;;
    -*) usage_error "unknown option '$1'" ;;
    *) part_script "$1" >/dev/null || usage_error "no part '$1' (scripts/gpu_reference/part$1_*.sh)"; parts+=("$1") ;;
  esac
  shift
done
[[ -n $dry_run || " ${pass[*]} " == *" --out "* ]] || usage_error "--out DIR is required (where each part leaves its log and archive)"
if (( ${#parts[@]} == 0 )); then
  if [[ -n $budget_s ]]; then
    parts=("${QUEUE[@]}")
  else
    for script in scripts/gpu_reference/part*_*.sh; do
      name=${script##*/part}
      parts+=("${name%%_*}")
    done
    mapfile -t parts < <(printf '%s\n' "${parts[@]}" | sort -n)
  fi
fi

# --- checks before any part ---------------------------------------------------------------------
# Each part checks these too, but only once it runs: every part would then fail on the same input
# and say so (and write an empty archive), ten times over. Checked here once instead.

if [[ -n $gpu_name ]]; then
  # the project's own check (the one pytest --bench-gpu-name makes), against its one peak-FLOPs table
  # shellcheck disable=SC2016  # Python, not shell
  check='import sys
from fsdp_bench.analysis.duration import check_gpu_name
try:
    check_gpu_name(sys.argv[1])
except ValueError as e:
    print(str(e).replace("--bench-gpu-name", "--gpu-name", 1))
    sys.exit(3)'
  said=$(python3 -c "$check" "$gpu_name" 2>&1)
  case $? in
    0) ;;
    3) fail "${said##*$'\n'}" ;;  # the message is its last line
    *) fail "--gpu-name $gpu_name: python3 could not check it against fsdp_bench's peak-FLOPs table (${said##*$'\n'})" ;;
  esac
fi

if [[ -z $dry_run ]]; then
  # Without --results a part names its run folders after the GPU that nvidia-smi lists (common.sh's
  # results_folder): the same query, so that this stops no run the parts would have started. The
  # stand-in runs on CPU and names its own folder.
  if [[ -z $results_dir && -z ${FSDP_BENCH_REFERENCE_STANDIN:-} ]] &&
     [[ -z $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) ]]; then
    fail "no NVIDIA GPU listed by nvidia-smi, whose name the default results folder takes (results/reference/<GPU name>): without a GPU, plan with --dry-run; if the GPU is there but nvidia-smi cannot list it, give --results DIR (where the run folders go) to run anyway"
  fi
  # every part writes its log and archive under --out
  if ! said=$(mkdir -p -- "$out_dir" 2>&1); then
    said=${said%%$'\n'*}
    fail "--out $out_dir: cannot create that folder (${said##*: }); each part leaves its log and archive in it"
  elif [[ ! -w $out_dir ]]; then
    fail "--out $out_dir: that folder is not writable; each part leaves its log and archive in it"
  fi
fi

minutes() { awk -v s="$1" 'BEGIN { printf "%.1f", s / 60 }'; }

estimate_part() {  # estimate_part N: the part's dry run; sets part_text, part_name, part_cases, part_s
  # the part's own options but --out (a dry run writes nothing)
  local opts=() skip="" arg
  for arg in "${pass[@]}"; do
    if [[ -n $skip ]]; then skip=""; continue; fi
    [[ $arg == --out ]] && { skip=1; continue; }
    opts+=("$arg")
  done
  part_text=$(bash "$(part_script "$1")" --dry-run "${opts[@]}") || return 1
  # the part's last line but one: "partN_NAME: C case(s), M min (S s)"
  local summary
  summary=$(grep -E '^part[0-9]+_[^ ]*: [0-9]+ case\(s\), ' <<<"$part_text" | tail -1)
  [[ -n $summary ]] || return 1
  read -r part_name part_cases part_s < <(awk '{ gsub(/[:(]/, ""); print $1, $2, $(NF - 1) }' <<<"$summary")
}

in_queue() { [[ " ${QUEUE[*]} " == *" $1 "* ]]; }

dry_run_all() {  # every part's estimate, the table, the limits and, with a budget, the next slot
  local n rows=() total_s=0 total_cases=0 queue_s=0 failed=0 over=0 row name cases seconds
  local slot=() later=() left=$(( ${budget_s:-0} - STOP_RESERVE_S ))
  for n in "${parts[@]}"; do
    if ! estimate_part "$n"; then
      echo "$part_text"; failed=1; continue
    fi
    echo "$part_text"
    rows+=("$part_name $part_cases $part_s")
    total_s=$((total_s + part_s)); total_cases=$((total_cases + part_cases))
    in_queue "$n" && queue_s=$((queue_s + part_s))
    if [[ -n $budget_s ]] && (( part_s > 0 )); then
      if (( part_s <= left )); then slot+=("$part_name"); left=$((left - part_s)); else later+=("$part_name"); fi
    fi
  done
  echo
  printf '%-28s %6s %8s\n' part cases minutes
  for row in "${rows[@]}"; do
    read -r name cases seconds <<<"$row"
    printf '%-28s %6d %8s' "$name" "$cases" "$(minutes "$seconds")"
    if (( seconds > PART_LIMIT_MIN * 60 )); then echo "  over ${PART_LIMIT_MIN} min"; over=1
    elif (( seconds == 0 )); then echo "  done"; else echo; fi
  done
  printf '%-28s %6d %8s\n' total "$total_cases" "$(minutes "$total_s")"
  printf '%-28s %6s %8s' "queue (${QUEUE[*]})" "" "$(minutes "$queue_s")"
  if (( queue_s > QUEUE_LIMIT_MIN * 60 )); then echo "  over ${QUEUE_LIMIT_MIN} min"; over=1; else echo; fi
  echo "limits: ${PART_LIMIT_MIN} min per part, ${QUEUE_LIMIT_MIN} min for what the queue still has to do (estimates, not measurements)"
  if [[ -n $budget_s ]]; then
    echo "next slot (--budget-min $(minutes "$budget_s"), ${STOP_RESERVE_S} s kept for the last stop): ${slot[*]:-nothing left to run}"
    echo "  $(minutes $(( budget_s - STOP_RESERVE_S - left ))) min by the estimate; after it: ${later[*]:-nothing}"
  fi
  (( failed )) && echo "!! a part's dry run failed (see above)" >&2
  (( failed || over )) && exit 1
  exit 0
}

[[ -n $dry_run ]] && dry_run_all

archive_if_killed() {  # archive_if_killed N STARTED: a part KILLed (past its stop reserve, or by
  # anything else) never ran its EXIT trap; its run folders still go out in an archive
  local script archive="" i
  script=$(part_script "$1")
  for (( i = 0; i < ${#pass[@]}; i += 2 )); do
    [[ ${pass[i]} == --out ]] && archive="${pass[i + 1]}/$(basename "$script" .sh).tar.gz"
  done
  [[ -n $archive && -f $archive ]] && (( $(stat -c %Y "$archive") >= $2 )) && return 0
  echo "!! part $1: ended without its archive; writing it from its run folders" >&2
  bash "$script" --archive-only "${pass[@]}" || echo "!! part $1: its archive could not be written" >&2
}

trap_signals
# an interrupt ends this script from inside `step`: the running part's archive is checked on the way out
running="" started=0
trap '[[ -n $running ]] && archive_if_killed "$running" "$started"' EXIT
worst=0
for n in "${parts[@]}"; do
  if [[ -n $budget_s ]]; then
    left=$((budget_s - STOP_RESERVE_S - SECONDS))
    if (( left < MIN_PART_S )); then
      echo "== part $n: not started, ${left} s left of the --budget-min (a part needs ${MIN_PART_S} s)"
      worst=$(( worst > 124 ? worst : 124 ))
      continue
    fi
    if ! estimate_part "$n"; then
      echo "!! part $n: its dry run failed; not started" >&2
      worst=$(( worst > 1 ? worst : 1 ))
      continue
    fi
    if (( part_s == 0 )); then
      echo "== part $n: done at this measurement version (results folder)"
      continue
    fi
    if (( part_s > left )); then
      echo "== part $n: not started, estimated $part_s s with $left s left of the budget"
      continue
    fi
    echo "== part $n: estimated $part_s s, $left s left of the budget"
    running=$n started=$(date +%s)
    # TERM at the deadline: the part stops its step and writes its archive; KILL only if it hangs
    step "part $n" timeout --signal=TERM --kill-after=$((STOP_RESERVE_S - 10)) "$left" bash "$(part_script "$n")" "${pass[@]}"
  else
    running=$n started=$(date +%s)
    step "part $n" bash "$(part_script "$n")" "${pass[@]}"  # an interrupt stops here, after the part's archive
  fi
  running=""
  archive_if_killed "$n" "$started"
  (( status > worst )) && worst=$status
  status=0
done
exit "$worst"
