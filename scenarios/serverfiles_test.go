package scenarios

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// serverFilesSpec has every tenant take a turn, each checked for its write
// scope: the dialect server (DIALECT_SERVER_LOG) logs every turn in its
// launch home's logs/server.log.
func serverFilesSpec() Spec {
	return serverFilesSpecExpecting(func(*Env, *tenants.Tenant) []string { return []string{"state.db*"} })
}

// serverFilesSpecExpecting is serverFilesSpec with the files a turn of a
// tenant may change (its write scope) given by expected.
func serverFilesSpecExpecting(expected func(*Env, *tenants.Tenant) []string) Spec {
	return Spec{
		ID:        "server-files",
		Purpose:   "turns that write the server's own log in the launch home",
		Backends:  []harness.Backend{harness.BackendServe},
		Snapshots: perTenant(1),
		Timeout:   2 * time.Minute,
		Phases: []Phase{
			{Name: "turns", Run: func(e *Env) {
				e.serveSessions(0)
				for _, t := range e.Tenants {
					e.ScopedWrite("a turn of "+t.Name, t, expected(e, t), func() {
						e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
					})
				}
			}},
		},
	}
}

// A target's server_files are the server's: a write there is no
// write_scope finding, and a tenant's secret there is a shared_place one.
func TestServerFilesAreTheServers(t *testing.T) {
	t.Parallel()
	declared := "files: true\nserver_files: [logs/]"
	for _, c := range []struct {
		name, log, edit string
		want            invariants.Invariant // "" for a pass
	}{
		{"declared", "1", declared, ""},
		{"undeclared", "1", "files: true", invariants.WriteScope},
		{"secret-in-declared", "keys", declared, invariants.SharedPlace},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := dialectTarget(t, "files: true", c.edit)
			tg.Env = map[string]string{"DIALECT_SERVER_LOG": c.log}
			rep, out := runDialect(t, serverFilesSpec(), tg)
			log := strings.Join(out.Log, "\n")
			if c.want == "" {
				require.Equal(t, Pass, rep.Result, "%s\n%s", rep.Reason, log)
				return
			}
			require.Equal(t, Leak, rep.Result, "%s\n%s", rep.Reason, log)
			var got []string
			for _, f := range rep.Findings() {
				got = append(got, fmt.Sprint(f))
				require.Equal(t, c.want, f.Invariant, "every finding is the one planted: %s", f)
				require.Equal(t, filepath.Join("logs", "server.log"), filepath.Join(filepath.Base(filepath.Dir(f.Where.Path)), filepath.Base(f.Where.Path)), "%s", f)
			}
			require.NotEmpty(t, got)
		})
	}
}

// A server file outside every home (in its state root, "{root}/..."), once
// declared, is the server's too: no write_scope finding for a write there;
// the control: undeclared, the same write is one.
func TestServerFilesInTheStateRoot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, edit string
		want       Result
	}{
		{"declared", "files: true\nserver_files: ['{root}/state/server.log']", Pass},
		{"undeclared", "files: true", Leak},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The shared-config server keeps its agents' state under
			// {root}/state (layout.state_root): its own log goes there too.
			tg := sharedTarget(t, map[string]string{"DIALECT_SERVER_LOG": "1", "DIALECT_SERVER_LOG_DIR": "{root}/state"}, "files: true", c.edit)
			// A turn writes its tenant's own state folder.
			spec := serverFilesSpecExpecting(func(_ *Env, tn *tenants.Tenant) []string { return []string{tn.State + "/*"} })
			rep, out := runDialect(t, spec, tg)
			require.Equal(t, c.want, rep.Result, "%s\n%s", rep.Reason, strings.Join(out.Log, "\n"))
			for _, f := range rep.Findings() {
				require.Equal(t, invariants.WriteScope, f.Invariant, "%s", f)
				require.Equal(t, "server.log", filepath.Base(f.Where.Path), "%s", f)
			}
		})
	}
}
