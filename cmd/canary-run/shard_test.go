package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

func TestShardsCoverTheCatalogOnce(t *testing.T) {
	t.Parallel()
	all := scenarios.Default().IDs()
	for n := 1; n <= len(all); n++ {
		var got []string
		for k := 1; k <= n; k++ {
			sel, err := certify.SelectShard("", strconv.Itoa(k)+"/"+strconv.Itoa(n))
			require.NoError(t, err)
			require.NotEmpty(t, sel.IDs, "%d/%d", k, n)
			specs, err := scenarios.Default().Match(sel.Run)
			require.NoError(t, err)
			require.Len(t, specs, len(sel.IDs), "the --run expression selects exactly the shard")
			again, _ := certify.SelectShard("", strconv.Itoa(k)+"/"+strconv.Itoa(n))
			require.Equal(t, sel.IDs, again.IDs, "deterministic")
			got = append(got, sel.IDs...)
		}
		slices.Sort(got)
		require.Equal(t, all, got, "%d shards: disjoint and complete", n)
	}
	// A shard of a selection.
	sel, err := certify.SelectShard("^(stdio-separate|gateway|shell-reuse)$", "2/2")
	require.NoError(t, err)
	require.Equal(t, []string{"gateway"}, sel.IDs)

	for spec, want := range map[string]string{
		"0/3": "want K/N with 1 <= K <= N", "4/3": "want K/N", "a/b": "want K/N", "3": "want K/N", "1/0": "want K/N",
		"1/99": "fewer than 99 shards",
	} {
		_, err := certify.SelectShard("", spec)
		require.ErrorContains(t, err, want, spec)
	}
	code, _, stderr := runCLI(t, "--shard", "5/4")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--shard "5/4": want K/N`)
	code, _, stderr = runCLI(t, "--self-test", "--shard", "1/2")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--shard does not apply")
}

// TestShardThenMerge is docs/sharding.md's matrix on two small shards: each runs
// its slice of the selection, merge joins them into one certificate of the
// whole selection in catalog order, with the worst verdict.
func TestShardThenMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := "^(stdio-separate|concurrent-turns)$"
	var dirs []string
	for _, k := range []string{"1/2", "2/2"} {
		out := filepath.Join(dir, "shard-"+k[:1])
		dirs = append(dirs, out)
		var stdout, stderr syncio.Buffer
		code := dispatch(t.Context(), []string{"--run", run, "--shard", k, "--tenants", "2", "--no-self-test", "--out", out},
			strings.NewReader(""), &stdout, &stderr, noEnv)
		require.Equal(t, 0, code, "shard %s:\n%s\n%s", k, &stdout, &stderr)
		c := readCertificate(t, out)
		require.Len(t, c.Scenarios, 1, "shard %s runs its slice only", k)
		require.NotNil(t, c.Shard)
	}
	merged := filepath.Join(dir, "merged")
	code, stdout, stderr := runCLI(t, append([]string{"merge", "--out", merged}, dirs[1], dirs[0])...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "verdict: certified")
	c := readCertificate(t, merged)
	require.Equal(t, certificate.Certified, c.Verdict)
	require.Nil(t, c.Shard, "the merge is the whole run")
	var ids []string
	for _, r := range c.Scenarios {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"stdio-separate", "concurrent-turns"}, ids, "catalog order, whatever order the folders came in")

	// A missing shard is refused, with nothing written.
	code, _, stderr = runCLI(t, "merge", "--out", filepath.Join(dir, "half"), dirs[0])
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "shard 2/2 missing")
	require.NoDirExists(t, filepath.Join(dir, "half"))
	code, _, stderr = runCLI(t, "merge")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "give the folders the shards wrote")
}
