# shellcheck shell=bash
# Sourced by gpu_reference.sh and common.sh: run one step at a time so that a signal never skips
# what must happen after it (a part's archive).
#
# Each step runs in the background, in its own session, and this shell waits for it:
# - `wait` returns as soon as a trapped signal arrives (a foreground child would make bash hold
#   its traps until the child ended);
# - the step gets no signal from the terminal (Ctrl-C) or from `timeout` (which signals its whole
#   process group), only the one SIGTERM that on_signal sends it. pytest turns SIGTERM into an
#   orderly stop (the running case's processes are stopped, finished results kept); a second
#   Ctrl-C sends another, which makes pytest skip the grace period.
# SIGTERM and not SIGINT: a non-interactive bash starts background commands with SIGINT ignored.

child=""        # pid of the running step
interrupted=""  # INT, TERM or HUP once one arrived
status=0        # the last non-zero exit status of a step

signal_code() {  # signal_code NAME: the exit status of a shell stopped by that signal
  case $1 in HUP) echo 129 ;; INT) echo 130 ;; *) echo 143 ;; esac
}

on_signal() {  # on_signal NAME: pass the stop on to the running step; no further step starts
  interrupted=${interrupted:-$1}
  echo "!! $1 received: stopping the running step" >&2
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null
  fi
}

trap_signals() {
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
  trap 'on_signal HUP' HUP
}

stop_if_interrupted() {  # after a signal: exit (the EXIT trap, if any, still runs)
  if [[ -n $interrupted ]]; then
    exit "$(signal_code "$interrupted")"
  fi
}

wait_child() {  # wait until $child has ended; its exit status
  local rc
  while :; do
    wait "$child"
    rc=$?
    # > 128 is also what `wait` returns when a trapped signal cut it short: wait again
    if (( rc > 128 )) && kill -0 "$child" 2>/dev/null; then
      continue
    fi
    return "$rc"
  done
}

step() {  # step NAME COMMAND...: run COMMAND; a non-zero exit is reported and kept in $status
  local name=$1 rc=0
  shift
  stop_if_interrupted
  setsid "$@" &
  child=$!
  wait_child || rc=$?
  child=""
  if (( rc != 0 )); then
    echo "!! $name: exited $rc" >&2
    # shellcheck disable=SC2034  # the sourcing script's exit status
    status=$rc
  fi
  stop_if_interrupted
  return 0
}
