#!/usr/bin/env bash
# bench/cpu.sh CMD...: run CMD and print its wall time and the CPU-seconds
# the whole machine was busy and idle meanwhile, from /proc/stat. A run's
# own rusage (time, /usr/bin/time) undercounts it: a plugin host or a
# tool's shell killed before it reaped its children takes their CPU time
# with it, and a process a tool double-forked is reaped by init. Read on
# an otherwise idle machine, the busy seconds are the run's; busy near
# wall x CPUs means the run is CPU-bound, and then only less CPU makes it
# faster.
#
#   bench/cpu.sh go run ./cmd/canary-run --no-self-test --out /tmp/x
#   bench/cpu.sh go test -race -count=1 ./scenarios
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bench/cpu.sh CMD..." >&2; exit 2; }
ticks() { # busy idle, in clock ticks, of every CPU
  local _ user nice system idle iowait irq softirq steal
  read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((idle + iowait))"
}
hz=$(getconf CLK_TCK)
read -r busy0 idle0 < <(ticks)
t0=$(date +%s%N)
rc=0
"$@" || rc=$?
t1=$(date +%s%N)
read -r busy1 idle1 < <(ticks)
awk -v w="$(((t1 - t0) / 1000000))" -v b="$((busy1 - busy0))" -v i="$((idle1 - idle0))" -v hz="$hz" -v n="$(nproc)" -v rc="$rc" \
  'BEGIN { printf "bench/cpu.sh: wall %.1f s; the machine busy %.1f CPU-s, idle %.1f CPU-s (%d CPUs); exit %d\n", w/1000, b/hz, i/hz, n, rc }' >&2
exit "$rc"
