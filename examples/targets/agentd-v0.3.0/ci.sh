#!/usr/bin/env bash
# The agentd v0.3.0 step of CI (.ci/run runs it): build agentd from the tree
# that version 0.3.0 names (commit 3acfd72, tag v0.3.0) and certify it with
# the multi-step attack family, which must find its leaks: exit 1, with
# findings in hostile-chains, and the rows whose positive control it is
# (harness/attack TestRowsOnAgentdV030) among them. This is the family's
# real-world positive control: were the attacks to stop working, this step
# would fail.
#
# AGENTD_V030_BIN_DIR (default: a folder under TMPDIR) receives the binary,
# agentd-v0.3.0; it must be outside HOME (the harness drops PATH entries
# inside HOME). The tree comes from this checkout's git history: a clone
# without commit 3acfd72 cannot run the step, and says so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
commit=3acfd72
bin=${AGENTD_V030_BIN_DIR:-${TMPDIR:-/tmp}/tenantcanary-agentd-v030}
case "$bin/" in
  "$HOME"/*) echo "agentd-v0.3.0: AGENTD_V030_BIN_DIR=$bin is inside HOME ($HOME): the harness would drop it from PATH; give a folder outside" >&2; exit 1 ;;
esac
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "agentd-v0.3.0: commit $commit is not in this clone's history (a shallow clone?): cannot build v0.3.0" >&2
  exit 1
fi
start=$(date +%s)
mkdir -p "$bin"
src=$(mktemp -d)
out=$(mktemp -d)
trap 'rm -rf "$src" "$out"' EXIT
git -C "$repo" archive "$commit" | tar -x -C "$src"
(cd "$src" && go build -o "$bin/agentd-v0.3.0" ./cmd/agentd)
version=$("$bin/agentd-v0.3.0" --version)
case "$version" in
  *0.3.0*) ;;
  *) echo "agentd-v0.3.0: the built binary says $version, want 0.3.0" >&2; exit 1 ;;
esac
echo "agentd-v0.3.0: built $version from $commit ($(($(date +%s) - start))s)"

# canary-run built, not `go run`: go run turns every failing exit into 1.
(cd "$repo" && go build -o "$out/canary-run" ./cmd/canary-run)
rc=0
(cd "$repo" && PATH="$bin:$PATH" "$out/canary-run" --target examples/targets/agentd-v0.3.0/target.yaml \
  --run '^hostile-(chains|restarts)$' --no-self-test --out "$out/cert") || rc=$?
if [ "$rc" -ne 1 ]; then
  echo "agentd-v0.3.0: canary-run exited $rc, want 1 (leaks: v0.3.0 has no defence against chained attacks)" >&2
  cat "$out/cert/summary.md" >&2 2>/dev/null || true
  exit 1
fi
if ! grep -q '"invariant"' "$out/cert/certificate.json"; then
  echo "agentd-v0.3.0: exit 1 but the certificate lists no finding" >&2
  exit 1
fi
# Row by row: the rows that a defence of today's agentd stops with no
# fault of agentd to switch it off have their positive control here.
if ! (cd "$repo" && AGENTD_V030_CERT="$out/cert/certificate.json" go test -count=1 -run '^TestRowsOnAgentdV030$' ./harness/attack); then
  echo "agentd-v0.3.0: a row whose positive control is v0.3.0 did not find its leak" >&2
  exit 1
fi
echo "agentd-v0.3.0: hostile-chains and hostile-restarts found v0.3.0's leaks, verdict leaks as expected ($(($(date +%s) - start))s)"
grep -E '^\| |^- ' "$out/cert/summary.md" | head -40 || true
