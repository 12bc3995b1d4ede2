package harness

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func TestDialectParsesEveryFormOfMethod(t *testing.T) {
	t.Parallel()
	tg, err := loadStdioTarget(t, `
dialect:
  methods:
    session.create: open
    prompt.submit: {method: say, params: {sid: "{session_id}", text: "{text}", n: 3}}
    profiles.create: {hook: [mk, "{name}"], hook_env: {WHO: "{tenant}"}}
    cron.create: {unsupported: no cron}
    config.set.cwd: {method: cwd.set, by_profile: {hook: [setcwd, "{value}"]}}
`)
	require.NoError(t, err)
	m := tg.Dialect.Methods
	cwd := m["config.set.cwd"]
	assert.Equal(t, "cwd.set", cwd.forCall(map[string]any{"session_id": "s1", "value": "/w"}).Method)
	assert.Equal(t, []string{"setcwd", "{value}"}, cwd.forCall(map[string]any{"profile": "alpha", "value": "/w"}).Hook)
	assert.Equal(t, "say", m["prompt.submit"].forCall(map[string]any{"profile": "alpha"}).Method, "no by_profile: the one mapping")
	assert.Equal(t, "open", m["session.create"].Method)
	assert.Equal(t, "say", m["prompt.submit"].Method)
	assert.Equal(t, []string{"mk", "{name}"}, m["profiles.create"].Hook)
	assert.Equal(t, "no cron", m["cron.create"].Unsupported)
	d := tg.Dialect.WithDefaults()
	assert.Equal(t, "message.complete", d.Events.TurnEnd)
	assert.Equal(t, UnknownProfileError, d.Behaviours.UnknownProfile)
	assert.Equal(t, ProbeTool{Name: "terminal", Arg: "command"}, d.ProbeTool)
}

func TestDialectNamesEveryProblem(t *testing.T) {
	t.Parallel()
	requireLoadFails(t, `
dialect:
  config: {model: {api_key: "{provder_key}"}}
  methods:
    session.open: open
    prompt.submit: {method: say, unsupported: why}
    cron.list: {hook_env: {A: b}}
    config.set.cwd: {method: m, by_profile: {method: a, hook: [b]}}
  behaviours: {unknown_profile: ignore}
  probe_tool: {name: exec}
  health: {path: health}
`,
		`unknown operation "session.open"`, "prompt.submit: give exactly one of", "cron.list: give exactly one of",
		"hook_env without hook", "config.set.cwd.by_profile: give exactly one of", "{provder_key}", "unknown_profile \"ignore\"", "probe_tool: give both", "health.path",
	)
	_, err := LoadTarget(writeFile(t, "name: x\nstdio: [a]\ndialect: {method: {}}\n"))
	assert.ErrorContains(t, err, "field method not found")
}

func TestMapResultMovesFields(t *testing.T) {
	t.Parallel()
	out, err := mapResult([]byte(`{"sid":"s1","meta":{"model":"m","who":""}}`),
		MethodSpec{Result: map[string]string{"session_id": "sid", "info.model": "meta.model", "info.gone": "nope"}})
	require.NoError(t, err)
	var s SessionInfo
	require.NoError(t, json.Unmarshal(out, &s))
	assert.Equal(t, "s1", s.SessionID)
	assert.Equal(t, "m", s.Info.Model)
	_, err = mapResult([]byte(`[1]`), MethodSpec{Result: map[string]string{"a": "b"}})
	assert.ErrorContains(t, err, "not a JSON object")
	assert.JSONEq(t, `{"output":"made it"}`, string(hookReply("creating\nmade it\n")))
	assert.JSONEq(t, `{"id":"j1"}`, string(hookReply("log line\n{\"id\":\"j1\"}\n")))
}

func TestReadyAddrForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ re, line, want string }{
		{`HERMES_BACKEND_READY port=(\d+)`, "HERMES_BACKEND_READY port=4321", "127.0.0.1:4321"},
		{DefaultReadyLine, "backend listening on 127.0.0.2:99", "127.0.0.2:99"},
		{`port (?P<port>\d+) host (?P<host>\S+)`, "port 7 host ::1", "[::1]:7"},
		{`on (\S+):(\d+)`, "on 0.0.0.0:8", "127.0.0.1:8"},
	} {
		tg := Target{ReadyLine: c.re}
		tg.readyRE = regexp.MustCompile(c.re)
		assert.Equal(t, c.want, tg.ReadyAddr(tg.ReadyRE().FindStringSubmatch(c.line), "127.0.0.1"), c.re)
	}
}

// TestHermesExampleLoads keeps examples/targets/hermes/target.yaml valid
// and checks the parts of it docs/real-targets.md promises.
func TestHermesExampleLoads(t *testing.T) {
	t.Parallel()
	tg := loadExample(t, "hermes")
	// Its probe plugin is Hermes's format: a directory plugin with its
	// manifest and register(ctx), from the folder beside the file.
	pp := tg.ProbePlugin
	require.NotNil(t, pp)
	require.NoError(t, pp.LoadFiles())
	assert.Contains(t, pp.Files, "plugin.yaml")
	assert.Contains(t, pp.Files["__init__.py"], "def register(ctx)")
	assert.Contains(t, pp.Files["__init__.py"], `"`+pp.Tools.Probe+`"`)
	assert.Contains(t, pp.Files["__init__.py"], `"`+pp.Tools.Hostile+`"`)
	assert.Subset(t, tg.ServerFiles, []string{"logs/", "auth.lock", "state.db*", "provider_models_cache.json"})
	d := tg.Dialect.WithDefaults()
	assert.Equal(t, UnknownProfileFallback, d.Behaviours.UnknownProfile)
	assert.Equal(t, "tool.complete", d.Events.ToolArgs)
	assert.Equal(t, "session.cwd.set", d.Methods["config.set.cwd"].Method)
	assert.NotEmpty(t, d.Methods["profiles.create"].Hook)
	assert.Equal(t, "127.0.0.1:4711", tg.ReadyAddr(tg.ReadyRE().FindStringSubmatch("HERMES_BACKEND_READY port=4711"), "127.0.0.1"))
	assert.Equal(t, "HERMES_HOME", tg.Layout.HomeVar)
}

