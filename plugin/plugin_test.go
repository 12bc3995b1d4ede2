package plugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/plugin"
)

func TestSessionTravelsInTheContext(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", plugin.SessionID(context.Background()))
	ctx := plugin.WithSession(context.Background(), "alice")
	require.Equal(t, "alice", plugin.SessionID(ctx))
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	require.Equal(t, "alice", plugin.SessionID(inner), "derived contexts keep the session")
	require.Equal(t, "bob", plugin.SessionID(plugin.WithSession(inner, "bob")))
}
