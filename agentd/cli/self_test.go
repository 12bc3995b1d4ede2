package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSelfArgv(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"/bin/agentd"}, selfArgv([]string{"agentd", "tui"}, "/bin/agentd", []string{"agentd", "tui"}))
	require.Equal(t, []string{"/bin/cr", "agentd"},
		selfArgv([]string{"canary-run", "agentd", "serve", "--port", "0"}, "/bin/cr", []string{"agentd", "serve", "--port", "0"}))
	require.Equal(t, []string{"/bin/x"}, selfArgv([]string{"x", "a"}, "/bin/x", []string{"agentd", "other"}), "args that are not this process's")
	require.Equal(t, []string{"/bin/x"}, selfArgv([]string{"x"}, "/bin/x", []string{"agentd", "a", "b"}))
	require.NotEmpty(t, SelfArgv([]string{"agentd"}))
}