func TestWaitHealthySendsTheTokenAsDeclared(t *testing.T) {
	t.Parallel()
	const token = "tok-123"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := r.URL.Path == "/h" && (r.Header.Get("Authorization") == "Bearer "+token ||
			r.URL.Query().Get("token") == token || r.Header.Get("X-Tok") == token || r.URL.Query().Get("open") == "1")
		if !ok {
			http.Error(w, "no", http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	for _, auth := range []string{"bearer", "query", "X-Tok"} {
		tg := Target{Dialect: Dialect{Health: &Health{Path: "/h", Auth: auth}}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		assert.NoError(t, tg.WaitHealthy(ctx, srv.URL, token), auth)
		cancel()
	}
	tg := Target{Dialect: Dialect{Health: &Health{Path: "/h", Auth: "none"}}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := tg.WaitHealthy(ctx, srv.URL, token)
	assert.ErrorContains(t, err, "HTTP 401")
	assert.NoError(t, (&Target{}).WaitHealthy(ctx, srv.URL, token), "no health check")
}

// TestShellToolRenamesTerminalCalls: a scenario's own responder (the
// hostile tenants' attacks) calls terminal{command}; a dialect whose shell
// tool is exec{cmd} gets the same command as exec{cmd}, and other calls and
// texts pass unchanged. agentd's dialect keeps the responder as it is.
func TestShellToolRenamesTerminalCalls(t *testing.T) {
	t.Parallel()
	resp := func(*tenants.Tenant) fakellm.Responder {
		return func(r fakellm.Record) fakellm.Response {
			if r.EndsWithToolResult() {
				return fakellm.Text("done")
			}
			return fakellm.ToolCalls(
				fakellm.Call{Name: "terminal", Args: map[string]any{"command": "cat /etc/hostname"}},
				fakellm.Call{Name: "terminal", Args: map[string]string{"command": "env"}},
				fakellm.Call{Name: "plugin_probe", Args: map[string]any{"command": "x"}})
		}
	}
	d := Dialect{ProbeTool: ProbeTool{Name: "exec", Arg: "cmd"}}
	got := d.shellTool(resp)(nil)(fakellm.Record{})
	require.Len(t, got.Calls, 3)
	assert.Equal(t, fakellm.Call{Name: "exec", Args: map[string]any{"cmd": "cat /etc/hostname"}}, got.Calls[0])
	assert.Equal(t, fakellm.Call{Name: "exec", Args: map[string]any{"cmd": "env"}}, got.Calls[1])
	assert.Equal(t, "plugin_probe", got.Calls[2].Name)
	var agentd Dialect
	kept := agentd.shellTool(resp)(nil)(fakellm.Record{})
	assert.Equal(t, "terminal", kept.Calls[0].Name)
}

// Copies of a target built in Go, its health check without auth, are
// validated at once (every scenario's NewSandbox): each copy gets auth
// none, and the block they share is left as it was.
func TestValidateLeavesTheSharedHealthBlockAlone(t *testing.T) {
	t.Parallel()
	base := Target{Name: "x", Stdio: []string{"x"}, Dialect: Dialect{Health: &Health{Path: "/healthz"}}}
	start := make(chan struct{})
	auths := make(chan string, 8)
	for range 8 {
		go func() {
			<-start
			tg := base
			_ = tg.Validate()
			auths <- tg.Dialect.Health.Auth
		}()
	}
	close(start)
	for range 8 {
		assert.Equal(t, "none", <-auths)
	}
	assert.Empty(t, base.Dialect.Health.Auth, "the shared block is not written")
}

// TestWireParamsUniqueAndAgent: {unique} is a value of each call's own;
// {agent} is the profile a call names, else the dialect's launch agent
// (default main).
func TestWireParamsUniqueAndAgent(t *testing.T) {
	t.Parallel()
	m := MethodSpec{Method: "chat.send", Params: map[string]any{"key": "agent:{agent}:{unique}", "idem": "{unique}"}}
	first := m.wireParams(map[string]any{}, "").(map[string]any)
	second := m.wireParams(map[string]any{}, "").(map[string]any)
	require.Regexp(t, `^agent:main:[0-9a-f]{16}$`, first["key"])
	require.NotEqual(t, first["idem"], second["idem"], "every call its own value")
	named := m.wireParams(map[string]any{"profile": "alpha"}, "boss").(map[string]any)
	require.Regexp(t, `^agent:alpha:`, named["key"])
	launch := m.wireParams(map[string]any{}, "boss").(map[string]any)
	require.Regexp(t, `^agent:boss:`, launch["key"])
}
