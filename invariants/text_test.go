package invariants

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func TestTextLeaks(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true})
	require.NoError(t, err)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	log := []byte("alpha's turn: " + alpha.Model() + " " + alpha.ProviderKey() + " then " + beta.Model() + " and " +
		encoded(beta.APIServerKey(), scan.HexUpper))

	got := TextLeaks(s.Tenants, "alpha rpc log", log, "alpha")
	require.Equal(t, []string{"text alpha beta/model raw", "text alpha beta/api_server_key hex-upper"}, findingKeys(got), Format(got))
	require.Equal(t, "alpha rpc log", got[0].Where.Label)
	require.NotNil(t, got[0].Where.Offset)

	// A shared log: every tenant's secrets count, its own too; models do not.
	got = TextLeaks(s.Tenants, "serve stdout", log, "")
	require.Equal(t, []string{"text  alpha/provider_key raw", "text  beta/api_server_key hex-upper"}, findingKeys(got), Format(got))

	require.Empty(t, TextLeaks(s.Tenants, "clean", []byte("beta "+beta.Tag+" model-beta- "+alpha.Model()), "alpha"))
}

// TestTextLeaksFoldALogsRepeats: a log that carries beta's key on every
// line is one finding per kind, with the count and its first and last
// place; another kind of beta's stays a finding of its own.
func TestTextLeaksFoldALogsRepeats(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true})
	require.NoError(t, err)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	var log strings.Builder
	for i := range 50 {
		fmt.Fprintf(&log, "request %d of alpha %s with key %s\n", i, alpha.Model(), beta.ProviderKey())
	}
	last := log.Len()
	log.WriteString("done: " + beta.Model() + " and " + beta.ProviderKey() + "\n")

	got := TextLeaks(s.Tenants, "log of serve", []byte(log.String()), "alpha")
	require.Equal(t, []string{"text alpha beta/provider_key raw", "text alpha beta/model raw"}, findingKeys(got), Format(got))
	key := got[0]
	require.Equal(t, 51, key.Count)
	require.Contains(t, key.Excerpt, "\\nrequest 1 of alpha", "the first place's excerpt (the first line's key)")
	require.Contains(t, key.Detail, fmt.Sprintf("the last place at offset %d", last+len("done: "+beta.Model()+" and ")))
	require.Contains(t, key.String(), "(seen 51 times)")
	require.Equal(t, 0, got[1].Count, "beta's model is in one place")
}

func TestFrameLeaks(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true})
	require.NoError(t, err)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	frame := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	frames := []Frame{
		{Data: frame(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": "gateway.ready"}})},
		{Data: frame(map[string]any{"jsonrpc": "2.0", "id": 1, "result": map[string]any{"info": map[string]any{"model": alpha.Model()}}}), Method: "session.create"},
		// An event that names no session, carrying beta's text.
		{Data: frame(map[string]any{"jsonrpc": "2.0", "method": "event", "params": map[string]any{"type": "error",
			"payload": map[string]any{"message": "cron failed: " + beta.CronMark()}}})},
		// A reply carrying beta's key as UTF-16 (JSON escapes its zero bytes).
		{Data: frame(map[string]any{"jsonrpc": "2.0", "id": 2, "result": map[string]any{"blob": encoded(beta.ProviderKey(), scan.UTF16BE)}}), Method: "config.get"},
	}
	require.Contains(t, string(frames[3].Data), `\u0000`)
	got := FrameLeaks(s.Tenants, "alpha", "ws alpha", frames)
	require.Equal(t, []string{"rpc alpha beta/cron_prompt raw", "rpc alpha beta/provider_key utf16be"}, findingKeys(got), Format(got))
	require.Equal(t, 2, *got[0].Where.Frame)
	require.Equal(t, "event", got[0].Where.Method)
	require.Equal(t, "error", got[0].Where.Event)
	require.Equal(t, "config.get", got[1].Where.Method)
	require.Equal(t, "$.result.blob", got[1].Where.Part)
	require.Empty(t, FrameLeaks(s.Tenants, "beta", "ws beta", frames[2:3]), "beta's own text on beta's connection")
}

func TestLaunchBleed(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true})
	require.NoError(t, err)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")
	require.Empty(t, LaunchBleedOf(s.Tenants, "alpha", alpha.Model(), "session.create"))
	require.Empty(t, LaunchBleedOf(s.Tenants, "default", def.Model(), "session.create"))
	got := LaunchBleedOf(s.Tenants, "alpha", def.Model(), "session.create info.model")
	require.Equal(t, []string{"launch_bleed alpha default/model "}, findingKeys(got))
	require.Contains(t, got[0].String(), "the launch profile's model")
	got = LaunchBleedOf(s.Tenants, "alpha", beta.Model(), "session.resume")
	require.Equal(t, []string{"launch_bleed alpha beta/model "}, findingKeys(got))
	got = LaunchBleedOf(s.Tenants, "alpha", "gpt-x", "session.resume")
	require.Equal(t, []string{"launch_bleed alpha / "}, findingKeys(got))
	require.Equal(t, Harness, LaunchBleedOf(s.Tenants, "zeta", "m", "x")[0].Invariant)
}

type fakeTB struct{ msgs []string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestAssertListsEveryFindingOnce(t *testing.T) {
	t.Parallel()
	leak := Finding{Invariant: File, Tenant: "alpha", Owner: "beta", Kind: tenants.ProviderKey,
		Where: Where{Path: "/h/.env", Offset: int64p(4)}, Encoding: scan.Hex, Excerpt: `"K=7072"`}
	short := Finding{Invariant: Shortfall, Tenant: "beta", Detail: "0 env snapshot(s) reached its provider, want at least 1"}
	tb := &fakeTB{}
	require.True(t, Assert(tb, nil))
	require.Empty(t, tb.msgs)
	require.False(t, Assert(tb, []Finding{leak, short, leak}))
	require.Len(t, tb.msgs, 1)
	require.Equal(t, `1 cross-tenant leak(s):
  file: alpha /h/.env:4: carries beta's provider_key (hex) in "K=7072"
1 harness, liveness or control failure(s) (not leaks):
  snapshot_shortfall: beta: 0 env snapshot(s) reached its provider, want at least 1`, tb.msgs[0])

	// Findings are JSON values that come back equal.
	b, err := json.Marshal([]Finding{leak, short})
	require.NoError(t, err)
	require.True(t, strings.Contains(string(b), `"offset":4`))
	var back []Finding
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, []Finding{leak, short}, back)
	require.Equal(t, []Finding{leak, short}, Dedup([]Finding{leak, short, leak, short}))
}

func TestSharedLogFindingNamesNoTenant(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true})
	require.NoError(t, err)
	got := TextLeaks(s.Tenants, "serve stderr", []byte("key "+s.Get("alpha").ProviderKey()), "")
	require.Len(t, got, 1)
	require.True(t, strings.HasPrefix(got[0].String(), "text: (shared) serve stderr:4: carries alpha's provider_key in "), got[0].String())
}
