package scope

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

// TestPoolDeleteRefusesDrainsThenSetsTheHomeAside: a delete refuses the
// profile at once, cancels its scope's context, runs end, waits for the
// use in flight, then renames the home aside and closes the scope; a
// profile created again under the name gets a fresh home and scope.
func TestPoolDeleteRefusesDrainsThenSetsTheHomeAside(t *testing.T) {
	t.Parallel()
	homes := homesWithB(t)
	pool := NewPool(homes, nil, nil)
	defer pool.Close()
	ctx := context.Background()

	sc, release, err := pool.Use(ctx, "b")
	require.NoError(t, err)
	require.NoError(t, sc.Profile.SetEnv("K", "old-canary"))
	ended := make(chan struct{})
	deleted := make(chan error, 1)
	go func() { deleted <- pool.Delete(ctx, "b", func() { close(ended) }) }() // ends when the use is released

	<-ended
	<-sc.Context().Done() // the delete cancels the profile's work
	_, _, err = pool.Use(ctx, "b")
	require.ErrorIs(t, err, profile.ErrUnknownProfile, "a deleting profile is refused")
	require.True(t, pool.Deleting("b"))
	select {
	case err := <-deleted:
		t.Fatalf("delete ended (%v) with a use in flight", err)
	default:
	}
	require.DirExists(t, sc.Profile.Home, "the home stays while work is in flight")
	require.NoError(t, sc.Profile.SetConfig("custom_prompt", "late"), "the work in flight still has its home")
	release()
	release() // safe twice
	select {
	case err := <-deleted:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("delete did not end after the last use was released")
	}
	require.NoDirExists(t, sc.Profile.Home)
	entries, err := os.ReadDir(homes.Root())
	require.NoError(t, err)
	require.Empty(t, entries, "the home set aside was removed")
	require.Error(t, sc.Profile.SetEnv("K", "after"), "a late write never re-makes the home")
	require.NoDirExists(t, sc.Profile.Home)

	_, err = homes.Create("b")
	require.NoError(t, err)
	fresh, releaseFresh, err := pool.Use(ctx, "b")
	require.NoError(t, err)
	defer releaseFresh()
	require.NotSame(t, sc, fresh)
	env, err := fresh.Profile.LoadEnv()
	require.NoError(t, err)
	_, found := env.Lookup("K")
	require.False(t, found, "the new home holds nothing of the old")
	require.ErrorIs(t, pool.Delete(ctx, "ghost", nil), profile.ErrUnknownProfile)
	require.ErrorIs(t, pool.Delete(ctx, "", nil), profile.ErrBadName)
}

// TestPoolTrustsOnlyTheLaunchProfilesOperatorKeys: only a pool told so
// lets the launch profile's own config set operator keys; a named
// profile's never, unless the tenant-operator-settings fault is seeded.
func TestPoolTrustsOnlyTheLaunchProfilesOperatorKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		trust       bool
		fs          faults.Set
		launch, own bool
	}{
		{false, nil, false, false},
		{true, nil, true, false},
		{false, faults.Set{faults.TenantOperatorSettings: true}, true, true},
	} {
		homes := homesWithB(t)
		pool := NewPool(homes, nil, tc.fs)
		if tc.trust {
			pool.TrustLaunchOperatorKeys()
		}
		a, err := pool.Get(context.Background(), "")
		require.NoError(t, err)
		b, err := pool.Get(context.Background(), "b")
		require.NoError(t, err)
		require.Equal(t, tc.launch, a.Profile.OwnOperatorKeys, "%+v", tc)
		require.Equal(t, tc.own, b.Profile.OwnOperatorKeys, "%+v", tc)
		require.NoError(t, pool.Close())
	}
}
