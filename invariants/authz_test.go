package invariants

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func TestPredictableIDs(t *testing.T) {
	t.Parallel()
	assert.Empty(t, PredictableIDs("live session", []string{"s-3f9a0c1d2b4e5f60", "s-9c1d2b4e5f603f9a"}), "random ids are not guessable")
	fs := PredictableIDs("live session", []string{"s-1", "s-2"})
	require.Len(t, fs, 1)
	assert.Equal(t, Authz, fs[0].Invariant)
	fs = PredictableIDs("stored session", []string{"session-000041", "session-000042", "session-000100"})
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Detail, "follow a counter")
	assert.Empty(t, PredictableIDs("x", []string{"job-1000", "job-5000"}), "far apart numbers are no counter of one run")
	assert.Equal(t, []string{"s-41", "s-43", "s-44"}, Neighbours("s-42"))
	assert.Equal(t, []string{"id-007", "id-009", "id-010"}, Neighbours("id-008"), "same width")
	assert.Nil(t, Neighbours("s-3f9a0c1d2b4e5f6a"))
}

func TestOperatorSecretsAndSharedPlaces(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true})
	require.NoError(t, err)
	require.NoError(t, set.WriteHomes(tenants.HomeExtras{}))
	alpha := set.Get("alpha")

	op, err := NewOperator(map[string]string{"serve_token": "0123456789abcdef0123456789abcdef"})
	require.NoError(t, err)
	assert.Empty(t, op.Text("alpha", "frame", []byte("nothing here")))
	fs := op.Text("alpha", "frame", []byte(`{"env":"AGENTD_SESSION_TOKEN=0123456789abcdef0123456789abcdef"}`))
	require.Len(t, fs, 1)
	assert.Equal(t, OperatorSecret, fs[0].Invariant)
	assert.Equal(t, OperatorOwner, fs[0].Owner)
	assert.Equal(t, tenants.Kind("serve_token"), fs[0].Kind)

	// Shared places: everything outside the homes and workdirs.
	tmp := filepath.Join(set.Root, "tmp")
	require.NoError(t, os.MkdirAll(tmp, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "copy.txt"), []byte("k="+alpha.ProviderKey()), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(set.Home, "stray.txt"), []byte("clean"), 0o600))
	places := SharedPlaces(set)
	assert.Contains(t, places, tmp)
	assert.Contains(t, places, filepath.Join(set.Home, "stray.txt"))
	for _, p := range places {
		assert.False(t, within(p, set.LaunchHome), "a home is no shared place: %s", p)
		assert.False(t, within(p, alpha.Workdir), "a workdir is no shared place: %s", p)
	}
	chk, err := NewChecker(set.Tenants)
	require.NoError(t, err)
	leaks := chk.SharedPlaceLeaks(t.Context(), places)
	require.Len(t, leaks, 1, "%v", leaks)
	assert.Equal(t, SharedPlace, leaks[0].Invariant)
	assert.Equal(t, "alpha", leaks[0].Owner)
	assert.Equal(t, "", leaks[0].Tenant, "nobody owns a shared place")
	// A clean shared file gives no finding.
	assert.Empty(t, chk.SharedPlaceLeaks(t.Context(), []string{filepath.Join(set.Home, "stray.txt")}))
}

// The machine's temp folder: a tenant's secret there is a finding, but an
// entry the scanner cannot read (another program's decompression bomb) is
// only listed as not scanned, never a Harness finding: it decides nothing.
func TestSystemTempLeaksNeverFailOnOthersEntries(t *testing.T) {
	t.Parallel()
	set, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true})
	require.NoError(t, err)
	alpha := set.Get("alpha")
	dir := t.TempDir()
	secret := filepath.Join(dir, "copy.txt")
	require.NoError(t, os.WriteFile(secret, []byte("k="+alpha.ProviderKey()), 0o600))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(make([]byte, 24<<20))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	bomb := filepath.Join(dir, "other-program", "zeros.gz")
	require.NoError(t, os.MkdirAll(filepath.Dir(bomb), 0o755))
	require.NoError(t, os.WriteFile(bomb, gz.Bytes(), 0o600))

	chk, err := NewChecker(set.Tenants)
	require.NoError(t, err)
	// The positive control: as a shared place of the sandbox, the bomb is
	// a harness failure (the scan is incomplete).
	shared := chk.SharedPlaceLeaks(t.Context(), []string{secret, filepath.Dir(bomb)})
	require.Len(t, shared, 2, Format(shared))
	found, notScanned := chk.SystemTempLeaks(t.Context(), []string{secret, filepath.Dir(bomb)})
	require.Len(t, found, 1, Format(found))
	assert.Equal(t, SharedPlace, found[0].Invariant)
	assert.Equal(t, "alpha", found[0].Owner)
	require.Len(t, notScanned, 1)
	assert.Contains(t, notScanned[0], "decompression bomb refused")
}

// An entry of the system temp folder that went while it was scanned
// (another program's build folder, cleaned up) is not even listed as not
// scanned; one that could not be read is.
func TestSystemTempEntryGoneIsNotListed(t *testing.T) {
	t.Parallel()
	assert.True(t, gone(scan.Skip{Path: "/tmp/go-build1", Err: fmt.Errorf("walk: %w", fs.ErrNotExist)}))
	assert.False(t, gone(scan.Skip{Path: "/tmp/zeros.gz", Err: errors.New("decompression bomb refused")}))
	assert.False(t, gone(scan.Skip{Path: "/tmp/x", Err: fmt.Errorf("walk: %w", fs.ErrPermission)}))
}
