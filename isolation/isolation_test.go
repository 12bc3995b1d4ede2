package isolation_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/isolation"
)

func cfg(isolationMode any, launcher any) map[string]any {
	p := map[string]any{}
	if isolationMode != nil {
		p["isolation"] = isolationMode
	}
	if launcher != nil {
		p["host"] = map[string]any{"launcher": launcher}
	}
	return map[string]any{"plugins": p}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	s := isolation.Resolve(nil, nil)
	require.Equal(t, isolation.InProcess, s.Mode, "the default is in-process")
	require.Empty(t, s.Warnings)

	s = isolation.Resolve(cfg("Host", nil), nil)
	require.Equal(t, isolation.Host, s.Mode)
	require.False(t, s.Pinned)

	s = isolation.Resolve(cfg("in-process", nil), nil)
	require.Equal(t, isolation.InProcess, s.Mode, "a dash is read as an underscore")

	s = isolation.Resolve(cfg("sandboxed", nil), nil)
	require.Equal(t, isolation.InProcess, s.Mode, "an unknown value means in-process")
	require.Len(t, s.Warnings, 1)
	require.Contains(t, s.Warnings[0], `"sandboxed"`)

	// The operator's pin wins over the profile's own in_process.
	s = isolation.Resolve(cfg("in_process", "profile-runner"), cfg("host", nil))
	require.Equal(t, isolation.Host, s.Mode)
	require.True(t, s.Pinned)
	require.Equal(t, []string{"profile-runner"}, s.Launcher)

	s = isolation.Resolve(cfg(nil, "bwrap --die-with-parent"), cfg(nil, []any{"runner", "-x"}))
	require.Equal(t, []string{"runner", "-x"}, s.Launcher, "the managed launcher wins")
	s = isolation.Resolve(cfg(nil, "bwrap --die-with-parent"), nil)
	require.Equal(t, []string{"bwrap", "--die-with-parent"}, s.Launcher)
	s = isolation.Resolve(cfg(nil, "bwrap --setenv X 'a b' \"c \\\" d\""), nil)
	require.Equal(t, []string{"bwrap", "--setenv", "X", "a b", `c " d`}, s.Launcher, "a string splits with shell quoting")
	s = isolation.Resolve(cfg(nil, 7), nil)
	require.ErrorIs(t, s.Err(), isolation.ErrBadSettings)
	require.ErrorContains(t, s.Err(), "plugins.host.launcher in the profile config")
	s = isolation.Resolve(cfg(nil, "runner 'open"), nil)
	require.ErrorContains(t, s.Err(), "never closed")
}

func TestModeSourceAndPooledDefault(t *testing.T) {
	t.Parallel()
	s := isolation.Resolve(nil, nil)
	require.False(t, s.Set)
	require.Equal(t, isolation.InProcess, s.Mode)
	p := s.ForPooled()
	require.Equal(t, isolation.Host, p.Mode, "pooled serving defaults to host")
	require.Contains(t, p.Why, "pooled")

	s = isolation.Resolve(cfg("in_process", nil), nil)
	require.True(t, s.Set)
	require.Equal(t, isolation.InProcess, s.ForPooled().Mode, "an explicit in_process stays")
	require.Contains(t, s.Why, "profile config")

	s = isolation.Resolve(cfg("in_process", nil), cfg("host", nil))
	require.Equal(t, isolation.Host, s.ForPooled().Mode)
	require.Contains(t, s.Why, "pinned")

	s = isolation.Resolve(cfg("sandboxed", nil), nil)
	require.False(t, s.Set, "an unknown mode is not a choice")
	require.Equal(t, isolation.Host, s.ForPooled().Mode)
}

