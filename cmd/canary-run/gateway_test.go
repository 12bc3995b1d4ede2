package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
)

// gatewayTarget builds the scenarios' test gateway into dir and writes its
// target file there, with leak as its TESTGW_LEAK and known (when not
// empty) as its known-findings file beside it.
func gatewayTarget(t *testing.T, dir, leak, known string) string {
	t.Helper()
	bin := testgwBin(t)
	text, err := os.ReadFile("../../scenarios/testdata/testgw/target.yaml")
	require.NoError(t, err)
	y := strings.ReplaceAll(string(text), "BIN", bin)
	y = strings.Replace(y, "  ROOT_TOKEN:", "  TESTGW_LEAK: "+leak+"\n  ROOT_TOKEN:", 1)
	if known != "" {
		writeFile(t, dir, "known.yaml", known)
		y += "known_findings: known.yaml\n"
	}
	return writeFile(t, dir, "testgw.yaml", y)
}

// gatewayTargetWithRoutes is the clean test gateway's target file with
// routes (YAML list items) declared before its own.
func gatewayTargetWithRoutes(t *testing.T, routes string) string {
	t.Helper()
	path := gatewayTarget(t, t.TempDir(), "", "")
	text, err := os.ReadFile(path)
	require.NoError(t, err)
	y := strings.Replace(string(text), "  routes:\n", "  routes:\n"+routes, 1)
	require.NoError(t, os.WriteFile(path, []byte(y), 0o644))
	return path
}

// knownTokenRoute accepts what the test gateway's token-route leak shows:
// the token routes answer any user, and their answers carry the other
// tenants' tokens.
const knownTokenRoute = `- invariant: authz
  place: 'route "(own token|made token|delete own token)"'
  reason: the token API serves any user's token (fix planned)
  expires: EXPIRES
- invariant: text
  place: 'route "(own token|made token)"'
  reason: the same bug shows the other user's token
  expires: EXPIRES
`

// TestCanaryRunAcceptsKnownGatewayFindings runs canary-run against a test
// gateway that leaks through its token routes: with the leak accepted the
// run certifies with the accepted findings counted (exit 0); with the
// acceptance expired it reports leaks (exit 1).
func TestCanaryRunAcceptsKnownGatewayFindings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expires string
		code    int
		want    string
	}{
		{"2999-12-31", certificate.ExitCertified, "verdict: certified with "},
		{"2000-01-01", certificate.ExitLeaks, "acceptance EXPIRED on 2000-01-01"},
	} {
		t.Run(c.expires, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			target := gatewayTarget(t, dir, "token-route", strings.ReplaceAll(knownTokenRoute, "EXPIRES", c.expires))
			out := filepath.Join(dir, "out")
			code, stdout, stderr := runCLI(t, "--target", target, "--run", "^gateway-routes$", "--no-self-test", "--out", out)
			require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, c.want)
			assert.Contains(t, stdout, "known gateway-routes/cross-tenant-routes:")
			f, err := os.Open(filepath.Join(out, certificate.JSONFile))
			require.NoError(t, err)
			defer f.Close()
			cert, err := certificate.ReadJSON(f)
			require.NoError(t, err)
			assert.NotEmpty(t, cert.Accepted)
		})
	}
}

// TestTargetCheckGateway: `canary-run target check` on a gateway target
// starts it, provisions two tenants, and has each answered by its own
// provider.
func TestTargetCheckGateway(t *testing.T) {
	t.Parallel()
	target := gatewayTarget(t, t.TempDir(), "", "")
	code, stdout, stderr := runCLI(t, "target", "check", target)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	for _, want := range []string{"ok    provision", "answered by its own provider", "naming alpha's model: refused", "ok    stop",
		"ok    store", "read once: each tenant's own secret rests in a row it owns", `"own token": GET /api/token/`, `ok    route              "delete own token"`} {
		assert.Contains(t, stdout, want)
	}
}

// TestTargetCheckNotesRoutesItsOwnerMayBeRefused: an admin route a common
// user must be refused (not a read) and a read route whose only form its
// owner may be refused (own: any) are noted, and the dry pass gets
// through; the control: a read route its owner must be able to call, and
// cannot, fails it.
func TestTargetCheckNotesRoutesItsOwnerMayBeRefused(t *testing.T) {
	t.Parallel()
	ok := gatewayTargetWithRoutes(t, `    - {name: user by id (admin), path: "/api/admin/user/{user_id}", success: '"success":\s*true'}
    - {name: own user pinned, path: /api/user/self, read: true, auth: [{name: pin, bearer: "{key}-{channel_id}", own: any}], success: '"success":\s*true'}
`)
	code, stdout, stderr := runCLI(t, "target", "check", ok)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, `note  route              "user by id (admin)": not a read: its owner default was refused`)
	assert.Contains(t, stdout, `note  route              "own user pinned": its owner default was refused in every form, each one it may be refused (own: any)`)

	bad := gatewayTargetWithRoutes(t, `    - {name: own user at a wrong path, path: /api/user/nosuch, read: true, success: '"success":\s*true'}
`)
	code, stdout, stderr = runCLI(t, "target", "check", bad)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, `FAIL  route              "own user at a wrong path" as its owner default`)
}

// TestTargetCheckGatewayNodes: on a gateway run as two nodes (a file
// extending the test gateway's with replicas: 2), `target check` also
// starts the second node and has every tenant answered through it by its
// own provider.
func TestTargetCheckGatewayNodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gatewayTarget(t, dir, "", "")
	nodes := writeFile(t, dir, "nodes.yaml", "extends: testgw.yaml\nname: testgw-nodes\nreplicas: 2\n")
	code, stdout, stderr := runCLI(t, "target", "check", nodes)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "testgw-nodes test is valid")
	assert.Regexp(t, `ok    nodes +node 2 ready at http://127\.0\.0\.1:\d+: every tenant answered by its own provider`, stdout)
	code, stdout, _ = runCLI(t, "target", "check", gatewayTarget(t, t.TempDir(), "", ""))
	require.Equal(t, 0, code)
	assert.NotContains(t, stdout, "node 2", "a gateway of one node starts no other")
}

// TestTargetCheckCallsChains: target check calls the routes a route
// chains (then) after its owner's call, as gateway-routes will; a chained
// route that refuses its owner fails the pass, naming the chain.
func TestTargetCheckCallsChains(t *testing.T) {
	t.Parallel()
	ok := gatewayTargetWithRoutes(t, `    - {name: own user then logs, path: /api/user/self, read: true, then: [own logs], success: '"success":\s*true'}
`)
	code, stdout, stderr := runCLI(t, "target", "check", ok)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, `ok    route              "own user then logs" then "own logs": GET /api/log/self answered its owner default`)

	bad := gatewayTargetWithRoutes(t, `    - {name: own user then nowhere, path: /api/user/self, read: true, then: [nowhere], success: '"success":\s*true'}
    - {name: nowhere, path: /api/nosuch, success: '"success":\s*true'}
`)
	code, stdout, stderr = runCLI(t, "target", "check", bad)
	require.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, `FAIL  route              "own user then nowhere" then "nowhere": the chained route refused its owner default`)
}
