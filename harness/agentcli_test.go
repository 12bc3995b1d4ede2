package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// {env} is one argument a variable when it is a whole argument (an exec
// transport), shell-quoted words inside a longer one (a command string);
// {home} is the home as given.
func TestExpandCLIFillsHomeAndEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HOME": "/srv/home", "B": "it's x", "A": "1"}
	got := expandCLI([]string{"kubectl", "exec", "-i", "pod", "--", "env", "{env}", "agentd", "tui"}, "/srv/home", env)
	assert.Equal(t, []string{"kubectl", "exec", "-i", "pod", "--", "env", "A=1", "B=it's x", "HOME=/srv/home", "agentd", "tui"}, got)
	got = expandCLI([]string{"ssh", "h", "env {env} agentd tui --home {home}"}, "/srv/home", env)
	assert.Equal(t, []string{"ssh", "h", `env A=1 B='it'\''s x' HOME=/srv/home agentd tui --home /srv/home`}, got)
}

// A running server's stdio command is the stdio backend only when its
// remote: block reaches the homes, and must carry them ({env} or {home}):
// the transport forwards no environment.
func TestRemoteStdioNeedsFilesAndCarriesItsHome(t *testing.T) {
	t.Parallel()
	spec := func() *remote.Spec {
		return &remote.Spec{Home: "/srv/home", Workdirs: "/srv/work",
			Pull: []string{"ssh", "h", "tar -C {path} -cf - ."}, Push: []string{"ssh", "h", "tar -C {path} -xf -"}}
	}
	tg := Target{Name: "staging", URL: "http://127.0.0.1:1", Token: "t", Reach: spec(),
		Stdio: []string{"ssh", "h", "env {env} agentd tui"}, CronTick: []string{"ssh", "h", "{env}", "agentd", "cron", "tick"}}
	require.NoError(t, tg.Validate())
	ok, why := tg.Supports(BackendStdio)
	assert.True(t, ok, why)

	bare := tg
	bare.Stdio = []string{"agentd", "tui"}
	err := bare.Validate()
	require.Error(t, err, "a stdio command that would run on the runner's own home")
	assert.Contains(t, err.Error(), "names neither {env} nor {home}")

	noFiles := tg
	noFiles.Reach = &remote.Spec{Stop: []string{"true"}, Start: []string{"true"}}
	noFiles.TenantsFile = "roster.json"
	require.NoError(t, noFiles.Validate())
	ok, why = noFiles.Supports(BackendStdio)
	assert.False(t, ok)
	assert.Contains(t, why, "remote.home, remote.pull and remote.push")

	noRemote := noFiles
	noRemote.Reach = nil
	ok, why = noRemote.Supports(BackendStdio)
	assert.False(t, ok)
	assert.Contains(t, why, "the target is a running remote server")

	// {env} and {home} belong to stdio and cron_tick alone.
	serve := AgentdTarget("agentd")
	serve.Serve = append(serve.Serve, "--home", "{home}")
	assert.ErrorContains(t, serve.Validate(), "{home}")
}

// Through a transport that forwards no environment (env -i stands for
// ssh), the stdio process gets its HOME on the server's host from {env},
// finds the homes pushed there before it started, and ends when its
// stdin closes. The "host" is a folder here.
func TestRemoteStdioStartsOnPushedHomes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	tg := Target{Name: "staging", URL: "http://127.0.0.1:1", Token: "t",
		Reach: &remote.Spec{Home: filepath.Join(host, "home"), Workdirs: filepath.Join(host, "work"),
			Pull: []string{"sh", "-c", `mkdir -p "$0" && tar -C "$0" -cf - .`, "{path}"},
			Push: []string{"sh", "-c", `mkdir -p "$0" && tar -C "$0" -xf -`, "{path}"}},
		Stdio: []string{"env", "-i", "PATH=" + os.Getenv("PATH"), "sh", "-c",
			`env {env} sh -c 'echo "HOME=$HOME"; echo "AGENTD_HOME=$AGENTD_HOME"; echo "RUN=$` + procgroup.MarkerVar + `"; test -f "$AGENTD_HOME/config.yaml" && echo planted; cat'`}}
	box, err := NewSandbox(t.Context(), filepath.Join(dir, "run"), tg, SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2)}})
	require.NoError(t, err)
	defer func() { assert.NoError(t, box.Close()) }()
	// A file the harness writes after planting reaches the host before
	// the process starts.
	soul := filepath.Join(box.Set.Launch().Home, "SOUL.md")
	require.NoError(t, os.WriteFile(soul, []byte("written before the start"), 0o644))

	p, err := box.StartStdio(t.Context(), "stdio-x")
	require.NoError(t, err)
	ctx := t.Context()
	_, err = p.WaitLine(ctx, regexp.MustCompile(`^planted$`))
	require.NoError(t, err, "%s", p.Tail())
	lines := strings.Join(p.Lines(), "\n")
	home := filepath.Join(host, "home")
	assert.Contains(t, lines, "HOME="+home+"\n")
	assert.Contains(t, lines, "AGENTD_HOME="+filepath.Join(home, ".agentd")+"\n")
	assert.Contains(t, lines, "RUN="+box.RunID+"\n")
	got, err := os.ReadFile(filepath.Join(home, ".agentd", "SOUL.md"))
	require.NoError(t, err)
	assert.Equal(t, "written before the start", string(got))

	require.NoError(t, p.Stdin().Close())
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the stdio process did not end when its stdin closed:\n%s", p.Tail())
	}
}
