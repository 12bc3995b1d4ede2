#!/usr/bin/env bash
# CI step for examples/gotest (.ci/run): vet the module and run its tests
# through gotestsum, which reads `go test -json`: once as they are (the
# clean server certified by the whole catalog, not -short's subset: the
# hostile families too, against a server without tenant credentials whose
# tools run in a PID namespace per call; the shared-key leak caught), then
# once with the leak switched on for TestCertify (-short), which must fail
# with the finding in gotestsum's output and in its junit.xml.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# gotestsum is a tool of the root module: build it there.
(cd ../.. && go build -o "$tmp/gotestsum" gotest.tools/gotestsum)

go vet ./...

"$tmp/gotestsum" --format testname --junitfile "$tmp/clean.xml" -- -count=1 -timeout 20m ./...
grep -q '<testcase [^>]*name="TestCertify/pooled-serve"' "$tmp/clean.xml" || {
  echo "gotestsum's junit.xml of the clean run has no TestCertify/pooled-serve" >&2
  exit 1
}

status=0
TINYAGENT_LEAK=shared-key "$tmp/gotestsum" --format testname --junitfile "$tmp/leak.xml" -- \
  -short -count=1 -timeout 20m -run '^TestCertify$' . >"$tmp/leak.out" 2>&1 || status=$?
cat "$tmp/leak.out"
# The finding's line, as the test error reads (junit.xml escapes the quote).
finding="request: (alpha|beta) request #[0-9]+ [^ ]+ auth: carries default(&#39;|')s provider_key"
if [ "$status" -eq 0 ]; then
  echo "the leaking server passed TestCertify" >&2
  exit 1
fi
for f in "$tmp/leak.out" "$tmp/leak.xml"; do
  if ! grep -qE "$finding" "$f"; then
    echo "$(basename "$f") of the leaking run does not hold the finding: $finding" >&2
    exit 1
  fi
done
grep -q '^DONE .*failure' "$tmp/leak.out" || {
  echo "gotestsum printed no summary of the failures" >&2
  exit 1
}
echo "gotestsum read both runs: the clean one passed, the leaking one failed with the finding"
