package cli_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
)

// chat posts one chat completion through the harness's gateway client,
// the one the catalog drives gateways with; a refusal is a reply, not an
// error.
func chat(t *testing.T, port int, path, key, text string, stream bool) harness.GatewayReply {
	t.Helper()
	g := harness.GatewayClient{Base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	r, err := g.Complete(t.Context(), harness.ChatRequest{Path: path, Key: key, Model: "gateway", Text: text, Stream: stream})
	require.NoError(t, err, "%s: %s", path, r.Body)
	return r
}

func TestGatewayOwnKeysOnlyAndOneGatewayPerProfile(t *testing.T) {
	t.Parallel()
	w, alpha, beta := alphaBetaWorld(t)
	keys := map[string]string{}
	for _, tn := range []*tenant{alpha, beta} {
		keys[tn.name] = "apisrv-" + tn.name + "-" + tag()
		f, err := os.OpenFile(filepath.Join(tn.home, ".env"), os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		_, err = f.WriteString("API_SERVER_KEY=" + keys[tn.name] + "\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	g := w.startListener([]string{"gateway", "--host", "127.0.0.1", "--port", "0"})
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", g.port))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	routes := map[string]string{"alpha": "/v1/chat/completions", "beta": "/p/beta/v1/chat/completions"}
	r := chat(t, g.port, routes["alpha"], keys["alpha"], "probe please", false)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, "probe done for alpha", r.Text)
	r = chat(t, g.port, routes["beta"], keys["beta"], "probe please", true)
	require.Equal(t, 200, r.Status, string(r.Body))
	require.Equal(t, "probe done for beta", r.Text)
	for _, tn := range []*tenant{alpha, beta} {
		env, cwd, _ := snapshot(t, toolResults(tn.srv)[0])
		require.Equal(t, tn.workdir, cwd)
		require.Equal(t, tn.marker, env["ENV_MARKER"])
		require.Equal(t, keys[tn.name], env["API_SERVER_KEY"], "own gateway key in own tool env (positive control)")
	}

	// Foreign, provider and missing keys on every route: refused, nothing driven.
	for route, own := range map[string]*tenant{routes["alpha"]: alpha, routes["beta"]: beta} {
		before := len(own.srv.Requests())
		for _, other := range []*tenant{alpha, beta} {
			if other == own {
				continue
			}
			for _, k := range []string{keys[other.name], other.key, own.key, ""} {
				r := chat(t, g.port, route, k, "probe", false)
				require.Contains(t, []int{401, 403}, r.Status, "route %s key %q", route, k)
				if k != "" {
					require.NotContains(t, string(r.Body), k)
				}
			}
		}
		require.Len(t, own.srv.Requests(), before, "refused requests drove nothing on %s", route)
	}
	require.Equal(t, 401, chat(t, g.port, "/p/ghost/v1/chat/completions", "x", "p", false).Status, "an unknown profile is not told apart from a wrong key")

	// A second gateway for the same profiles refuses to serve twice.
	_, stderr, code := w.run("gateway", "--host", "127.0.0.1", "--port", "0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "refusing to serve twice")
	require.Contains(t, stderr, fmt.Sprint(g.pid))
	g.stop()
}
