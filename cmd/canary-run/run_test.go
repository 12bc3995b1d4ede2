package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := writeFile(t, dir, "names.json", `["default","alpha"]`)
	notJSON := writeFile(t, dir, "not.json", `names: [a]`)
	unknownField := writeFile(t, dir, "unknown.json", `{"names":["a","b"],"lunch":"a"}`)
	badTarget := writeFile(t, dir, "target.yaml", "name: x\nstdio: [x]\nbogus: 1\n")
	out := filepath.Join(dir, "never")

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"certify"}, `unknown command "certify"`},
		{"unknown flag", []string{"--bogus", "--out", out}, "flag provided but not defined: -bogus"},
		{"stray argument", []string{"--out", out, "extra"}, `unexpected argument "extra"`},
		{"one tenant", []string{"--tenants", "1", "--out", out}, "--tenants 1: want 2 to 100"},
		{"too many tenants", []string{"--tenants", "1000", "--out", out}, "--tenants 1000: want 2 to 100"},
		{"tenants not a number", []string{"--tenants", "three", "--out", out}, `invalid value "three" for flag -tenants`},
		{"negative parallelism", []string{"--parallel", "-1", "--out", out}, "--parallel -1: want 0 (automatic) or more"},
		{"negative timeout", []string{"--timeout", "-1s", "--out", out}, "--timeout -1s: want 0 or more"},
		{"bad duration", []string{"--timeout", "soon", "--out", out}, `invalid value "soon" for flag -timeout`},
		{"bad regexp", []string{"--run", "(", "--out", out}, `--run "(": error parsing regexp`},
		{"run matches nothing", []string{"--run", "^nothing$", "--out", out}, "matches no scenario; the catalog has: "},
		{"empty target", []string{"--target", "", "--out", out}, "--target is empty"},
		{"missing target file", []string{"--target", filepath.Join(dir, "missing.yaml"), "--out", out}, "load target: open "},
		{"bad target file", []string{"--target", badTarget, "--out", out}, "field bogus not found"},
		{"several errors at once", []string{"--tenants", "0", "--parallel", "-2", "--out", out}, "--tenants 0: want 2 to 100\n--parallel -2"},
		{"self-test and not", []string{"--self-test", "--no-self-test", "--out", out}, "--self-test and --no-self-test exclude each other"},
		{"self-test with run", []string{"--self-test", "--run", "^pooled", "--out", out}, "--run does not apply"},
		{"faults without the self-test", []string{"--no-self-test", "--faults", "no-conn", "--out", out}, "--faults picks the self-test's faults: --no-self-test runs none"},
		{"faults bad regexp", []string{"--self-test", "--faults", "(", "--out", out}, `--faults "(": error parsing regexp`},
		{"faults match nothing", []string{"--self-test", "--faults", "^nothing$", "--out", out}, `--faults "^nothing$" matches no fault (the faults: `},
		{"scan without canaries", []string{"scan", dir}, "--canaries FILE is required"},
		{"fakellm without listen", []string{"fakellm", "--tenants", names, "--out", out}, "--listen ADDR is required"},
		{"fakellm without tenants", []string{"fakellm", "--listen", "127.0.0.1:0", "--out", out}, "--tenants FILE is required"},
		{"fakellm listen without port", []string{"fakellm", "--listen", "127.0.0.1", "--tenants", names, "--out", out}, `--listen "127.0.0.1": want HOST:PORT`},
		{"fakellm listen bad port", []string{"fakellm", "--listen", "127.0.0.1:http", "--tenants", names, "--out", out}, `port "http" is not a number`},
		{"fakellm fixed port for two", []string{"fakellm", "--listen", "127.0.0.1:5999", "--tenants", names, "--out", out}, "a fixed port serves one provider, and there are 2 tenants: use port 0"},
		{"fakellm names not JSON", []string{"fakellm", "--listen", "127.0.0.1:0", "--tenants", notJSON, "--out", out}, "want a JSON array of names"},
		{"fakellm names unknown field", []string{"fakellm", "--listen", "127.0.0.1:0", "--tenants", unknownField, "--out", out}, `unknown field "lunch"`},
		{"fakellm names missing", []string{"fakellm", "--listen", "127.0.0.1:0", "--tenants", filepath.Join(dir, "nope.json"), "--out", out}, "read --tenants: open "},
		{"agentd unknown command", []string{"agentd", "bogus"}, `agentd: unknown command "bogus"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, tc.args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Contains(t, stderr, tc.want)
			require.Empty(t, stdout)
			require.NoDirExists(t, out, "a usage error writes nothing")
		})
	}
}

// TestFakeLLMBadTenantName: fakellm refuses a names file it cannot serve
// with exit 2, says why, and writes nothing.
func TestFakeLLMBadTenantName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, names, want string
	}{
		{"bad name", `{"names":["default","Alpha!"]}`, `tenant name "Alpha!"`},
		{"launch not among", `{"names":["default","alpha"],"launch":"beta"}`, `launch tenant "beta" is not among`},
		{"writes nothing", `["default","x_y"]`, `tenant name "x_y"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names := writeFile(t, dir, "names.json", tc.names)
			out := filepath.Join(dir, "out")
			code, _, stderr := runCLI(t, "fakellm", "--listen", "127.0.0.1:0", "--tenants", names, "--out", out)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, tc.want)
			require.NoDirExists(t, out)
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, stderr := runCLI(t, args...)
		require.Equal(t, 0, code)
		require.Empty(t, stderr)
		require.Contains(t, stdout, "canary-run scan --canaries FILE [--json] [--ignore-own [--home DIR] [--launch NAME]] [--allow-special] PATH...")
		require.Contains(t, stdout, "canary-run fakellm --listen ADDR --tenants FILE")
		require.Contains(t, stdout, "exit: 0 certified")
	}
	code, stdout, _ := runCLI(t, "fakellm", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, fakellmUsage)
}

