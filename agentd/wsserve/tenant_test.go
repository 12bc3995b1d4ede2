package wsserve

import (
	"context"
	"net/http"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// A tenant credential opens a connection bound to its profile; the
// operator's token opens an unbound one; anything else is refused.
func TestTenantCredentialBindsTheConnection(t *testing.T) {
	t.Parallel()
	d := rpc.NewDispatcher()
	d.Handle("whoami", func(ctx context.Context, c *rpc.Call) (any, error) {
		b := c.Conn.(interface {
			Tenant() string
			Credential() string
		})
		return map[string]string{"tenant": b.Tenant(), "credential": b.Credential()}, nil
	})
	_, srv := newServer(t, Options{Dispatcher: d, Tenant: func(tok string) (string, bool) {
		return map[string]string{"key-a": "alpha"}[tok], tok == "key-a"
	}})
	for tok, want := range map[string]string{
		"tok":   `{"jsonrpc":"2.0","id":1,"result":{"tenant":"","credential":""}}`,
		"key-a": `{"jsonrpc":"2.0","id":1,"result":{"tenant":"alpha","credential":"key-a"}}`,
	} {
		c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, tok), nil)
		require.NoError(t, err, tok)
		require.NoError(t, c.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":1,"method":"whoami"}`)))
		_, msg, err := c.ReadMessage()
		require.NoError(t, err)
		require.JSONEq(t, want, string(msg), tok)
		c.Close()
	}
	_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv, "key-b"), nil)
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
