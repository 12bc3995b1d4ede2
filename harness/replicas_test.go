package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestLoadTargetReplicas: replicas: N loads with {replica} in the serve
// command and env values; a count outside 1..8, or replicas without a
// serve command, is refused naming the field.
func TestLoadTargetReplicas(t *testing.T) {
	t.Parallel()
	tg, err := loadStdioTarget(t, "serve: [srv, --name, 'r{replica}']\ntoken_var: T\nreplicas: 3\nenv: {NODE: 'node-{replica}'}\n")
	require.NoError(t, err)
	assert.Equal(t, 3, tg.Replicas)
	assert.Equal(t, 3, tg.ReplicaCount())
	none, err := loadStdioTarget(t, "")
	require.NoError(t, err)
	assert.Equal(t, 1, none.ReplicaCount(), "no replicas: one serve process")

	requireLoadFails(t, "serve: [srv]\ntoken_var: T\nreplicas: 9\n", "replicas: 9: want 1 to 8")
	requireLoadFails(t, "serve: [srv]\ntoken_var: T\nreplicas: -1\n", "replicas: -1: want 1 to 8")
	requireLoadFails(t, "replicas: 2\n", "replicas: 2 needs serve")
	requireLoadFails(t, "serve: [srv, '{replicas}']\ntoken_var: T\n", "unknown placeholder(s) {replicas}")
}

// TestReplicaEnvFillsEachReplica: the target's env values that name
// {replica} are filled with each replica's number for its process, and
// with 1 in the sandbox's environment every other process gets.
func TestReplicaEnvFillsEachReplica(t *testing.T) {
	t.Parallel()
	tg := echoTarget("sh", "-c", `echo "$AGENTD_HOME/profiles"`)
	tg.Env = map[string]string{"NODE": "r{replica}", "ROOTED": "{root}/x", "SAME": "plain"}
	tg.Serve, tg.TokenVar, tg.Replicas = []string{"srv"}, "T", 2
	box, err := NewSandbox(context.Background(), t.TempDir(), tg, SandboxOptions{Tenants: tenants.Options{NoProviders: true}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, box.Close()) })
	assert.Equal(t, map[string]string{"NODE": "r2"}, box.ReplicaEnv(2))
	assert.Equal(t, map[string]string{"NODE": "r1"}, box.ReplicaEnv(1))
	assert.Contains(t, box.Env(nil), "NODE=r1", "every other process is replica 1")
	out, err := box.RunCommand(context.Background(), "replica", []string{"sh", "-c", `echo "$NODE {replica}"`}, box.ReplicaEnv(2))
	require.NoError(t, err)
	assert.Equal(t, "r2 1", strings.TrimSpace(out), "the process's own env wins; an argv's unfilled {replica} is 1")
}

// TestAgentdClusterTarget: the embedded agentd's cluster variant runs
// AgentdClusterReplicas serve replicas named r{replica} over a PostgreSQL
// and a Redis, owner-aware, with no state database in the homes; a
// target that is not agentd's has none.
func TestAgentdClusterTarget(t *testing.T) {
	t.Parallel()
	tg := AgentdClusterTarget("/bin/agentd")
	require.NoError(t, tg.Validate())
	assert.Equal(t, "agentd-cluster", tg.Name)
	assert.Equal(t, AgentdClusterReplicas, tg.ReplicaCount())
	assert.Equal(t, "r{replica}", tg.Env["AGENTD_REPLICA"])
	assert.Equal(t, "{postgres_url}", tg.Env["AGENTD_POSTGRES_URL"])
	assert.Equal(t, "{redis_url}", tg.Env["AGENTD_REDIS_URL"])
	assert.Equal(t, "{root}/managed", tg.Env["AGENTD_MANAGED_DIR"], "the single agentd's env stays")
	require.Len(t, tg.Stores, 2)
	assert.Equal(t, stores.Postgres, tg.Stores[0].Kind)
	assert.Equal(t, stores.Redis, tg.Stores[1].Kind)
	assert.Empty(t, tg.Layout.StateDBName(), "sessions are rows in PostgreSQL")
	assert.NotEmpty(t, AgentdTarget("/bin/agentd").Layout.StateDBName(), "the single agentd's layout is untouched")

	self, ok := AgentdClusterOf(AgentdTarget("/bin/self", "-test.run=x"))
	require.True(t, ok)
	assert.Equal(t, []string{"/bin/self", "-test.run=x", "serve"}, self.Serve[:3])
	_, ok = AgentdClusterOf(echoTarget("echo"))
	assert.False(t, ok)

	with := tg.WithServeArgs("--auth-cache-ttl", "1m")
	assert.Equal(t, "--auth-cache-ttl", with.Serve[len(with.Serve)-2])
	assert.NotEqual(t, len(with.Serve), len(tg.Serve), "the target it came from keeps its command")
}

// TestAgentdClusterExampleLoads keeps examples/targets/agentd-cluster a
// valid file of three replicas, each named by {replica}, and the same
// cluster as the built-in one (AgentdClusterTarget) but for the command.
func TestAgentdClusterExampleLoads(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "agentd-cluster")
	assert.Equal(t, 3, tg.ReplicaCount())
	assert.Equal(t, "r{replica}", tg.Env["AGENTD_REPLICA"])
	built := AgentdClusterTarget("agentd")
	assert.Equal(t, built.ReplicaCount(), tg.ReplicaCount())
	assert.Equal(t, built.Stores, tg.Stores)
	for _, k := range []string{"AGENTD_REPLICA", "AGENTD_POSTGRES_URL", "AGENTD_REDIS_URL", "AGENTD_MANAGED_DIR"} {
		assert.Equal(t, built.Env[k], tg.Env[k], k)
	}
}
