package outerenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOfKeepsOnlyTheAllowList(t *testing.T) {
	t.Parallel()
	in := []string{"PATH=/usr/bin", "LD_PRELOAD=/home/t/x.so", "LC_ALL=C.UTF-8", "LANG=C", "OPENAI_API_KEY=k",
		"AGENTD_SESSION_TOKEN=t", "TENANTCANARY_COMMAND=agentd", "HOME=/home/t", "LD_LIBRARY_PATH=/home/t", "GORACE=x", "BROKEN"}
	require.Equal(t, []string{"PATH=/usr/bin", "LC_ALL=C.UTF-8", "LANG=C", "TENANTCANARY_COMMAND=agentd", "GORACE=x"}, Of(in))
	require.False(t, Allowed("LD_PRELOAD"))
	require.True(t, Allowed("LC_CTYPE"))
}
