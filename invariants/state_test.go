package invariants

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestControlStateDBFollowsLayout: the state database's control looks
// where the layout puts the database (home_files.state), not at
// <home>/state.db.
func TestControlStateDBFollowsLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := tenants.AgentdFileNames()
	files.State = "data/sessions.sqlite"
	layout := tenants.Layout{Files: files}.WithDefaults()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true, Layout: layout})
	require.NoError(t, err)
	require.NoError(t, s.WriteHomes(tenants.HomeExtras{}))
	for _, tn := range s.Tenants {
		require.Equal(t, filepath.Join(tn.Home, "data", "sessions.sqlite"), tn.StateDB(layout))
		stateDBAt(t, tn.StateDB(layout), false, "session of "+tn.Value(tenants.EnvMarker))
	}
	require.Empty(t, ControlStateDBIn(ctx, s.Tenants, layout))
	chk, err := NewChecker(s.Tenants)
	require.NoError(t, err)
	chk.WithFileCache(scan.NewFileCache())
	for _, tn := range s.Tenants {
		require.Empty(t, chk.ControlStateDBIn(ctx, []*tenants.Tenant{tn}, layout), "through the checker too, tenant by tenant")
	}
	// A checker whose FileLeaks saw a tenant's own rows answers the
	// control from that scan, and reads nothing again: with the database
	// gone since, it still holds, where a fresh look finds none.
	seen, err := NewChecker(s.Tenants)
	require.NoError(t, err)
	require.Empty(t, seen.FileLeaks(ctx, s))
	db := s.Get("alpha").StateDB(layout)
	require.NoError(t, os.Rename(db, db+".away"))
	require.Empty(t, seen.ControlStateDBIn(ctx, []*tenants.Tenant{s.Get("alpha")}, layout), "answered by FileLeaks' own scan")
	require.Contains(t, ControlStateDBIn(ctx, []*tenants.Tenant{s.Get("alpha")}, layout)[0].Detail, "no state database")
	require.NoError(t, os.Rename(db+".away", db))
	// The old call looks at <home>/state.db, where there is none.
	ctl := ControlStateDB(ctx, s.Tenants, "")
	require.Len(t, ctl, 2)
	require.Contains(t, ctl[0].Detail, "no state database")
	// Positive control: a database without its own canary fails by name.
	alpha := s.Get("alpha")
	require.NoError(t, os.Remove(alpha.StateDB(layout)))
	stateDBAt(t, alpha.StateDB(layout), false, "nothing of its own")
	ctl = ControlStateDBIn(ctx, s.Tenants, layout)
	require.Equal(t, []string{"control alpha / "}, findingKeys(ctl))
	require.Equal(t, alpha.StateDB(layout), ctl[0].Where.Path)
	// The checker's matcher holds every tenant's canaries: another's in
	// alpha's database is still not alpha's own.
	require.NoError(t, os.Remove(alpha.StateDB(layout)))
	stateDBAt(t, alpha.StateDB(layout), false, "session of "+s.Get("default").Value(tenants.EnvMarker))
	require.Equal(t, []string{"control alpha / "}, findingKeys(chk.ControlStateDBIn(ctx, []*tenants.Tenant{alpha}, layout)))
	require.Empty(t, chk.ControlStateDBIn(ctx, []*tenants.Tenant{s.Get("default")}, layout))
	// A layout naming no database is the caller's error, said so.
	none := layout
	none.Files.State = ""
	ctl = ControlStateDBIn(ctx, s.Tenants, none)
	require.Len(t, ctl, 1)
	require.Equal(t, Harness, ctl[0].Invariant)
}

// TestStateFolderIsTenantsPlace: a state root apart from the homes holds
// one folder per tenant; each is the tenant's own place for the file scan,
// the state database's control, the write scope and the shared places.
func TestStateFolderIsTenantsPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := tenants.Layout{StateRoot: "{root}/state", StateDir: "agents/{profile}", StateDB: "sessions.sqlite"}.WithDefaults()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}, NoProviders: true, Layout: layout})
	require.NoError(t, err)
	require.NoError(t, s.WriteHomes(tenants.HomeExtras{}))
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")
	require.Equal(t, filepath.Join(s.Root, "state", "agents", "default"), def.State)
	require.Equal(t, filepath.Join(s.Root, "state", "agents", "alpha", "sessions.sqlite"), alpha.StateDB(layout))
	for _, tn := range s.Tenants {
		stateDBAt(t, tn.StateDB(layout), false, "session of "+tn.Value(tenants.EnvMarker)+" in "+tn.Workdir)
	}
	require.Empty(t, ControlStateDBIn(ctx, s.Tenants, layout))
	got := FileLeaks(ctx, s)
	require.Empty(t, got, Format(got))
	for _, p := range SharedPlaces(s) {
		// Neither inside a state folder nor a folder holding one.
		require.False(t, within(p, alpha.State) || within(alpha.State, p), p)
	}

	// A snapshot of another tenant's settings in alpha's state is alpha's
	// finding; a stray file in the state root is a shared place.
	before, err := HashTree(ctx, s.LaunchHome, filepath.Join(s.Root, "state"))
	require.NoError(t, err)
	write(t, filepath.Join(alpha.State, "snapshot.json"), []byte(`{"beta":{"key":"`+beta.ProviderKey()+`","cwd":"`+beta.Workdir+`"}}`))
	stray := filepath.Join(s.Root, "state", "gateway.log")
	write(t, stray, []byte("x"))
	got = FileLeaks(ctx, s)
	require.ElementsMatch(t, []string{"file alpha beta/provider_key raw", "file alpha beta/workdir raw"}, findingKeys(got), Format(got))
	require.Contains(t, SharedPlaces(s), stray)
	place, tenant := placeOf(s, filepath.Join(alpha.State, "snapshot.json"))
	require.Equal(t, "alpha true", place+" "+map[bool]string{true: "true", false: "false"}[tenant])

	// Write scope: alpha's own state is expected by a pattern relative to
	// its state folder; addressed to beta, the same change is alpha's.
	after, err := HashTree(ctx, s.LaunchHome, filepath.Join(s.Root, "state"))
	require.NoError(t, err)
	require.Empty(t, WriteScopeChanges(s, "alpha", before, after, "snapshot.json", "/"+filepath.ToSlash(stray[1:])))
	ws := WriteScopeChanges(s, "beta", before, after, "snapshot.json", stray)
	require.Len(t, ws, 1)
	require.Equal(t, "alpha", ws[0].Tenant)
}
