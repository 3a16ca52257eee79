# shellcheck shell=bash
# Shared by up.sh, down.sh and node.sh: stopping what a pid file names, and the owners' watchdog
# that stops a test cluster once the last test process using it has exited.

# Stops the process whose pid RUN/NAME.pid holds, if its command line still contains PATTERN
# (pids get reused): TERM, up to TENTHS tenths of a second (default 50), then KILL. Removes the
# pid file.
stop_pidfile() { # run name pattern [tenths]
  local pidfile="$1/$2.pid" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null && grep -qa -- "$3" "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 "${4:-50}"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# Starts, as NAME, the watchdog that runs STOP... once no pid listed in RUN/owners is alive. It
# takes LOCK (on fd 8, held while STOP runs) before the last check, so that an owner joining at
# that moment is not left without a cluster. Its pid goes to RUN/watchdog.pid, its output to LOG.
start_watchdog() { # run lock log name stop...
  local run=$1 lock=$2 log=$3 name=$4
  shift 4
  # shellcheck disable=SC2016 # expanded by the watchdog's own shell
  setsid bash -c '
    run="$1"; lock="$2"; shift 2
    owners_alive() {
      local pid
      while read -r pid; do kill -0 "$pid" 2>/dev/null && return 0; done <"$run/owners"
      return 1
    }
    while :; do
      sleep 1
      owners_alive 2>/dev/null && continue
      exec 8>"$lock"; flock 8
      if ! owners_alive 2>/dev/null; then "$@"; exit 0; fi
      flock -u 8
    done' "$name" "$run" "$lock" "$@" </dev/null >>"$log" 2>&1 8>&- &
  echo $! >"$run/watchdog.pid"
}
