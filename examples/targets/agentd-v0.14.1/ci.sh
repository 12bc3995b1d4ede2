#!/usr/bin/env bash
# The agentd v0.14.1 step of CI (.ci/run runs it): build agentd from the tree
# that release 0.14.1 names (commit 7cb0801) and certify it with the surface
# family (surface, credential-revocation, entry-points), which must find its
# leaks: exit 1, with findings of at least five of the seven classes issue 46
# named (harness/surface TestClassesOnAgentdV0141 reads the certificate).
# This is the family's real-world positive control: were the generated
# attacks to stop working, this step would fail.
#
# AGENTD_V0141_BIN_DIR (default: a folder under TMPDIR) receives the binary,
# agentd-v0.14.1; it must be outside HOME (the harness drops PATH entries
# inside HOME). The tree comes from this checkout's git history: a clone
# without commit 7cb0801 cannot run the step, and says so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
commit=7cb0801
bin=${AGENTD_V0141_BIN_DIR:-${TMPDIR:-/tmp}/tenantcanary-agentd-v0141}
case "$bin/" in
  "$HOME"/*) echo "agentd-v0.14.1: AGENTD_V0141_BIN_DIR=$bin is inside HOME ($HOME): the harness would drop it from PATH; give a folder outside" >&2; exit 1 ;;
esac
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "agentd-v0.14.1: commit $commit is not in this clone's history (a shallow clone?): cannot build v0.14.1" >&2
  exit 1
fi
start=$(date +%s)
mkdir -p "$bin"
src=$(mktemp -d)
out=$(mktemp -d)
trap 'rm -rf "$src" "$out"' EXIT
git -C "$repo" archive "$commit" | tar -x -C "$src"
(cd "$src" && go build -o "$bin/agentd-v0.14.1" ./cmd/agentd)
version=$("$bin/agentd-v0.14.1" --version)
case "$version" in
  *0.14.1*) ;;
  *) echo "agentd-v0.14.1: the built binary says $version, want 0.14.1" >&2; exit 1 ;;
esac
echo "agentd-v0.14.1: built $version from $commit ($(($(date +%s) - start))s)"

# canary-run built, not `go run`: go run turns every failing exit into 1.
(cd "$repo" && go build -o "$out/canary-run" ./cmd/canary-run)
rc=0
(cd "$repo" && PATH="$bin:$PATH" "$out/canary-run" --target examples/targets/agentd-v0.14.1/target.yaml \
  --run '^(surface|credential-revocation|entry-points)$' --no-self-test --out "$out/cert") || rc=$?
if [ "$rc" -ne 1 ]; then
  echo "agentd-v0.14.1: canary-run exited $rc, want 1 (leaks: v0.14.1 falls to the classes issue 46 named)" >&2
  cat "$out/cert/summary.md" >&2 2>/dev/null || true
  exit 1
fi
if ! (cd "$repo" && AGENTD_V0141_CERT="$out/cert/certificate.json" go test -count=1 -run '^TestClassesOnAgentdV0141$' -v ./harness/surface | grep -E '^(=== RUN|--- |\s+v0141_test|ok|FAIL|PASS)'); then
  echo "agentd-v0.14.1: fewer than five of issue 46's classes were found" >&2
  exit 1
fi
echo "agentd-v0.14.1: the surface family found v0.14.1's leaks, verdict leaks as expected ($(($(date +%s) - start))s)"
grep -E '^\| |^- ' "$out/cert/summary.md" | head -40 || true
