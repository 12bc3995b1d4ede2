package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type chatReply struct {
	status int
	text   string
	body   string
}

func chat(t *testing.T, port int, path, key, text string, stream bool) chatReply {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "gateway", "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := chatReply{status: resp.StatusCode, body: string(raw)}
	if resp.StatusCode != 200 {
		return r
	}
	if !stream {
		var c struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(raw, &c), string(raw))
		require.Len(t, c.Choices, 1)
		r.text = c.Choices[0].Message.Content
		return r
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(bytes.NewReader(raw))
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &ch), data)
		for _, c := range ch.Choices {
			r.text += c.Delta.Content
		}
	}
	require.True(t, done, "stream ends with [DONE]: %s", raw)
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
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "probe done for alpha", r.text)
	r = chat(t, g.port, routes["beta"], keys["beta"], "probe please", true)
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "probe done for beta", r.text)
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
				require.Contains(t, []int{401, 403}, r.status, "route %s key %q", route, k)
				if k != "" {
					require.NotContains(t, r.body, k)
				}
			}
		}
		require.Len(t, own.srv.Requests(), before, "refused requests drove nothing on %s", route)
	}
	require.Equal(t, 401, chat(t, g.port, "/p/ghost/v1/chat/completions", "x", "p", false).status, "an unknown profile is not told apart from a wrong key")

	// A second gateway for the same profiles refuses to serve twice.
	_, stderr, code := w.run("gateway", "--host", "127.0.0.1", "--port", "0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "refusing to serve twice")
	require.Contains(t, stderr, fmt.Sprint(g.pid))
	g.stop()
}
