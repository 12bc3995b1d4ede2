#!/usr/bin/env bash
# bench/verdicts.sh: does a certification give the same verdict at rest and
# on a busy machine? It builds canary-run once, then, with BUSY processes
# spinning on the CPUs the whole time (default 0: at rest), runs RUNS
# certifications of the embedded agentd (--no-self-test) and RUNS
# self-tests of the no-conn-limit fault alone (noisy-neighbour's positive
# control, the timing check a busy machine could fool), and prints each
# verdict and time (and each availability check's rounds), then the
# counts. Exit 1 when a run gave another verdict than the one it must;
# such a run's certificate, work tree and output are kept (the path is
# printed).
#
#   bench/verdicts.sh                 # at rest, 5 + 5 runs
#   BUSY=4 bench/verdicts.sh          # 4 busy processes on the machine
#   RUNS=3 FULL=1 bench/verdicts.sh   # the whole run (catalog and self-test)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
busy=${BUSY:-0}
runs=${RUNS:-5}
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/canary-run" ./cmd/canary-run
for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  pids+=("$!")
done
echo "verdicts: $runs + $runs runs, $busy busy processes on $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"

bad=0
certified=0
caught=0
rounds() { # CERT: each availability check's rounds, and how many went unjudged
  [ -f "$1" ] && command -v python3 >/dev/null || return 0
  python3 - "$1" <<'PY' || true
import json, sys
c = json.load(open(sys.argv[1]))
for s in c.get("scenarios") or []:
    rows = s.get("availability") or []
    if rows:
        print("    %s: %s" % (s["id"], ", ".join(
            "%s %d round(s), %d unjudged%s" % (r["tenant"], r.get("rounds", 0), r.get("unjudged_rounds", 0),
                                               " (inconclusive)" if r.get("inconclusive") else "")
            for r in rows)))
PY
}
run() { # KIND WANT-EXIT ARGS...: one run, its exit and time
  local kind=$1 want=$2 rc=0 start end
  shift 2
  start=$(date +%s.%N)
  "$work/canary-run" "$@" --keep --out "$work/out" >"$work/stdout" 2>"$work/stderr" || rc=$?
  end=$(date +%s.%N)
  printf '%-10s exit %d (want %d) in %5.1fs: %s\n' "$kind" "$rc" "$want" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" \
    "$(grep -E '^verdict:|detection power' "$work/stdout" | head -1)"
  rounds "$work/out/certificate.json"
  if [ "$rc" -ne "$want" ]; then
    bad=1
    grep -vE '^\s' "$work/stdout" | tail -30 | sed 's/^/    /'
    # Kept for its cause: the certificate, the work tree (each scenario's
    # run.log) and the output.
    local kept
    kept=$(mktemp -d "${TMPDIR:-/tmp}/verdicts-$kind-XXXX")
    for f in out stdout stderr; do
      [ ! -e "$work/$f" ] || mv "$work/$f" "$kept/"
    done
    echo "    kept in $kept"
    return 1
  fi
  rm -rf "$work/out"
}
for ((i = 1; i <= runs; i++)); do
  if [ "${FULL:-0}" = 1 ]; then
    run certify 0 && certified=$((certified + 1)) || true
  else
    run certify 0 --no-self-test && certified=$((certified + 1)) || true
  fi
done
for ((i = 1; i <= runs; i++)); do
  run no-conn 0 --self-test --faults '^no-conn-limit$' && caught=$((caught + 1)) || true
done
echo "verdicts: certified $certified/$runs, no-conn-limit caught $caught/$runs ($busy busy processes)"
exit $bad
