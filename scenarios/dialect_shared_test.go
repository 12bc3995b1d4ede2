package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// sharedTarget is the dialect server in its shared-config mode, from its
// target file alone (harness/testdata/dialect-shared-target.yaml), with
// env added to the file's and each edit (old, new) applied to it.
func sharedTarget(t *testing.T, env map[string]string, edits ...string) harness.Target {
	t.Helper()
	dialectTarget(t) // builds the binary
	tg, err := dialecttest.TargetOf(dialecttest.SharedFile, t.TempDir(), dialectBin, edits...)
	require.NoError(t, err)
	require.NotNil(t, tg.SharedConfig)
	for k, v := range env {
		tg.Env[k] = v
	}
	return tg
}

// sharedProbeSpec runs a turn per tenant on the shared-config server and
// checks, from inside, what only that mode makes true: the operator file
// holds one agents and one providers section per tenant, each tenant's
// turns are stored in its state folder apart from its home, and an
// unknown profile's session is the launch tenant's.
func sharedProbeSpec() Spec {
	s := dialectProbeSpec()
	s.ID, s.Purpose = "shared-probe", "the dialect server's turns from one shared operator config"
	s.Phases = []Phase{s.Phases[0], {Name: "shared", Run: func(e *Env) {
		data, err := os.ReadFile(e.Box.SharedConfigPath())
		require.NoError(e.T, err)
		var doc struct {
			Agents    map[string]map[string]any
			Providers map[string]map[string]any
		}
		require.NoError(e.T, yaml.Unmarshal(data, &doc))
		layout := e.Box.Set.Layout
		for _, t := range e.Tenants {
			if a := doc.Agents[t.Profile()]; a["model"] != t.Model() || a["default"] != t.Launch {
				e.T.Errorf("agents.%s of the shared config: %v", t.Profile(), a)
			}
			if p := doc.Providers["t-"+t.Name]; p["api_key"] != t.ProviderKey() {
				e.T.Errorf("providers.t-%s of the shared config: %v", t.Name, p)
			}
			if _, err := os.Stat(t.StateDB(layout)); err != nil {
				e.T.Errorf("%s's turns are not stored in its state folder: %v", t.Name, err)
			}
			if _, err := os.Stat(filepath.Join(t.Home, "state.db")); err == nil {
				e.T.Errorf("%s's home holds a state.db: the server read its home, not the shared config", t.Name)
			}
		}
		e.UnknownProfile(e.Conns[e.Launch().Name], "nosuchprofile")
	}}}
	return s
}

func TestDialectSharedConfigPassesClean(t *testing.T) {
	t.Parallel()
	rep, out := runDialect(t, sharedProbeSpec(), sharedTarget(t, nil))
	requireClean(t, rep, out)
	held := map[string]int{}
	for _, ph := range rep.Phases {
		for _, c := range ph.Controls {
			held[c.Name]++
		}
	}
	// The state database's control looked in the state folders, and the
	// env marker reached the tools through the shared config.
	// Two tenants, checked after each phase.
	require.Equal(t, 2*len(rep.Phases), held["own session text in own state database"], "%v", held)
	require.Equal(t, 2*len(rep.Phases), held["own env marker in every own snapshot"], "%v", held)
}

// TestDialectSharedConfigCopiesAreTheOperators: a server that keeps a copy
// of the shared config at every reload holds every tenant's secrets in
// them: declared (shared_config.copies) they are the operator's files, and
// the run is clean; the control: undeclared, they are shared places
// holding tenants' keys.
func TestDialectSharedConfigCopiesAreTheOperators(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DIALECT_SHARED_BACKUP": "1"}
	declared := sharedTarget(t, env, `  path: "{root}/operator/dialect.yaml"`, `  path: "{root}/operator/dialect.yaml"
  copies: ["{root}/operator/dialect.yaml.bak.*"]`)
	rep, out := runDialect(t, sharedProbeSpec(), declared)
	requireClean(t, rep, out)

	rep, out = runDialect(t, sharedProbeSpec(), sharedTarget(t, env))
	require.Equal(t, Leak, rep.Result, "%s", strings.Join(out.Log, "\n"))
	places := findingsOf(*rep, invariants.SharedPlace)
	require.NotEmpty(t, places)
	for _, f := range places {
		require.Contains(t, f.Where.Path, "dialect.yaml.bak.", "%s", f)
	}
}

