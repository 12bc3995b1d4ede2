package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestChainRowWithoutItsEffectIsNotCredited: with home-follows-links on,
// persist-log-to-soul leaves its attacker's log lines in its victim's
// SOUL.md, and that victim attacks next with link-cache, whose effect is
// switched off here (its cache folder is not linked: the steps only make
// its model-provider plugin its provider). The row must not be credited
// with what the earlier row left in its attacker's places; the earlier
// row, which did land, is (the positive control: the leftovers were there
// to be mistaken).
func TestChainRowWithoutItsEffectIsNotCredited(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a run of hostile-chains")
	}
	var chains []attack.Chain
	for _, ch := range attack.Chains() {
		if ch.Fault != attack.FaultHomeFollowsLinks || ch.Trigger != attack.OnRestart && ch.Trigger != attack.OnCrash {
			continue
		}
		if ch.ID == "link-cache" {
			ch.Steps = ch.Steps[1:] // no link: the plugin's cache stays in its own home
			ch.Restore = []string{"{config}"}
		}
		chains = append(chains, ch)
	}
	require.NotEmpty(t, chains)
	rep := runOne(t, chainsSpec(chains), withEnv(agentdTarget(), FaultEnv(attack.FaultHomeFollowsLinks)))
	row := func(id string) ChainRow {
		r, ok := lastChainRow(rep.Chains, id)
		var ended []string
		for _, p := range rep.Phases {
			if p.Error != "" {
				ended = append(ended, p.Name+": "+p.Error)
			}
		}
		require.True(t, ok, "row %s did not run: %v; the phases' errors: %q", id, rep.Chains, ended)
		return r
	}
	earlier, later := row("persist-log-to-soul"), row("link-cache")
	require.Equal(t, earlier.Victim, later.Attacker, "the test needs link-cache's attacker to be persist-log-to-soul's victim: %+v, %+v", earlier, later)
	assert.Contains(t, earlier.Found, invariants.File, "persist-log-to-soul landed (the leftovers the later row could be credited with): %+v", earlier)
	assert.Empty(t, later.Found, "link-cache, its effect switched off, was credited with %v: %v", later.Found, later.Evidence)
}

