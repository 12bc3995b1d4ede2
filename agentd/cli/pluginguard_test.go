package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func TestPooledServeRunsUnconfiguredPluginsInAHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	srv := pluginTenant(t, alpha, "") // plugins.isolation not set
	s, c := w.serveDialed()
	sid, _ := c.create("")
	c.turn(sid, "probe")
	p := probeOf(t, srv)
	require.NotEqual(t, s.pid, p.Pid, "an unconfigured profile's plugin ran in the pooled server")
	require.Equal(t, alpha.marker, p.Marker, "positive control: the probe ran, with the profile's environment")
	s.stop()
	log, err := os.ReadFile(filepath.Join(alpha.home, "logs", "agent.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "plugins: host mode")
	require.Contains(t, string(log), "pooled server runs third-party plugins in a host by default", "the log says why")
}

const crasherPlugin = `package crasher

import (
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "crash_now", Description: "ends its plugin host", Handler: func(args map[string]any) (string, error) {
		os.Exit(3)
		return "", nil
	}})
}
`

func TestASpentRestartBudgetIsAToolResultAndAnErrorEvent(t *testing.T) {
	t.Parallel()
	w, _, beta := alphaBetaWorld(t)
	installPlugin(t, "crasher", crasherPlugin, beta)
	srv := toolThenText(t, beta.key, "crashed", func(any) (string, any) { return "crash_now", nil })
	writeFile(t, filepath.Join(beta.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nplugins:\n  host:\n    launcher: \"\"\n",
		srv.BaseURL, beta.model))

	s, c := w.serveDialed()
	sid, _ := c.create("beta")
	// Three deaths spend the budget (3 in 10 minutes).
	for i := range 3 {
		require.Equal(t, "complete", c.turn(sid, fmt.Sprintf("crash %d", i))["status"])
		require.Contains(t, toolResults(srv)[i], "exit status 3", "positive control: the plugin ended its host")
	}
	require.Equal(t, "complete", c.turn(sid, "once more")["status"])
	results := toolResults(srv)
	require.Len(t, results, 4)
	last := results[3]
	for _, want := range []string{"plugin crasher", "profile beta", "died 3 times", "restart budget exhausted", "exit status 3"} {
		require.Contains(t, last, want)
	}
	require.NotContains(t, last, "unknown tool")

	// The tool stayed offered to the model.
	reqs := srv.RequestsOf(fakellm.KindMain)
	lastReq := reqs[len(reqs)-1]
	require.Contains(t, string(lastReq.RawBody), `"crash_now"`, "the plugin's tool vanished from the tool list")

	var errEvents []string
	for _, e := range c.events(sid) {
		if e["type"] == "error" {
			p, _ := e["payload"].(map[string]any)
			errEvents = append(errEvents, fmt.Sprint(p["message"]))
		}
	}
	require.Len(t, errEvents, 1, "one error event, for the call the budget refused")
	for _, want := range []string{"plugin crasher", "profile beta", "died 3 times"} {
		require.True(t, strings.Contains(errEvents[0], want), "error event %q does not name %q", errEvents[0], want)
	}
	s.stop()
}

// The test plugins keep their records in the home's logs folder, not at
// its top level: under Landlock (no bubblewrap) the launch profile's
// sandbox adds no entry to its home's top level (docs/sandbox.md).
const spinnerPlugin = `package spinner

import (
	"os"
	"strconv"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "spin", Description: "never answers", Handler: func(args map[string]any) (string, error) {
		_ = os.WriteFile("logs/spinning-"+strconv.Itoa(os.Getpid()), []byte(os.Getenv("TC_LAUNCHED")), 0o600)
		n := 0
		for {
			n++
		}
		return strconv.Itoa(n), nil
	}})
}
`

func TestOperatorScopeLauncherStringAndCallTimeoutReachTheHost(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	installPlugin(t, "spinner", spinnerPlugin, alpha)
	srv := toolThenText(t, alpha.key, "done", func(any) (string, any) { return "spin", nil })
	writeFile(t, filepath.Join(alpha.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nplugins:\n  host:\n    call_timeout: 10m\n",
		srv.BaseURL, alpha.model))
	// The operator's scope: a launcher as one string (env runs the rest
	// of the command line), and a call deadline that wins over the
	// profile's.
	w.writeManaged("plugins:\n  isolation: host\n  host:\n    launcher: \"env 'TC_LAUNCHED=by env'\"\n    call_timeout: 2s\n")

	s, c := w.serveDialed()
	sid, _ := c.create("")
	require.Equal(t, "complete", c.turn(sid, "spin")["status"])
	results := toolResults(srv)
	require.Len(t, results, 1)
	for _, want := range []string{"spin", "plugin spinner", "profile", "plugins.host.call_timeout (2s)", "killed"} {
		require.Contains(t, results[0], want)
	}
	spun, _ := filepath.Glob(filepath.Join(alpha.home, "logs", "spinning-*"))
	require.Len(t, spun, 1, "positive control: the plugin ran")
	launched, err := os.ReadFile(spun[0])
	require.NoError(t, err)
	require.Equal(t, "by env", string(launched), "the host did not run under the operator's launcher string")
	pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(spun[0]), "spinning-"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !procgroup.Alive(pid) }, 10*time.Second, 10*time.Millisecond,
		"the spinning host %d outlived its deadline", pid)
	s.stop()
}

