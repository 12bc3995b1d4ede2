package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// wherePlugin reports the pid it runs in and what it read at the path it
// is given (another profile's .env, in these tests).
const wherePlugin = `package where

import (
	"encoding/json"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(pctx plugin.Context) error {
	return pctx.RegisterTool(plugin.Tool{Name: "where_probe", Description: "where the plugin runs and what it reads",
		Handler: func(args map[string]any) (string, error) {
			path, _ := args["path"].(string)
			read := ""
			if b, err := os.ReadFile(path); err != nil {
				read = "refused: " + err.Error()
			} else {
				read = string(b)
			}
			out, err := json.Marshal(map[string]any{"pid": os.Getpid(), "read": read})
			return string(out), err
		}})
}
`

type whereResult struct {
	Pid  int    `json:"pid"`
	Read string `json:"read"`
}

// whereTenant gives tn the where plugin, with no plugins.isolation in any
// scope, and a provider whose every prompt calls it on path.
func whereTenant(t *testing.T, tn *tenant, path string) *fakellm.Server {
	t.Helper()
	installPlugin(t, "where", wherePlugin, tn)
	srv := toolThenText(t, tn.key, "where probed", func(any) (string, any) {
		return "where_probe", map[string]any{"path": path}
	})
	writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nterminal:\n  cwd: %s\n",
		srv.BaseURL, tn.model, tn.workdir))
	return srv
}

func whereOf(t *testing.T, srv *fakellm.Server) whereResult {
	t.Helper()
	results := toolResults(srv)
	require.NotEmpty(t, results, "the where probe never ran")
	var r whereResult
	last := results[len(results)-1]
	require.NoError(t, json.Unmarshal([]byte(last), &r), last)
	return r
}

// `agentd tui` serves session.create{profile: beta}: beta's plugins run
// in a host of beta's own, not in the tui's process, and cannot read the
// launch profile's .env, though no scope set plugins.isolation. With
// launch-mode-isolation the tui's launch mode picks in_process: the
// plugin runs in the tui and reads alpha's key (the positive control).
func TestTUIServingAnotherProfileIsolatesItsPlugins(t *testing.T) {
	t.Parallel()
	defendedAndSeeded(t, "launch-mode-isolation", func(t *testing.T, seeded bool, env []string) {
		w, alpha, beta := alphaBetaWorld(t)
		srv := whereTenant(t, beta, filepath.Join(alpha.home, ".env"))
		d := w.startTUI(env...)
		sid, info := d.create("beta")
		require.Equal(t, "beta", info["info"].(map[string]any)["profile_name"])
		require.Equal(t, "complete", d.turn(sid, "where do you run")["status"])
		r := whereOf(t, srv)
		if seeded {
			require.Equal(t, d.pid, r.Pid, "the seeded fault: beta's plugin ran in the tui's process")
			require.Contains(t, r.Read, alpha.key, "the seeded fault: beta's plugin read the launch profile's .env")
			d.close()
			return
		}
		require.NotEqual(t, d.pid, r.Pid, "beta's plugin ran in the tui's process")
		require.NotContains(t, r.Read, alpha.key, "beta's plugin read the launch profile's .env")
		require.NotEmpty(t, tenantProcs(beta), "positive control: beta's plugin host runs")
		log, err := os.ReadFile(filepath.Join(beta.home, "logs", "agent.log"))
		require.NoError(t, err)
		require.Contains(t, string(log), "plugins: host mode")
		d.close()
		require.Eventually(t, func() bool { return len(tenantProcs(beta)) == 0 }, 10*time.Second, 10*time.Millisecond,
			"beta's plugin host ended with the tui")
	})
}

// in_process stays the operator's explicit choice: pinned in the managed
// scope, beta's plugin runs in the tui's process.
func TestTUIRunsPluginsInProcessWhereTheOperatorSaysSo(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	srv := whereTenant(t, beta, filepath.Join(beta.home, ".env"))
	setIsolation(t, w, "in_process")
	d := w.startTUI()
	sid, _ := d.create("beta")
	require.Equal(t, "complete", d.turn(sid, "where do you run")["status"])
	r := whereOf(t, srv)
	require.Equal(t, d.pid, r.Pid, "the managed scope's in_process runs beta's plugin in the tui")
	require.Contains(t, r.Read, beta.key, "positive control: the probe read its own .env")
	require.NotContains(t, r.Read, alpha.key)
	d.close()
}

// runPid runs one agentd command to completion, with env added, and says
// its pid.
func (w *world) runPid(env []string, args ...string) (stdout, stderr string, code, pid int) {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	procgroup.Prepare(cmd)
	cmd.Env = w.env(env...)
	cmd.Dir = w.root
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	require.NoError(t, cmd.Start())
	pid = cmd.Process.Pid
	err := cmd.Wait()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "run agentd %v: %v", args, err)
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code, pid
}

// `agentd cron tick` fires beta's job (a plugin tool) in beta's plugin
// host, never in the tick's own process, and the job cannot read the
// launch profile's .env. With cron-tick-in-process (and with
// launch-mode-isolation) the tick loads beta's plugin in its own process
// and the job reads alpha's key (the positive controls).
func TestCronTickIsolatesEachProfilesPlugins(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"", "cron-tick-in-process", "launch-mode-isolation"} {
		name, env, seeded := "defended", []string(nil), fault != ""
		if seeded {
			name, env = fault, []string{"AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, alpha, beta := alphaBetaWorld(t)
			// Each profile's job reads the other's .env.
			srvB := whereTenant(t, beta, filepath.Join(alpha.home, ".env"))
			srvA := whereTenant(t, alpha, filepath.Join(beta.home, ".env"))
			for _, prof := range []string{"default", "beta"} {
				out, stderr, code := w.run("cron", "create", "--profile", prof, "--name", "where", "--prompt", "cron: where do you run", "--every", "1h")
				require.Equal(t, 0, code, stderr)
				_, stderr, code = w.run("cron", "trigger", "--profile", prof, strings.TrimSpace(out))
				require.Equal(t, 0, code, stderr)
			}
			out, stderr, code, pid := w.runPid(env, "cron", "tick")
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
			require.Contains(t, out, "beta\t", "beta's job fired")
			rb, ra := whereOf(t, srvB), whereOf(t, srvA)
			require.Empty(t, alpha.srv.Requests(), "no job reached a provider not its own")
			require.Empty(t, beta.srv.Requests(), "no job reached a provider not its own")
			if seeded {
				require.Equal(t, pid, rb.Pid, "the seeded fault: beta's job's plugin ran in the tick's process")
				require.Contains(t, rb.Read, alpha.key, "the seeded fault: beta's job read the launch profile's .env")
				return
			}
			for _, r := range []struct {
				tn, other *tenant
				res       whereResult
			}{{beta, alpha, rb}, {alpha, beta, ra}} {
				require.NotEqual(t, pid, r.res.Pid, "%s's job's plugin ran in the tick's process", r.tn.name)
				require.NotContains(t, r.res.Read, r.other.key, "%s's job read %s's .env", r.tn.name, r.other.name)
				log, err := os.ReadFile(filepath.Join(r.tn.home, "logs", "agent.log"))
				require.NoError(t, err)
				require.Contains(t, string(log), "plugins: host mode", r.tn.name)
				require.Eventually(t, func() bool { return len(tenantProcs(r.tn)) == 0 }, 10*time.Second, 10*time.Millisecond,
					"%s's plugin host ended with the tick", r.tn.name)
			}
		})
	}
}
