package invariants

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// A tenant's canary left in a system folder, another tenant's canary in a
// tenant's workdir, and anything new in a strict place are findings; the
// tenant's own files in its own workdir and an unmarked file in a system
// folder are not.
func TestOutsideWrites(t *testing.T) {
	t.Parallel()
	ts := newSet(t).Tenants
	a, b := ts[0], ts[1]
	root := t.TempDir()
	sys, work := filepath.Join(root, "sys"), filepath.Join(root, "work")
	wa, wb := filepath.Join(work, "a"), filepath.Join(work, "b")
	for _, d := range []string{sys, wa, wb} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	places := []Place{{Root: sys}, {Root: work, Strict: true}, {Root: wa, Owner: a.Name}, {Root: wb, Owner: b.Name}}
	ctx := context.Background()
	before := ListPlaces(ctx, places)
	write := func(p, s string) { require.NoError(t, os.WriteFile(p, []byte(s), 0o644)) }
	write(filepath.Join(sys, "prog"), "#!/bin/sh\n# "+a.ProviderKey()+"\n")
	write(filepath.Join(sys, "other-program"), "nothing of the run")
	write(filepath.Join(wb, "x.txt"), a.Value(tenants.Soul))
	write(filepath.Join(wa, "own.txt"), a.Value(tenants.Soul))
	write(filepath.Join(work, "stray"), "no canary")
	require.NoError(t, os.Symlink("/elsewhere/"+b.Value(tenants.Soul), filepath.Join(sys, "link")))
	fs := OutsideWrites(ctx, ts, places, before, ListPlaces(ctx, places))
	var got []string
	for _, f := range fs {
		assert.Equal(t, WriteScope, f.Invariant)
		got = append(got, f.Where.Path+" "+f.Owner)
	}
	all := strings.Join(got, "\n")
	assert.Contains(t, all, filepath.Join(sys, "prog")+" "+a.Name)
	assert.Contains(t, all, filepath.Join(sys, "link")+" "+b.Name)
	assert.Contains(t, all, filepath.Join(wb, "x.txt")+" "+a.Name)
	assert.Contains(t, all, filepath.Join(work, "stray")+" ")
	assert.NotContains(t, all, "own.txt")
	assert.NotContains(t, all, "other-program")
	assert.Len(t, fs, 4, "%s", all)

	// A name-only place sees a canary in a name, not in content.
	np := []Place{{Root: sys, NameOnly: true}}
	before = ListPlaces(ctx, np)
	write(filepath.Join(sys, "log.txt"), a.ProviderKey())
	write(filepath.Join(sys, "chain-"+a.Value(tenants.Soul)), "x")
	fs = OutsideWrites(ctx, ts, np, before, ListPlaces(ctx, np))
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Where.Path, "chain-")
}

// The profile made again under a deleted one's name is scanned for the
// deleted one's canaries, encoded ones included; the same scan over the
// deleted home before the delete sees them (its positive control).
func TestInherits(t *testing.T) {
	t.Parallel()
	ts := newSet(t).Tenants
	gen := tenants.Canary{Owner: ts[0].Name, Kind: "chain_generation", Value: "chain-generation-" + ts[0].Name + "-0123456789"}
	home := t.TempDir()
	ctx := context.Background()
	assert.Empty(t, Inherits(ctx, ts[0].Name, home, []tenants.Canary{gen}))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".env"), []byte("CHAIN_GENERATION="+gen.Value+"\n"), 0o600))
	fs := Inherits(ctx, ts[0].Name, home, []tenants.Canary{gen})
	require.Len(t, fs, 1)
	assert.Equal(t, File, fs[0].Invariant)
	assert.Equal(t, ts[0].Name, fs[0].Tenant)
	assert.Contains(t, fs[0].Detail, "deleted one's")
}

// TestPlaceOfIsTheDeepest: a path is judged by the deepest place holding
// it, on nested and sibling roots, one with a trailing slash and the root
// folder among them; a path outside every place has none.
func TestPlaceOfIsTheDeepest(t *testing.T) {
	places := []Place{{Root: "/tmp", NameOnly: true}, {Root: "/tmp/box/"}, {Root: "/tmp/box/work", NameOnly: true},
		{Root: "/tmp/boxes", Strict: true}}
	x := newPlaceIndex(places)
	for path, want := range map[string]string{"/tmp": "/tmp", "/tmp/x": "/tmp", "/tmp/box": "/tmp/box/", "/tmp/box/a": "/tmp/box/",
		"/tmp/box/work": "/tmp/box/work", "/tmp/box/work/b": "/tmp/box/work", "/tmp/box/workshop": "/tmp/box/",
		"/tmp/boxes/c": "/tmp/boxes", "/tmp/boxesx": "/tmp"} {
		p, ok := x.of(path)
		require.True(t, ok, path)
		assert.Equal(t, want, p.Root, path)
	}
	_, ok := x.of("/etc/passwd")
	assert.False(t, ok)
	p, ok := newPlaceIndex(append(places, Place{Root: "/"})).of("/etc/passwd")
	require.True(t, ok)
	assert.Equal(t, "/", p.Root)
}

// BenchmarkListPlaces lists the places hostile-chains watches on this
// machine: system folders with their entries' times, the temp folders by
// name only.
func BenchmarkListPlaces(b *testing.B) {
	places := []Place{{Root: "/usr/local"}, {Root: "/etc"}, {Root: "/opt"}, {Root: os.TempDir(), NameOnly: true}}
	entries := 0
	for b.Loop() {
		entries = len(ListPlaces(b.Context(), places))
	}
	b.ReportMetric(float64(entries), "entries/op")
}
