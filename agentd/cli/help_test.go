package cli_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/server"
)

func TestEveryCommandHasHelpAndVersion(t *testing.T) {
	t.Parallel()
	// Each command's flags, as its own flag set declares them.
	flags := map[string][]string{
		"serve":   {"-host", "-port", "-cron", "-cron-interval"},
		"gateway": {"-host", "-port"},
		"cron":    {"-profile", "-name", "-prompt", "-every", "-json"},
	}
	for _, cmd := range []string{"tui", "serve", "gateway", "profile", "cron", "plugins", "plugin-host", "version"} {
		for _, h := range []string{"--help", "-h"} {
			code, stdout, stderr := runMain(t, cmd, h)
			require.Equal(t, 0, code, "agentd %s %s: %s", cmd, h, stderr)
			assert.Contains(t, stdout, "usage: agentd "+cmd, "agentd %s %s", cmd, h)
			assert.Contains(t, stdout, "AGENTD_HOME", "the environment is listed too")
			for _, f := range flags[cmd] {
				assert.Regexp(t, `(?m)^  `+f+`( |$)`, stdout, "agentd %s %s lists %s", cmd, h, f)
			}
		}
		code, stdout, _ := runMain(t, cmd, "--version")
		require.Equal(t, 0, code, "agentd %s --version", cmd)
		assert.True(t, strings.HasPrefix(stdout, server.Version+", tenantcanary v"), stdout)
	}
	// A subcommand's help: after the subcommand, and with the subcommand's flags.
	code, stdout, _ := runMain(t, "cron", "list", "--help")
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^  -json$`, stdout)

	code, stdout, _ = runMain(t, "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "usage: agentd COMMAND")
	code, stdout, _ = runMain(t, "--version")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "tenantcanary v")

	// An unknown command is still a usage error, on stderr.
	code, stdout, stderr := runMain(t, "frobnicate")
	require.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
}