// TestDialectSharedConfigReady: a server that takes 1.5 s to reload its
// shared config, and says so on its log, passes profile-lifecycle (a
// profile added and removed while it runs) once the target file says how
// it shows it took a change (shared_config.ready.log_line); the control:
// without it, the harness goes on before the reload and the run fails.
func TestDialectSharedConfigReady(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DIALECT_SHARED_RELOAD_DELAY": "1500ms"}
	ready := sharedTarget(t, env, `  path: "{root}/operator/dialect.yaml"`, `  path: "{root}/operator/dialect.yaml"
  ready: {log_line: "reloaded shared config"}`)
	runCatalogDialect(t, "profile-lifecycle", ready, Pass)

	spec, err := Default().Get("profile-lifecycle")
	require.NoError(t, err)
	rep, _ := runDialect(t, spec, sharedTarget(t, env))
	require.NotEqual(t, Pass, rep.Result, "the control: without ready the new profile is used before the server took it")
}

// TestDialectSharedConfigToolEnvNone: a file declaring that the tools get
// no per-tenant environment has the env-marker control skipped with that
// reason, never passed, and the rest of the checks made.
func TestDialectSharedConfigToolEnvNone(t *testing.T) {
	t.Parallel()
	rep, out := runDialect(t, sharedProbeSpec(), sharedTarget(t, nil, "tool_env: shared_config", "tool_env: none"))
	requireClean(t, rep, out)
	for _, ph := range rep.Phases {
		for _, c := range ph.Controls {
			require.NotEqual(t, "own env marker in every own snapshot", c.Name)
		}
	}
	reasons := ""
	for _, s := range rep.Skipped {
		reasons += s.Invariant + ": " + s.Reason + "\n"
	}
	require.Contains(t, reasons, string(PositiveControl)+": own env marker in every own snapshot: the target gives its tools no per-tenant environment (tool_env: none)")
}

// TestDialectSharedConfigCatalog runs catalog scenarios through the file
// alone: turns at once, a profile made and deleted while the server runs
// (its sections written into the shared config and taken out, the server
// reloading it), and the authorization probes. (hostile-tools finds
// leaks, rightly: the server runs its tools unsandboxed.)
func TestDialectSharedConfigCatalog(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"concurrent-turns", "profile-lifecycle", "tenant-authz"} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			runCatalogDialect(t, id, sharedTarget(t, nil), Pass)
		})
	}
}

// TestDialectSharedConfigLeaksAreFound: the leak switches hold in the
// shared-config mode. DIALECT_LEAK=1 puts the default agent's env in a
// named agent's reply.done (an RPC finding); DIALECT_LEAK=launch-env gives
// a named agent the default agent's provider key (a request finding on
// its provider); DIALECT_LEAK=config-snapshot
// stores the whole operator config in every agent's sessions database,
// found in the state folder as that tenant's place (a file finding).
func TestDialectSharedConfigLeaksAreFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		leak string
		inv  invariants.Invariant
	}{{"1", invariants.RPC}, {"launch-env", invariants.Request}, {"config-snapshot", invariants.File}} {
		t.Run(c.leak, func(t *testing.T) {
			t.Parallel()
			tg := sharedTarget(t, map[string]string{"DIALECT_LEAK": c.leak})
			spec, err := Default().Get("concurrent-turns")
			require.NoError(t, err)
			rep, out := runDialect(t, spec, tg)
			requireLeak(t, rep, out, c.inv, "default", tenants.ProviderKey)
			if c.inv != invariants.File {
				return
			}
			for _, f := range rep.Findings() {
				if f.Invariant == invariants.File {
					require.Contains(t, f.Where.Path, string(filepath.Separator)+filepath.Join("state", "agents")+string(filepath.Separator), "found in a state folder: %+v", f)
					require.NotEqual(t, f.Owner, f.Tenant)
				}
			}
		})
	}
}
