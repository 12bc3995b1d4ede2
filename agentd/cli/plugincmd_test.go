package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/cli"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), append([]string{"agentd"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// `agentd plugins audit` judges a plugin's source without running it, with
// the tables the runtime enforces.
func TestPluginsAuditCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, src string) string {
		d := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "plugin.yaml"), []byte("name: "+name+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "plugin.go"), []byte(src), 0o644))
		return d
	}
	fine := write("fine", probePlugin)
	platform := write("platform", `package platform

import "github.com/tenantcanary/tenantcanary/plugin"

func Register(ctx plugin.Context) error {
	return ctx.RegisterPlatform("x", "X", func(cfg map[string]any) (any, error) { return nil, nil })
}
`)
	code, out, errOut := runMain(t, "plugins", "audit", fine, "--json")
	require.Equal(t, 0, code, errOut)
	var reps []struct {
		Plugin  string   `json:"plugin"`
		Verdict string   `json:"verdict"`
		Reasons []string `json:"reasons"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reps), out)
	require.Len(t, reps, 1)
	require.Equal(t, "host", reps[0].Verdict)

	code, out, errOut = runMain(t, "plugins", "audit", platform, "--json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &reps), out)
	require.Equal(t, "in_process", reps[0].Verdict)
	require.Contains(t, strings.Join(reps[0].Reasons, "\n"), "RegisterPlatform")

	// A whole plugins folder: one verdict per plugin.
	code, out, errOut = runMain(t, "plugins", "audit", dir, "--json")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &reps), out)
	require.Len(t, reps, 2)

	code, _, errOut = runMain(t, "plugins")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, errOut, "usage: agentd plugins audit DIR")
	code, _, errOut = runMain(t, "plugin-host", "extra")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, errOut, "takes no arguments")
}