// TestAttributeChainsCreditsOnlyTheRowsOwnEffect: attributeChains over
// runs and findings made by hand, each finding one way a row could be
// credited with what it did not cause, beside the same evidence when the
// row did cause it (so each rule is shown to be what tells them apart).
func TestAttributeChainsCreditsOnlyTheRowsOwnEffect(t *testing.T) {
	alpha, beta, dflt := &tenants.Tenant{Name: "alpha"}, &tenants.Tenant{Name: "beta"}, &tenants.Tenant{Name: "default"}
	const soul, cache = "/h/beta/SOUL.md", "/h/default/plugin_host/m.json"
	window := func() *chainWindow {
		return &chainWindow{reqs: map[string][2]int{"alpha": {0, 9}, "beta": {0, 9}, "default": {0, 9}},
			files:  map[string][2]int64{soul: {100, 400}, cache: {-1, 300}},
			frames: map[string][2]int{}, direct: map[string]bool{}}
	}
	run := func(id string, a, v *tenants.Tenant, stale *staleSet) *chainRun {
		return &chainRun{ch: attack.Chain{ID: id}, a: a, v: v, phase: "restart", kind: chainRowKind(id), stale: stale, window: window()}
	}
	clean := func() *staleSet { return &staleSet{feed: map[string]bool{}, files: map[string]map[string]bool{}} }
	req := func(tenant, owner string, kind tenants.Kind) invariants.Finding {
		return invariants.Finding{Invariant: invariants.Request, Tenant: tenant, Owner: owner, Kind: kind, Where: invariants.Where{Request: intp(3)}}
	}
	file := func(tenant, owner string, kind tenants.Kind, path string, off int64) invariants.Finding {
		return invariants.Finding{Invariant: invariants.File, Tenant: tenant, Owner: owner, Kind: kind, Where: invariants.Where{Path: path, Offset: &off}}
	}
	credited := func(runs []*chainRun, f invariants.Finding) []string {
		found, _ := attributeChains([]PhaseReport{{Name: "restart", Findings: []invariants.Finding{f}}}, runs, nil)
		var out []string
		for i, r := range runs {
			if found[i][f.Invariant] > 0 {
				out = append(out, r.ch.ID)
			}
		}
		return out
	}
	leftover := clean()
	leftover.feed["alpha"] = true
	tests := []struct {
		name string
		runs []*chainRun
		f    invariants.Finding
		want []string
	}{
		// The case of issue 21: the attacker's requests carry what an
		// earlier row left in its SOUL.md.
		{"another tenant's canary its attacker's files held as it began", []*chainRun{run("link-cache", beta, dflt, leftover)},
			req("beta", "alpha", tenants.Model), nil},
		{"another tenant's canary new to its attacker's places", []*chainRun{run("link-cache", beta, dflt, clean())},
			req("beta", "alpha", tenants.Model), []string{"link-cache"}},
		{"its attacker's canary of an earlier row", []*chainRun{run("link-cache", beta, dflt, clean())},
			file("default", "beta", chainRowKind("persist-log-to-soul"), cache, 10), nil},
		{"its attacker's canary of another kind", []*chainRun{run("link-cache", beta, dflt, clean())},
			file("default", "beta", tenants.Model, cache, 10), nil},
		{"its own canary", []*chainRun{run("link-cache", beta, dflt, clean())},
			file("default", "beta", chainRowKind("link-cache"), cache, 10), []string{"link-cache"}},
		// A restart round: alpha's row writes into beta's SOUL.md while
		// beta's row runs; neither is credited with alpha's model there.
		{"a canary of a tenant that attacked the place in the same window",
			[]*chainRun{run("persist-log-to-soul", alpha, beta, clean()), run("link-cache", beta, dflt, clean())},
			file("beta", "alpha", tenants.Model, soul, 150), nil},
		// CI's flake at 0.6.0: SQLite put the attacker's turn into a page
		// below the victim's database's old end (and as a row of it): the
		// row's own canary is the row's wherever it lies.
		{"its own canary below a changed file's old end", []*chainRun{run("persist-state", beta, dflt, clean())},
			file("default", "beta", chainRowKind("persist-state"), soul, 50), []string{"persist-state"}},
		{"its own canary in a database row", []*chainRun{run("persist-state", beta, dflt, clean())},
			invariants.Finding{Invariant: invariants.File, Tenant: "default", Owner: "beta", Kind: chainRowKind("persist-state"), Where: invariants.Where{Path: soul, Part: "row messages row 57 content"}}, []string{"persist-state"}},
		{"another's canary below a changed file's old end", []*chainRun{run("persist-state", beta, dflt, clean())},
			file("beta", "alpha", tenants.Model, soul, 50), nil},
		{"what the server wrote after the window closed", []*chainRun{run("persist-state", beta, dflt, clean())},
			file("beta", "alpha", tenants.Model, soul, 400), nil},
		{"a row that never began", []*chainRun{run("link-cache", beta, dflt, nil)},
			req("beta", "default", tenants.Model), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, credited(tc.runs, tc.f))
		})
	}
	t.Run("a finding made for the row", func(t *testing.T) {
		r := run("persist-log-to-soul", alpha, beta, clean())
		f := file("beta", "alpha", tenants.Model, soul, 150)
		r.window.direct[f.String()] = true
		assert.Equal(t, []string{"persist-log-to-soul"}, credited([]*chainRun{r}, f))
	})
}

func intp(i int) *int { return &i }

