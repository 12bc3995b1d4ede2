package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/remote"
)

// A running server's remote: block meets the files and restart needs; a
// block without them leaves those scenarios skipped, the reason naming
// the fields that would run them.
func TestRemoteBlockMeetsFilesAndRestartNeeds(t *testing.T) {
	t.Parallel()
	bare := harness.Target{Name: "staging", URL: "http://127.0.0.1:1", Token: "t", TenantsFile: "roster.json"}
	require.NoError(t, bare.Validate())
	assert.Contains(t, NeedFiles.Unmet(bare), "remote.home, remote.pull and remote.push")
	assert.Contains(t, NeedRestart.Unmet(bare), "remote.stop and remote.start")

	full := bare
	full.TenantsFile = ""
	full.Reach = &remote.Spec{Home: "/srv/home", Workdirs: "/srv/work",
		Pull: []string{"ssh", "h", "tar -C {path} -cf - ."}, Push: []string{"ssh", "h", "tar -C {path} -xf -"},
		Stop: []string{"ssh", "h", "stop"}, Start: []string{"ssh", "h", "start"}}
	require.NoError(t, full.Validate(), "own tenants: no tenants_file")
	assert.True(t, full.Files, "a home to mirror is files: true")
	assert.Empty(t, NeedFiles.Unmet(full))
	assert.Empty(t, NeedRestart.Unmet(full))

	// A remote: block for a server the harness starts is refused.
	local := harness.AgentdTarget("agentd")
	local.Reach = full.Reach
	err := local.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "remote: reaches a running server")
}