// TestEveryCommandHasHelpAndVersion: --help exits 0 with the flags listed,
// --version exits 0 with the version and commit, for every command.
func TestEveryCommandHasHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		flags []string
	}{
		{nil, []string{"-target", "-tenants", "-run", "-shard", "-out", "-keep", "-timeout", "-parallel", "-self-test", "-no-self-test", "-faults"}},
		{[]string{"fakellm"}, []string{"-listen", "-tenants", "-out", "-journal", "-advertise-host", "-homes", "-layout"}},
		{[]string{"merge"}, []string{"-out"}},
	} {
		for _, h := range []string{"--help", "-h"} {
			code, stdout, stderr := runCLI(t, append(tc.args, h)...)
			require.Equal(t, 0, code, "%v %s: %s", tc.args, h, stderr)
			require.Empty(t, stderr)
			for _, f := range tc.flags {
				require.Regexp(t, `(?m)^  `+f+`( |$)`, stdout, "%v %s lists %s", tc.args, h, f)
			}
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"fakellm", "--version"}, {"merge", "--version"}, {"scan", "--version"}, {"--out", "x", "--version"}} {
		code, stdout, stderr := runCLI(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.Regexp(t, `^tenantcanary canary-run v\d+\.\d+\.\d+\S* \(commit `, stdout, "%v", args)
	}
	code, stdout, _ := runCLI(t, "agentd", "--version")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "tenantcanary v")
	code, stdout, _ = runCLI(t, "agentd", "serve", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "-cron-interval")
}

func TestAgentdIsEmbedded(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "agentd", "version")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(stdout, server.Version+", tenantcanary v"), stdout)
}

func TestOutUnderAFileFailsBeforeRunning(t *testing.T) {
	t.Parallel()
	file := writeFile(t, t.TempDir(), "a-file", "")
	code, _, stderr := runCLI(t, "--out", filepath.Join(file, "cert"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--out "`+filepath.Join(file, "cert")+`": mkdir `)
	require.NotContains(t, stderr, "phase", "no scenario started")
}

func TestFlagsReachTheRun(t *testing.T) {
	t.Parallel()
	o, err := parseCertify([]string{"--target", "t.yaml", "--tenants", "32", "--run", "^pooled", "--out", "o", "--keep",
		"--timeout", "90s", "--parallel", "2", "--no-self-test"})
	require.NoError(t, err)
	require.Equal(t, certifyOptions{target: "t.yaml", tenants: 32, run: "^pooled", out: "o", keep: true,
		timeout: 90 * time.Second, parallel: 2, noSelf: true}, o)
	o, err = parseCertify([]string{"--self-test"})
	require.NoError(t, err)
	require.True(t, o.selfTest)
	o, err = parseCertify([]string{"--self-test", "--faults", "^(no-conn-limit|shared-shell)$"})
	require.NoError(t, err)
	require.Equal(t, "^(no-conn-limit|shared-shell)$", o.faults)
	// (seededFaults may be narrowed by TestSelfTestCommand: the whole list
	// is scenarios.Faults.)
	fs, err := selectFaults(scenarios.Faults(), o.faults)
	require.NoError(t, err)
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"shared-shell", "no-conn-limit"}, names, "the faults in the catalog's order")
	o, err = parseCertify(nil)
	require.NoError(t, err)
	require.Equal(t, certifyOptions{target: "agentd", tenants: 3, out: "canary-out", parallel: scenarios.AutoParallel()}, o)
}

func TestVersionAndHelpDefaults(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCLI(t, "version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^tenantcanary canary-run v\d+\.\d+\.\d+\S* \(commit [^\n]+\)\n$`, stdout)
	_, stdout, _ = runCLI(t, "--help")
	require.Contains(t, stdout, "flags of a run:")
	require.Contains(t, stdout, `write the certificate into this DIR (default "canary-out")`)
}