// TestARoundHoldsNothingOfAFileMadeAgainSince: a clean stop removes a
// WAL, and the next round's server makes it again, so the same offsets
// name other bytes. A hit in the new WAL is the later round's, whose
// window has the file added, never an earlier round's whose window
// measured the file that went. The positive control: not told the file
// went (as before the fix, a Landlock-only run's case), the earlier round
// is credited with the later one's leak and the later one with nothing.
func TestARoundHoldsNothingOfAFileMadeAgainSince(t *testing.T) {
	alpha, beta, dflt := &tenants.Tenant{Name: "alpha"}, &tenants.Tenant{Name: "beta"}, &tenants.Tenant{Name: "default"}
	const wal = "/h/default/state.db-wal"
	mark := func(size int64) evidenceMark {
		m := evidenceMark{reqs: map[string]int{}, frames: map[string]int{}, files: map[string]invariants.Entry{}}
		if size >= 0 {
			m.files[wal] = invariants.Entry{Size: size, ModTime: time.Unix(size, 0)}
		}
		return m
	}
	clean := &staleSet{feed: map[string]bool{}, files: map[string]map[string]bool{}}
	hit := invariants.Finding{Invariant: invariants.File, Tenant: "default", Owner: "alpha", Kind: tenants.Reply,
		Where: invariants.Where{Path: wal, Offset: intp64(87658)}}
	for _, noted := range []bool{true, false} {
		// Round 1: default's row; its WAL grows from 50,000 to 100,000
		// bytes. Round 2: alpha's row into default's database; the stop
		// removes the WAL, and it grows again to 90,000 bytes.
		earlier := &chainRun{ch: attack.Chain{ID: "link-cache"}, a: dflt, v: beta, phase: "restart", stale: clean}
		later := &chainRun{ch: attack.Chain{ID: "persist-state"}, a: alpha, v: dflt, phase: "restart", stale: clean}
		runs := []*chainRun{earlier, later}
		earlier.window = windowOf(mark(50000), mark(100000), nil)
		gone := map[string]bool{}
		if noted {
			gone = wentBetween(mark(100000), mark(-1))
			require.Equal(t, map[string]bool{wal: true}, gone)
			forgetWent(runs, "restart", gone)
		}
		later.window = windowOf(mark(100000), mark(90000), gone)
		assert.Equal(t, !noted, earlier.holds(hit, nil), "the earlier round holds the hit (noted the WAL went: %v)", noted)
		assert.Equal(t, noted, later.holds(hit, nil), "the later round holds the hit (noted the WAL went: %v)", noted)
		// alpha's reply in its attacker's WAL is credited to default's row
		// only when that row's window holds it.
		found, _ := attributeChains([]PhaseReport{{Name: "restart", Findings: []invariants.Finding{hit}}}, runs, nil)
		assert.Equal(t, !noted, found[0][invariants.File] == 1, "link-cache credited with alpha's reply (noted the WAL went: %v)", noted)
	}
	// An earlier phase's window keeps its files: its findings were
	// scanned before the file went.
	other := &chainRun{ch: attack.Chain{ID: "link-soul"}, a: beta, v: dflt, phase: "home-links", window: windowOf(mark(1), mark(2), nil)}
	forgetWent([]*chainRun{other}, "restart", map[string]bool{wal: true})
	assert.Contains(t, other.window.files, wal)
}

func intp64(i int64) *int64 { return &i }

// TestHomeFilesFollowNoLink: the clean slate reads and puts back a home's
// files beneath it, never through a link the tenant made (its target,
// another home, is left as it was).
func TestHomeFilesFollowNoLink(t *testing.T) {
	home, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, ".env")
	require.NoError(t, os.WriteFile(target, []byte("SECRET=other\n"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(home, "SOUL.md")))
	_, exists, err := readHomeFile(home, "SOUL.md")
	assert.True(t, exists)
	assert.ErrorIs(t, err, errNotRegular)
	data, exists, err := readHomeFile(home, "MEMORY.md")
	assert.NoError(t, err)
	assert.False(t, exists)
	assert.Nil(t, data)

	require.NoError(t, putHomeFile(home, "SOUL.md", []byte("own soul\n"), true))
	st, err := os.Lstat(filepath.Join(home, "SOUL.md"))
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular(), "the link is replaced by the file, not written through")
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "SECRET=other\n", string(got), "the link's target is untouched")
	data, exists, err = readHomeFile(home, "SOUL.md")
	require.NoError(t, err)
	assert.True(t, exists)
	assert.Equal(t, "own soul\n", string(data))

	// A file that was not there goes; a parent that is a link out is not
	// followed.
	require.NoError(t, putHomeFile(home, "SOUL.md", nil, false))
	_, err = os.Lstat(filepath.Join(home, "SOUL.md"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.Symlink(other, filepath.Join(home, "cron")))
	assert.Error(t, putHomeFile(home, "cron/.env", []byte("x"), true))
	got, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "SECRET=other\n", string(got))
}

