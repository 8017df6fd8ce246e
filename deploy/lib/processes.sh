# shellcheck shell=bash
# deploy/lib/processes.sh — process and mount helpers shared by deploy/skein-local and tests/run.
# Sourced, not run. Builtins and coreutils only where a helper runs for every process on the
# machine; nothing here kills a process it was not given by pid.

# is_alive PID: true if PID exists and is not a zombie.
is_alive() {
  local pid=$1 stat
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  { read -r stat; } 2>/dev/null <"/proc/$pid/stat" || return 1
  stat=${stat##*) }            # drop "pid (comm) ", comm may contain spaces
  [ "${stat%% *}" != Z ]
}

# proc_matches PID NAME MODE NEEDLE: true if process PID is named NAME (its
# comm, or the basename of its argv[0]) and its command line has an argument
# equal to NEEDLE (MODE=arg) or contains NEEDLE anywhere (MODE=sub).
proc_matches() {
  local pid=$1 name=$2 mode=$3 needle=$4 comm='' arg argv0='' found=1
  { IFS= read -r comm; } 2>/dev/null <"/proc/$pid/comm" || return 1
  {
    while IFS= read -r -d '' arg; do
      [ -n "$argv0" ] || argv0=${arg:-.}
      if [ "$mode" = arg ] && [ "$arg" = "$needle" ]; then found=0; fi
      if [ "$mode" = sub ] && [[ $arg == *"$needle"* ]]; then found=0; fi
    done
  } 2>/dev/null <"/proc/$pid/cmdline" || return 1
  [ "$found" = 0 ] || return 1
  [ "$comm" = "${name:0:15}" ] || [ "${argv0##*/}" = "$name" ] || return 1
  is_alive "$pid"
}

# find_procs NAME MODE NEEDLE: pids of all processes that proc_matches, but
# never this shell or its subshells.
find_procs() {
  local dir pid
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    if proc_matches "$pid" "$@"; then printf '%s\n' "$pid"; fi
  done
  return 0
}

# procs_mentioning NEEDLE: pids of the processes, whatever their name, with an
# argument that contains NEEDLE; never this shell or its subshells.
procs_mentioning() {
  local dir pid arg
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    {
      while IFS= read -r -d '' arg; do
        if [[ $arg == *"$1"* ]]; then
          printf '%s\n' "$pid"
          break
        fi
      done
    } 2>/dev/null <"$dir/cmdline" || true
  done
  return 0
}

# descendants PID...: print every descendant of the given pids (not the pids), each once.
descendants() {
  [ $# -gt 0 ] || return 0
  ps -e -o pid=,ppid= | awk -v roots="$*" '
    { kids[$2] = kids[$2] " " $1 }
    END {
      n = split(roots, queue, " ")
      for (i = 1; i <= n; i++) {
        m = split(kids[queue[i]], k, " ")
        for (j = 1; j <= m; j++) if (!(k[j] in seen)) { seen[k[j]] = 1; print k[j]; queue[++n] = k[j] }
      }
    }'
}

# stop_pids GRACE_SECONDS PID...: SIGTERM, wait up to GRACE, then SIGKILL.
stop_pids() {
  local grace=$1 pid left i
  shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  kill -CONT "$@" 2>/dev/null || true   # a stopped process acts on TERM only once continued
  for ((i = 0; i < grace * 10; i++)); do
    left=0
    for pid in "$@"; do is_alive "$pid" && left=1; done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
  return 0
}

# mounts_under PREFIX: mount points at or below PREFIX (from mountinfo, no stat(), so a dead
# FUSE mount cannot hang it). The kernel keeps mountinfo consistent only within one read(2): a
# read that runs while other mounts come and go (tests in parallel) may miss one that stays.
mounts_under() {
  local prefix=${1%/} mp
  while read -r _ _ _ _ mp _; do
    mp=$(printf '%b' "${mp//\\/\\0}")   # mountinfo escapes space etc. as \040
    if [ "$mp" = "$prefix" ] || [[ $mp == "$prefix"/* ]]; then printf '%s\n' "$mp"; fi
  done </proc/self/mountinfo
}

# is_mounted PATH: whether PATH is a mount point. Not found, it is looked for twice more before
# it counts as absent (see mounts_under: a mount that skein-local had just seen come up was once
# missed so, and its start taken for a failure).
is_mounted() {
  local _
  for _ in 1 2 3; do
    mounts_under "$1" | grep -qFx -- "$1" && return 0
  done
  return 1
}

# unmount PATH: unmount a FUSE mount, however stuck. True if it is gone.
unmount() {
  local mp=$1
  is_mounted "$mp" || return 0
  timeout 10 fusermount3 -u "$mp" 2>/dev/null && return 0
  timeout 10 fusermount3 -uz "$mp" 2>/dev/null && return 0
  timeout 10 umount -l "$mp" 2>/dev/null && return 0
  ! is_mounted "$mp"
}
