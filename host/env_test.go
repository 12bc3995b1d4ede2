package host_test

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// TestTheProfilesEnvironmentComesOverTheProtocol (issue 46): the host's
// process, and so whatever launcher starts it outside a sandbox, starts
// without the profile's variables, and its plugins still see them (the
// host sets them on itself before loading any); with the launcher-env
// fault the process starts with them (the positive control).
func TestTheProfilesEnvironmentComesOverTheProtocol(t *testing.T) {
	t.Parallel()
	for _, fault := range []bool{false, true} {
		t.Run("fault="+strconv.FormatBool(fault), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, probeHome(t), func(c *host.Config) { c.EnvOutside = fault })
			mark := "PROFILE_CANARY=canary-" + filepath.Base(e.home)
			v := e.call("s", "hostprobe_env", nil)
			require.Contains(t, v["env"], mark, "the plugins see the profile's environment")
			started := procgroup.Environ(e.m.PGID()) // the process agentd started: the host's keeper
			require.NotEmpty(t, started)
			require.Equal(t, fault, slices.Contains(started, mark),
				"the host's process started with the profile's variable: %v (launcher-env fault: %v)", started, fault)
		})
	}
}
