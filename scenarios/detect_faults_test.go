package scenarios

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// detectFaultNames are the faults of authorization, operator secrets,
// shared places and lifecycle edges.
var detectFaultNames = []string{"token-in-tool-env", "tmp-copy", "create-copies-launch-env",
	"resume-any-profile", "sequential-sessions", "session-follows-id", "save-key-launch-fallback"}

// TestSelfTestDetectFaults runs the self-test for those faults only (the
// full matrix is TestSelfTestCatchesEverySeededFault); DETECT_FAULTS
// narrows it to a comma-separated list.
func TestSelfTestDetectFaults(t *testing.T) {
	t.Parallel()
	want := detectFaultNames
	if v := os.Getenv("DETECT_FAULTS"); v != "" {
		want = strings.Split(v, ",")
	}
	var faults []Fault
	for _, f := range Faults() {
		for _, n := range want {
			if f.Name == n {
				faults = append(faults, f)
			}
		}
	}
	require.Len(t, faults, len(want), "every named fault is in Faults()")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := SelfTest(ctx, Default(), Config{Target: agentdTarget(), Tenants: 3, WorkDir: t.TempDir(), Parallel: 2}, faults)
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, WriteSelfTestTable(&table, res))
	t.Logf("\n%s", table.String())
	for _, o := range res.Outcomes {
		assert.True(t, o.Caught, "%s missed by %s (expected %s, saw %v): %s", o.Fault, o.Scenario, o.Expected, o.Seen, o.Error)
		assert.True(t, o.Clean, "clean run of %s", o.Scenario)
	}
	for _, r := range res.Clean {
		assert.Equal(t, Pass, r.Result, "%s: %v", r.ID, r.Log)
	}
}