// TestChainRowTheAttackersOwnShellCannotPlantRunsAgain: with the operator
// pinning Landlock, the launch tenant's shell may write its home's files
// in place but add no entry to its top level (Landlock cannot carve the
// profiles' homes out of a writable launch home). A seed that makes the
// launch tenant the first attacker of every group: its links there stop
// in its own shell, so each such row is reported stopped (never as the
// server's defence) and runs again with the next attacker, which lands it
// with home-follows-links on, on a turn and on a restart alike; the row
// only the launch tenant may run (own-sandbox-none) edits its config.yaml
// in place, so its plant takes.
func TestChainRowTheAttackersOwnShellCannotPlantRunsAgain(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a run of hostile-chains")
	}
	ids := []string{"link-config", "own-sandbox-none", "persist-state"}
	var chains []attack.Chain
	for _, ch := range attack.Chains() {
		if slices.Contains(ids, ch.ID) {
			chains = append(chains, ch)
		}
	}
	require.Len(t, chains, len(ids))
	spec := chainsSpec(chains)
	seed := launchFirstSeed(t, spec.ID, 3)
	faults := attack.FaultHomeFollowsLinks + "," + attack.FaultTenantOperatorSettings
	target := withEnv(landlockTarget(t, agentdTarget()), FaultEnv(faults))
	cat, err := NewCatalog(spec)
	require.NoError(t, err)
	reps, err := RunCatalog(context.Background(), cat, Config{Target: target, Tenants: 3, WorkDir: t.TempDir(), Seed: seed})
	require.NoError(t, err)
	require.Len(t, reps, 1)
	rep := reps[0]
	for _, r := range rep.Chains {
		t.Logf("%-16s %-8s -> %-8s stopped=%v found=%v: %s", r.Row, r.Attacker, r.Victim, r.Stopped, r.Found, r.Outcome)
	}
	for _, id := range []string{"link-config", "persist-state"} {
		var tries []ChainRow
		for _, r := range rep.Chains {
			if r.Row == id {
				tries = append(tries, r)
			}
		}
		require.Len(t, tries, 2, "row %s: the launch tenant's stopped try, then the next attacker's", id)
		first, second := tries[0], tries[1]
		assert.Equal(t, "default", first.Attacker, "row %s: the seed makes the launch tenant its first attacker", id)
		assert.True(t, first.Stopped, "row %s: %s", id, first.Outcome)
		assert.Contains(t, first.Outcome, "default's own shell could not make the plant")
		assert.Empty(t, first.Found, "row %s: a stopped plant is no attack", id)
		assert.False(t, second.Stopped, "row %s: %s", id, second.Outcome)
		assert.NotEqual(t, "default", second.Attacker)
		ch := chains[slices.IndexFunc(chains, func(c attack.Chain) bool { return c.ID == id })]
		assert.Contains(t, second.Found, ch.Expect, "row %s by %s, home-follows-links on: %s", id, second.Attacker, second.Outcome)
	}
	// The operator's pin outranks the row's own terminal.sandbox, fault or
	// not: here its plant is what is checked (with Landlock that auto
	// resolves to, on a machine without bubblewrap, the self-test finds it).
	own, ok := lastChainRow(rep.Chains, "own-sandbox-none")
	require.True(t, ok)
	assert.Equal(t, "default", own.Attacker)
	assert.False(t, own.Stopped, "own-sandbox-none edits the launch config in place: %s", own.Outcome)
}

// launchFirstSeed is a seed under which scenario id visits the launch
// tenant first of n (Env.permuted): it attacks first in every group.
func launchFirstSeed(t *testing.T, id string, n int) uint64 {
	t.Helper()
	var ts []*tenants.Tenant
	for _, name := range tenants.Names(n) {
		ts = append(ts, &tenants.Tenant{Name: name})
	}
	for seed := uint64(1); seed < 1000; seed++ {
		if (&Env{Rand: scenarioRand(seed, id)}).permuted(ts)[0].Name == ts[0].Name {
			return seed
		}
	}
	t.Fatalf("no seed under 1000 puts %s first in %s", ts[0].Name, id)
	return 0
}
