package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/tenants"
)

var providerLine = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*): base_url=(\S+) key=(\S+) model=(\S+)( launch)?$`)

type printedProvider struct{ baseURL, key, model string }

// chat posts one chat completion with key and returns the status.
func chat(t *testing.T, baseURL, key, model string) int {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, baseURL+"/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestFakeLLMServesJournalsAndStops starts `canary-run fakellm`, drives a
// printed provider with its own key and with a foreign one, stops it, and
// reads both requests back from the journal.
func TestFakeLLMServesJournalsAndStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := writeFile(t, dir, "names.json", `{"names":["default","alpha","beta"],"launch":"alpha"}`)
	out := filepath.Join(dir, "out")
	journal := filepath.Join(dir, "requests.jsonl")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncio.Buffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, []string{"fakellm", "--listen", "127.0.0.1:0", "--tenants", names, "--out", out,
			"--journal", journal, "--advertise-host", "localhost"}, strings.NewReader(""), &stdout, &stderr, noEnv)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "serving 3 providers until interrupted") },
		10*time.Second, 10*time.Millisecond, "no ready line; stdout: %s stderr: %s", &stdout, &stderr)

	printed := map[string]printedProvider{}
	launch := ""
	for _, m := range providerLine.FindAllStringSubmatch(stdout.String(), -1) {
		printed[m[1]] = printedProvider{baseURL: m[2], key: m[3], model: m[4]}
		if m[5] != "" {
			launch = m[1]
		}
	}
	require.Len(t, printed, 3, stdout.String())
	require.Equal(t, "alpha", launch)
	alpha, beta := printed["alpha"], printed["beta"]
	require.Regexp(t, `^http://localhost:\d+/v1$`, alpha.baseURL, "the advertised host is printed")
	require.NotEqual(t, alpha.baseURL, beta.baseURL)

	// The printed URL uses the advertised host; localhost reaches the
	// loopback listener here.
	require.Equal(t, http.StatusOK, chat(t, alpha.baseURL, alpha.key, alpha.model))
	require.Equal(t, http.StatusUnauthorized, chat(t, alpha.baseURL, beta.key, alpha.model), "a foreign key is refused")

	// The tenants file holds the same tenants, consistent with their tags,
	// and the canaries file feeds `canary-run scan`.
	sf, err := tenants.ReadRoster(filepath.Join(out, stagingTenantsFile))
	require.NoError(t, err)
	require.Equal(t, "alpha", sf.Launch)
	require.Equal(t, journal, sf.Journal)
	require.Len(t, sf.Tenants, 3)
	for _, st := range sf.Tenants {
		p := printed[st.Name]
		require.Equal(t, p.baseURL, st.BaseURL)
		require.Equal(t, p.key, st.Key)
		require.Equal(t, tenants.CanaryValue(tenants.ProviderKey, st.Name, st.Tag), st.Key)
	}

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, "stderr: %s", &stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("fakellm did not stop when its context ended; stderr: %s", &stderr)
	}
	require.Contains(t, stdout.String(), "stopped: 2 requests journaled to "+journal)

	f, err := os.Open(journal)
	require.NoError(t, err)
	defer f.Close()
	recs, err := fakellm.ReadJournal(f)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, alpha.baseURL, recs[0].Server)
	require.Equal(t, alpha.key, recs[0].Auth)
	require.Equal(t, http.StatusOK, recs[0].Status)
	require.Equal(t, alpha.baseURL, recs[1].Server)
	require.Equal(t, beta.key, recs[1].Auth, "the refused request is journaled with the key it presented")
	require.Equal(t, http.StatusUnauthorized, recs[1].Status)

	// Stopped means stopped: the port no longer answers.
	_, err = http.Get(alpha.baseURL + "/models")
	require.Error(t, err)

	// The journal holds beta's key on alpha's provider: the scan sees it
	// (and alpha's own, which a file scan cannot tell apart).
	code, scanOut, scanErr := runCLI(t, "scan", "--canaries", filepath.Join(out, stagingCanariesFile), journal)
	require.Equal(t, 1, code, scanErr)
	require.Contains(t, scanOut, "beta provider_key raw "+journal)
}