const goPanickerPlugin = `package gopanicker

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "go_panic", Description: "panics on a goroutine", Handler: func(args map[string]any) (string, error) {
		go func() { panic("x") }()
		return "started", nil
	}})
}
`

const busyPlugin = `package busy

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterTool(plugin.Tool{Name: "busy_spin", Description: "never answers", Handler: func(args map[string]any) (string, error) {
		n := 0
		for {
			n++
		}
		return "", nil
	}})
}
`

func TestInProcessPluginsCannotEndOrWedgeThePooledServer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	alpha := w.addTenant("alpha", true)
	for name, src := range map[string]string{"gopanicker": goPanickerPlugin, "busy": busyPlugin} {
		installPlugin(t, name, src, alpha)
	}
	srv := toolThenText(t, alpha.key, "done", func(prompt any) (string, any) {
		tool, _ := prompt.(string)
		return tool, nil
	})
	writeFile(t, filepath.Join(alpha.home, "config.yaml"), fmt.Sprintf(
		"model:\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\n", srv.BaseURL, alpha.model))
	w.writeManaged("plugins:\n  isolation: in_process\n  host:\n    call_timeout: 2s\n")

	s, c := w.serveDialed()
	sid, _ := c.create("")
	// A plugin that starts goroutines is refused in-process: its tool is
	// never offered, so its panic can never end the server.
	require.Equal(t, "complete", c.turn(sid, "go_panic")["status"])
	require.Contains(t, toolResults(srv)[0], `unknown tool "go_panic"`)
	reqs := srv.RequestsOf(fakellm.KindMain)
	require.NotContains(t, string(reqs[0].RawBody), `"name":"go_panic"`)
	require.Contains(t, string(reqs[0].RawBody), `"name":"busy_spin"`, "positive control: the other plugin loaded in-process")

	// A busy loop answers at its deadline, and the session goes on.
	require.Equal(t, "complete", c.turn(sid, "busy_spin")["status"])
	require.Contains(t, toolResults(srv)[1], "cannot be stopped in-process")
	require.Equal(t, "complete", c.turn(sid, "go_panic")["status"], "the session was wedged")
	log, err := os.ReadFile(filepath.Join(alpha.home, "logs", "agent.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "starts goroutines, which only a plugin host can run safely")
	// The server still stops in time with the loop running.
	s.stop()
}

const hookPlugin = `package hookrec

import (
	"context"
	"fmt"
	"os"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func record(event string) plugin.Hook {
	return func(c context.Context, p map[string]any) error {
		f, err := os.OpenFile("logs/hooks.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "%s %v %v %s %d\n", event, p["tool_name"], p["session_id"], plugin.SessionID(c), os.Getpid())
		return err
	}
}

func Register(ctx plugin.Context) error {
	for _, ev := range []string{"pre_tool_call", "post_tool_call", "pre_llm_call", "post_llm_call"} {
		if err := ctx.RegisterHook(ev, record(ev)); err != nil {
			return err
		}
	}
	return ctx.RegisterConfigSchema(func() (map[string]any, error) {
		if err := os.WriteFile("logs/schema-ran", []byte(fmt.Sprint(os.Getpid())), 0o600); err != nil {
			return nil, err
		}
		return map[string]any{"level": map[string]any{"type": "string"}}, nil
	})
}
`

func TestToolAndModelCallHooksRunInEachProfilesHostAsTheCallingSession(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	installPlugin(t, "hookrec", hookPlugin, alpha, beta)
	s, ca, cb, sa, sb := w.serveAlphaBeta()
	require.Equal(t, "complete", ca.turn(sa, "probe")["status"])
	require.Equal(t, "complete", cb.turn(sb, "probe")["status"])
	s.stop()

	for _, c := range []struct {
		tn       *tenant
		own      string
		neighbor string
	}{{alpha, sa, sb}, {beta, sb, sa}} {
		b, err := os.ReadFile(filepath.Join(c.tn.home, "logs", "hooks.log"))
		require.NoError(t, err, "%s's hooks never ran", c.tn.name)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		want := []string{"pre_llm_call", "post_llm_call", "pre_tool_call", "post_tool_call", "pre_llm_call", "post_llm_call"}
		require.Len(t, lines, len(want), "%s: %q", c.tn.name, b)
		for i, ev := range want {
			f := strings.Fields(lines[i])
			require.Len(t, f, 5, lines[i])
			tool := "<nil>"
			if strings.HasSuffix(ev, "_tool_call") {
				tool = "terminal"
			}
			require.Equal(t, []string{ev, tool, c.own, c.own}, f[:4], "%s's hook saw another call or session", c.tn.name)
			require.NotEqual(t, strconv.Itoa(s.pid), f[4], "the hook ran in the server")
		}
		require.NotContains(t, string(b), c.neighbor)

		// The config schema ran in the host when the plugin loaded.
		pid, err := os.ReadFile(filepath.Join(c.tn.home, "logs", "schema-ran"))
		require.NoError(t, err, "%s's config schema never ran", c.tn.name)
		require.NotEqual(t, strconv.Itoa(s.pid), string(pid), "the config schema ran in the server")
		log, err := os.ReadFile(filepath.Join(c.tn.home, "logs", "agent.log"))
		require.NoError(t, err)
		require.Contains(t, string(log), "plugin config schema")
	}
}

const memoryPlugin = `package memrec

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tenantcanary/tenantcanary/plugin"
)

type mem struct{}

func (mem) Name() string                         { return "memrec" }
func (mem) IsAvailable(ctx context.Context) bool { return true }

func logLine(format string, args ...any) error {
	f, err := os.OpenFile("logs/memory.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, format+"\n", args...)
	return err
}

func (mem) Initialize(ctx context.Context, sessionID string) error {
	return logLine("init %s %s", sessionID, plugin.SessionID(ctx))
}

func (mem) Prefetch(ctx context.Context, query string) (string, error) {
	b, err := os.ReadFile("logs/memory.last")
	if err != nil {
		return "", nil
	}
	return "remembered " + strings.TrimSpace(string(b)), logLine("prefetch %s %s", plugin.SessionID(ctx), query)
}

func (mem) Shutdown(ctx context.Context, sessionID string) error {
	return logLine("shutdown %s %s", sessionID, plugin.SessionID(ctx))
}

func (mem) SyncTurn(ctx context.Context, user, assistant string) error {
	if err := os.WriteFile("logs/memory.last", []byte(user), 0o600); err != nil {
		return err
	}
	return logLine("sync %s %s|%s", plugin.SessionID(ctx), user, assistant)
}

func Register(ctx plugin.Context) error { return ctx.RegisterMemoryProvider(mem{}) }
`

func TestMemoryProvidersRunInEachProfilesHostAsTheSession(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	installPlugin(t, "memrec", memoryPlugin, alpha, beta)
	s, ca, cb, sa, sb := w.serveAlphaBeta()
	turns := map[*tenant][]string{alpha: {"first-" + alpha.marker, "second-" + alpha.marker}, beta: {"first-" + beta.marker, "second-" + beta.marker}}
	for i := range 2 {
		require.Equal(t, "complete", ca.turn(sa, turns[alpha][i])["status"])
		require.Equal(t, "complete", cb.turn(sb, turns[beta][i])["status"])
	}
	s.stop()

	for _, c := range []struct {
		tn            *tenant
		own, neighbor string
		other         *tenant
	}{{alpha, sa, sb, beta}, {beta, sb, sa, alpha}} {
		b, err := os.ReadFile(filepath.Join(c.tn.home, "logs", "memory.log"))
		require.NoError(t, err, "%s's memory provider never ran", c.tn.name)
		log := string(b)
		require.Equal(t, 1, strings.Count(log, "init "), "initialised once per session: %q", log)
		require.Contains(t, log, fmt.Sprintf("init %s %s\n", c.own, c.own))
		require.Contains(t, log, fmt.Sprintf("sync %s %s|", c.own, turns[c.tn][0]))
		require.Contains(t, log, fmt.Sprintf("prefetch %s %s\n", c.own, turns[c.tn][1]))
		require.NotContains(t, log, c.neighbor)
		require.NotContains(t, log, c.other.marker)

		// The second turn's system prompt carries what the first synced,
		// and only the tenant's own.
		reqs := c.tn.srv.RequestsOf(fakellm.KindMain)
		last := string(reqs[len(reqs)-1].RawBody)
		require.Contains(t, last, "remembered "+turns[c.tn][0])
		require.NotContains(t, last, c.other.marker)
	}
}