func TestSplitArgs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"":                          nil,
		"  a\tb  c ":                {"a", "b", "c"},
		`a 'b c' d`:                 {"a", "b c", "d"},
		`a"b c"d`:                   {"ab cd"},
		`"a \" \$ \x"`:              {`a " $ \x`},
		`'it''s'`:                   {"its"},
		`a\ b`:                      {"a b"},
		`''`:                        {""},
		"bwrap --bind \"$HOME\" /h": {"bwrap", "--bind", "$HOME", "/h"},
	} {
		got, err := isolation.SplitArgs(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
	for _, bad := range []string{`'a`, `"a`, `a\`} {
		_, err := isolation.SplitArgs(bad)
		require.Error(t, err, "%q", bad)
		require.ErrorContains(t, err, bad)
	}
}

func TestHostLimits(t *testing.T) {
	t.Parallel()
	s := isolation.Resolve(nil, nil)
	require.NoError(t, s.Err())
	require.Equal(t, isolation.DefaultHostLimits(), s.Limits)
	require.Equal(t, 30*time.Second, s.Limits.CallTimeout)

	host := func(kv map[string]any) map[string]any {
		return map[string]any{"plugins": map[string]any{"host": kv}}
	}
	s = isolation.Resolve(host(map[string]any{"call_timeout": "2s", "memory_limit": "512MiB", "cpu_limit": "1m",
		"file_size_limit": "off", "open_files_limit": 64, "processes_limit": "100"}), nil)
	require.NoError(t, s.Err())
	require.Equal(t, isolation.HostLimits{CallTimeout: 2 * time.Second, Memory: 512 << 20, CPU: time.Minute,
		OpenFiles: 64, Processes: 100}, s.Limits)

	s = isolation.Resolve(host(map[string]any{"call_timeout": "2s"}), host(map[string]any{"call_timeout": "5s", "memory_limit": "1G"}))
	require.Equal(t, 5*time.Second, s.Limits.CallTimeout, "the operator's value wins")
	require.Equal(t, int64(1<<30), s.Limits.Memory)

	for key, bad := range map[string]any{"call_timeout": "soon", "memory_limit": "lots", "cpu_limit": []any{1}, "open_files_limit": "-1"} {
		s = isolation.Resolve(host(map[string]any{key: bad}), nil)
		require.ErrorIs(t, s.Err(), isolation.ErrBadSettings, key)
		require.ErrorContains(t, s.Err(), "plugins.host."+key+" in the profile config", key)
	}
	s = isolation.Resolve(host(map[string]any{"call_timeout": "off"}), nil)
	require.ErrorContains(t, s.Err(), "call_timeout", "a call always has a deadline")
}

func TestInProcessHazardsFindGoroutines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.go"), []byte(`package p

import (
	"time"
)

func Register() {
	go func() { panic("x") }()
	time.AfterFunc(time.Second, func() {})
}
`), 0o644))
	got, err := isolation.InProcessHazards(dir)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Contains(t, got[0], "plugin.go:8: go statement")
	require.Contains(t, got[1], "plugin.go:9: time.AfterFunc")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.go"), []byte("package p\n\nfunc Register() {}\n"), 0o644))
	got, err = isolation.InProcessHazards(dir)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestLoadSettingsManagedPinWins(t *testing.T) {
	t.Parallel()
	home, managed := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"), []byte("plugins:\n  isolation: in_process\n"), 0o644))
	s, err := isolation.LoadSettings(home, managed)
	require.NoError(t, err)
	require.Equal(t, isolation.InProcess, s.Mode, "positive control: no managed config, the profile decides")
	require.NoError(t, os.WriteFile(filepath.Join(managed, "config.yaml"), []byte("plugins:\n  isolation: host\n"), 0o644))
	s, err = isolation.LoadSettings(home, managed)
	require.NoError(t, err)
	require.Equal(t, isolation.Host, s.Mode)
	require.True(t, s.Pinned)

	require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"), []byte("plugins: [\n"), 0o644))
	_, err = isolation.LoadSettings(home, managed)
	require.ErrorContains(t, err, "config.yaml")
}

func TestMayLoadInProcess(t *testing.T) {
	t.Setenv(isolation.HostProcessEnv, "")
	require.NoError(t, isolation.MayLoadInProcess("plugin x", isolation.SourceUser, isolation.InProcess))
	require.NoError(t, isolation.MayLoadInProcess("plugin x", isolation.SourceBundled, isolation.Host), "bundled code stays in-process")
	err := isolation.MayLoadInProcess("plugin x", isolation.SourceUser, isolation.Host)
	require.True(t, errors.Is(err, isolation.ErrRefused))
	require.Contains(t, err.Error(), "plugin x")
	require.Contains(t, err.Error(), "plugins.isolation")

	t.Setenv(isolation.HostProcessEnv, "1")
	require.NoError(t, isolation.MayLoadInProcess("plugin x", isolation.SourceUser, isolation.Host), "inside a host every loader loads directly")
}

func writePlugin(t *testing.T, root, name, src string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte("name: "+name+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugin.go"), []byte(src), 0o644))
	return dir
}

const header = "package p\n\nimport (\n\t\"context\"\n\n\tsdk \"github.com/tenantcanary/tenantcanary/plugin\"\n)\n\nvar _ = context.Background\n\n"

func TestAuditVerdicts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cases := []struct {
		name, body string
		verdict    isolation.Verdict
		reason     string
	}{
		{"portable", `func Register(c sdk.Context) error { return c.RegisterTool(sdk.Tool{Name: "t", Handler: nil}) }`, isolation.VerdictPortable, ""},
		{"platform", `func Register(c sdk.Context) error { return c.RegisterPlatform("x", "X", nil) }`, isolation.VerdictInProcess, "RegisterPlatform"},
		{"degraded", `func Register(c sdk.Context) error { return c.RegisterHook("pre_gateway_dispatch", nil) }`, isolation.VerdictInProcess, "pre_gateway_dispatch"},
		{"cli", `func Register(c sdk.Context) error { return c.RegisterCLICommand("x", "", nil) }`, isolation.VerdictHost, "RegisterCLICommand"},
		{"helper", "func Register(c sdk.Context) error { return helper(c) }\n\nfunc helper(h sdk.Context) error { _ = h.State(); return nil }", isolation.VerdictHost, "State"},
		// A method of the same name on something that is not the Context does not count.
		{"lookalike", "type x struct{}\n\nfunc (x) RegisterPlatform() {}\n\nfunc Register(c sdk.Context) error { x{}.RegisterPlatform(); return nil }", isolation.VerdictPortable, ""},
	}
	for _, tc := range cases {
		dir := writePlugin(t, root, tc.name, header+tc.body+"\n")
		r, err := isolation.AuditDir(dir)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.verdict, r.Verdict, tc.name)
		if tc.reason != "" {
			require.Contains(t, r.Reasons[0], tc.reason, tc.name)
		}
	}
}

func TestRunAuditCommand(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writePlugin(t, root, "a", header+`func Register(c sdk.Context) error { return c.RegisterPlatform("x", "X", nil) }`+"\n")
	writePlugin(t, root, "b", header+`func Register(c sdk.Context) error { return nil }`+"\n")

	var out, errb bytes.Buffer
	require.Equal(t, 0, isolation.RunAuditCommand([]string{root}, &out, &errb), errb.String())
	require.Contains(t, out.String(), "a: in_process\n  - RegisterPlatform (unsupported): "+isolation.UnsupportedMethods["RegisterPlatform"])
	require.Contains(t, out.String(), "b: portable\n")

	out.Reset()
	require.Equal(t, 0, isolation.RunAuditCommand([]string{filepath.Join(root, "a"), "--json"}, &out, &errb))
	var reps []isolation.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &reps))
	require.Len(t, reps, 1)
	require.Equal(t, isolation.VerdictInProcess, reps[0].Verdict)

	for _, args := range [][]string{nil, {"--yaml", root}, {root, root}} {
		errb.Reset()
		require.Equal(t, 2, isolation.RunAuditCommand(args, &out, &errb), "%q", args)
		require.Contains(t, errb.String(), "usage: agentd plugins audit DIR [--json]")
	}
	errb.Reset()
	require.Equal(t, 1, isolation.RunAuditCommand([]string{filepath.Join(root, "missing")}, &out, &errb))
	require.True(t, strings.Contains(errb.String(), "missing"))

	bad := writePlugin(t, root, "broken", "package p\nfunc {\n")
	errb.Reset()
	require.Equal(t, 1, isolation.RunAuditCommand([]string{bad}, &out, &errb))
	require.Contains(t, errb.String(), "broken")
}

func TestEveryTableEntryHasAReasonAndAVerdict(t *testing.T) {
	t.Parallel()
	for _, table := range []map[string]string{isolation.UnsupportedMethods, isolation.SkippedMethods, isolation.RemoteFacades, isolation.ObjectMethods} {
		for method, reason := range table {
			require.NotEmpty(t, reason, method)
			f, ok := isolation.CheckMethod(method)
			require.True(t, ok, method)
			require.Equal(t, method, f.Surface)
			require.NotEmpty(t, f.Reason)
		}
	}
	for event := range isolation.DegradedHooks {
		f, ok := isolation.CheckHook(event)
		require.True(t, ok)
		require.Equal(t, isolation.Degraded, f.Effect)
	}
	_, ok := isolation.CheckMethod("RegisterTool")
	require.False(t, ok, "tools cross unchanged")
	_, ok = isolation.CheckHook("post_tool_call")
	require.False(t, ok)

	v, reasons := isolation.Judge(nil)
	require.Equal(t, isolation.VerdictPortable, v)
	require.Empty(t, reasons)
	cli, _ := isolation.CheckMethod("RegisterCLICommand")
	plat, _ := isolation.CheckMethod("RegisterPlatform")
	v, reasons = isolation.Judge([]isolation.Finding{cli, plat, cli})
	require.Equal(t, isolation.VerdictInProcess, v)
	require.Len(t, reasons, 1, "only the blocking finding is a reason for in_process")
	require.Contains(t, reasons[0], "RegisterPlatform")
}
