package invariants

import (
	"bytes"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// newSet builds real tenants (default, alpha, beta) with real providers
// and written homes under a temp dir.
func newSet(t *testing.T) *tenants.Set {
	t.Helper()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.WriteHomes(tenants.HomeExtras{}))
	return s
}

// post sends body to tn's provider as an OpenAI chat request with key.
func post(t *testing.T, tn *tenants.Tenant, key string, body any, headers ...string) {
	t.Helper()
	postTo(t, tn, "/chat/completions", key, body, headers...)
}

func postTo(t *testing.T, tn *tenants.Tenant, path, key string, body any, headers ...string) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, tn.Provider.BaseURL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func chat(model string, msgs ...map[string]any) map[string]any {
	return map[string]any{"model": model, "messages": msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "terminal"}}}}
}

func user(text string) map[string]any { return map[string]any{"role": "user", "content": text} }

// encoded returns value in enc the way a leak would carry it.
func encoded(value string, enc scan.Encoding) string {
	var b strings.Builder
	switch enc {
	case scan.Raw:
		return value
	case scan.Base64, scan.Base64URL:
		return b64(value, enc == scan.Base64URL)
	case scan.Hex:
		return fmt.Sprintf("%x", value)
	case scan.HexUpper:
		return fmt.Sprintf("%X", value)
	case scan.UTF16LE:
		for _, c := range []byte(value) {
			b.WriteByte(c)
			b.WriteByte(0)
		}
	case scan.UTF16BE:
		for _, c := range []byte(value) {
			b.WriteByte(0)
			b.WriteByte(c)
		}
	case scan.Percent:
		for _, c := range []byte(value) {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	case scan.JSONEscape:
		for _, c := range []byte(value) {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
	case scan.Base32, scan.Base32Lower, scan.Base32Hex, scan.Base32HexLower:
		alg := base32.StdEncoding
		if enc == scan.Base32Hex || enc == scan.Base32HexLower {
			alg = base32.HexEncoding
		}
		s := alg.EncodeToString([]byte(value))
		if enc == scan.Base32Lower || enc == scan.Base32HexLower {
			s = strings.ToLower(s)
		}
		return s
	}
	return b.String()
}

// findingKeys renders findings compactly for comparisons.
func findingKeys(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %s %s/%s %s", f.Invariant, f.Tenant, f.Owner, f.Kind, f.Encoding))
	}
	return out
}
