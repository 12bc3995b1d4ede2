package stores

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// startStore starts a real store of sp's kind for the test (skipped, with
// the reason, only when the server's program is not installed) and stops
// it when the test ends, checking its process is gone.
func startStore(t testing.TB, sp Spec) *Store {
	t.Helper()
	if err := storeproc.Available(sp.Kind); err != nil {
		t.Skipf("%v (.ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := Open(ctx, []Spec{sp}, t.TempDir())
	require.NoError(t, err)
	st := set.Stores()[0]
	pid := st.Pid()
	require.NotZero(t, pid)
	t.Cleanup(func() {
		require.NoError(t, set.Close())
		require.False(t, procgroup.Alive(pid), "the %s store's server (pid %d) outlived Close", sp.Kind, pid)
		require.Empty(t, procgroup.GroupMembers(pid), "the %s store's process group outlived Close", sp.Kind)
	})
	return st
}

// newTenants are real tenants (alpha, beta, gamma) with canaries and no
// providers.
func newTenants(t testing.TB) []*tenants.Tenant {
	t.Helper()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"alpha", "beta", "gamma"}, NoProviders: true})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s.Tenants
}

// scanOf is a Scan of ts's canaries.
func scanOf(t testing.TB, ts []*tenants.Tenant) Scan {
	t.Helper()
	var cs []tenants.Canary
	for _, x := range ts {
		cs = append(cs, x.Canaries()...)
	}
	m, err := scan.Compile(invariants.Patterns(cs))
	require.NoError(t, err)
	return Scan{Matcher: m, Tenants: TenantsOf(ts, nil)}
}

// gzipB64 is base64 of s gzipped: a canary as a cache would wrap it.
func gzipB64(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err := w.Write([]byte(`{"answer":"` + s + `"}`))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// findingsOf are the findings of inv, one line each.
func findingsOf(fs []invariants.Finding, inv invariants.Invariant) []string {
	var out []string
	for _, f := range fs {
		if f.Invariant == inv {
			out = append(out, f.String())
		}
	}
	return out
}

// anyHas reports whether some line holds every one of parts.
func anyHas(lines []string, parts ...string) bool {
	for _, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}
