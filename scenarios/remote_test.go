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

// The server's host beyond its homes: a running server meets server_host
// with remote.exec, remote.processes, its files and workdirs, and each
// one missing is named; homes_in_place and server_here stay unmet on a
// running server, saying why; a server the harness starts meets all three.
func TestRemoteExecMeetsServerHostNeed(t *testing.T) {
	t.Parallel()
	files := &remote.Spec{Home: "/srv/home", Workdirs: "/srv/work",
		Pull: []string{"ssh", "h", "tar -C {path} -cf - ."}, Push: []string{"ssh", "h", "tar -C {path} -xf -"}}
	tg := harness.Target{Name: "staging", URL: "http://127.0.0.1:1", Token: "t", Reach: files}
	require.NoError(t, tg.Validate())
	why := NeedServerHost.Unmet(tg)
	assert.Contains(t, why, "remote.exec")
	assert.Contains(t, why, "remote.processes")
	assert.NotContains(t, why, "remote.workdirs")

	full := *files
	full.Exec = []string{"ssh", "h", "{command}"}
	full.Processes = []string{"ssh", "h", remote.LinuxProcessesFast}
	tg.Reach = &full
	require.NoError(t, tg.Validate())
	assert.Empty(t, NeedServerHost.Unmet(tg))
	assert.Contains(t, NeedHomesInPlace.Unmet(tg), "not yet done through remote.exec")
	assert.Contains(t, NeedServerHere.Unmet(tg), "inotify")

	local := harness.AgentdTarget("agentd")
	for _, n := range []Need{NeedServerHost, NeedHomesInPlace, NeedServerHere} {
		assert.Empty(t, n.Unmet(local), n)
	}
	// Which scenarios need which: hostile-plugin runs on a host it
	// reaches; the chains need their homes in place; surface the server here.
	for id, want := range map[string]Need{"hostile-plugin": NeedServerHost, "hostile-chains": NeedHomesInPlace,
		"hostile-restarts": NeedHomesInPlace, "surface": NeedServerHere} {
		s, err := Default().Get(id)
		require.NoError(t, err, id)
		assert.Contains(t, s.Needs, want, id)
	}
}
