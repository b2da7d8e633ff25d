#!/usr/bin/env bash
# Reference results on one NVIDIA GPU (H100/H200), in parts ordered by value, each at most 8
# minutes and all of them at most 25 by the project's own duration estimate (not measurements):
#   1 smoke: every strategy family, bf16 and fp16, compile, act-ckpt, profile, snapshot, a real OOM
#   2 MFU of the Llama-style 1B model      3 GPT-2 124M strategy sweep      4 suite vs bare-loop fidelity
#
#   bash scripts/gpu_reference.sh --out DIR [--results DIR] [--budget-min M] [PART...]   # every part, or those named
#   bash scripts/gpu_reference.sh --dry-run [--gpu-name NAME] [PART...] # cases and minutes, no GPU needed
#
# Each part (scripts/gpu_reference/partN_*.sh, also runnable alone) leaves DIR/partN_NAME.tar.gz
# (its run folders and log, under 16 MiB), finished, failed or interrupted; run again, it continues
# its run folders (--bench-resume). A failed part does not stop the next; an interrupt stops all.
# --budget-min M: everything ends within M minutes of the script's start (a GPU lease's slot): each
# part runs under `timeout` with what is left, less a reserve for the last part's stop and archive,
# and a part with under a minute left is not started.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu_reference/steps.sh

PART_LIMIT_MIN=8
TOTAL_LIMIT_MIN=27  # three slots of 9 minutes of commands
STOP_RESERVE_S=60  # a stopped part's pytest ends its case, writes its results, then the archive
MIN_PART_S=60      # a part with less left is not started

usage_error() {
  echo "gpu_reference.sh: $1 (usage: $0 --out DIR [--results DIR] [--budget-min M] [PART...] | --dry-run [--gpu-name NAME] [PART...])" >&2
  exit 2
}

part_script() {  # part_script N: the one script of part N
  local found=(scripts/gpu_reference/part"$1"_*.sh)
  [[ $1 =~ ^[0-9]+$ && -f ${found[0]} && ${#found[@]} == 1 ]] || return 1
  echo "${found[0]}"
}

pass=() parts=() dry_run="" budget_s=""
while (( $# )); do
  case $1 in
    --dry-run) dry_run=1; pass+=("$1") ;;
    --budget-min)
      (( $# >= 2 )) && [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage_error "--budget-min needs a number of minutes"
      budget_s=$(awk -v m="$2" 'BEGIN { printf "%d", m * 60 }')
      (( budget_s > STOP_RESERVE_S + MIN_PART_S )) || usage_error "--budget-min $2: leaves no time for a part"
      shift ;;
    --out|--results|--gpu-name)
      (( $# >= 2 )) && [[ -n $2 ]] || usage_error "$1 needs a value"
      pass+=("$1" "$2"); shift ;;
    -*) usage_error "unknown option '$1'" ;;
    *) part_script "$1" >/dev/null || usage_error "no part '$1' (scripts/gpu_reference/part$1_*.sh)"; parts+=("$1") ;;
  esac
  shift
done
[[ -n $dry_run || " ${pass[*]} " == *" --out "* ]] || usage_error "--out DIR is required (where each part leaves its log and archive)"
if (( ${#parts[@]} == 0 )); then
  for script in scripts/gpu_reference/part*_*.sh; do
    name=${script##*/part}
    parts+=("${name%%_*}")
  done
fi

dry_run_all() {  # every part's estimate, then the table and the limits (exit 1 when one is broken)
  local n script text summary rows=() total_s=0 total_cases=0 failed=0 name cases seconds
  for n in "${parts[@]}"; do
    script=$(part_script "$n")
    text=$(bash "$script" "${pass[@]}") || failed=1
    echo "$text"
    # the part's last line but one: "partN_NAME: C case(s), M min (S s)"
    summary=$(grep -E '^part[0-9]+_[^ ]*: [0-9]+ case\(s\), ' <<<"$text" | tail -1)
    [[ -n $summary ]] || { failed=1; continue; }
    read -r name cases seconds < <(awk '{ gsub(/[:(]/, ""); print $1, $2, $(NF - 1) }' <<<"$summary")
    rows+=("$name $cases $seconds")
    total_s=$((total_s + seconds))
    total_cases=$((total_cases + cases))
  done
  echo
  printf '%-20s %6s %8s\n' part cases minutes
  local row over=0
  for row in "${rows[@]}"; do
    read -r name cases seconds <<<"$row"
    printf '%-20s %6d %8s' "$name" "$cases" "$(awk -v s="$seconds" 'BEGIN { printf "%.1f", s / 60 }')"
    if (( seconds > PART_LIMIT_MIN * 60 )); then echo "  over ${PART_LIMIT_MIN} min"; over=1; else echo; fi
  done
  printf '%-20s %6d %8s' total "$total_cases" "$(awk -v s="$total_s" 'BEGIN { printf "%.1f", s / 60 }')"
  if (( total_s > TOTAL_LIMIT_MIN * 60 )); then echo "  over ${TOTAL_LIMIT_MIN} min"; over=1; else echo; fi
  echo "limits: ${PART_LIMIT_MIN} min per part, ${TOTAL_LIMIT_MIN} min in all (estimates, not measurements)"
  (( failed )) && echo "!! a part's dry run failed (see above)" >&2
  (( failed || over )) && exit 1
  exit 0
}

[[ -n $dry_run ]] && dry_run_all

trap_signals
worst=0
for n in "${parts[@]}"; do
  if [[ -n $budget_s ]]; then
    left=$((budget_s - STOP_RESERVE_S - SECONDS))
    if (( left < MIN_PART_S )); then
      echo "== part $n: not started, ${left} s left of the --budget-min (a part needs ${MIN_PART_S} s)"
      worst=$(( worst > 124 ? worst : 124 ))
      continue
    fi
    echo "== part $n: $left s left of the budget"
    # TERM at the deadline: the part stops its step and writes its archive; KILL only if it hangs
    step "part $n" timeout --signal=TERM --kill-after=$((STOP_RESERVE_S - 10)) "$left" bash "$(part_script "$n")" "${pass[@]}"
  else
    step "part $n" bash "$(part_script "$n")" "${pass[@]}"  # an interrupt stops here, after the part's archive
  fi
  (( status > worst )) && worst=$status
  status=0
done
exit "$worst"
