package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

type reply struct {
	status     int
	body       string
	retryAfter string
}

func post(t *testing.T, url, key string, stream bool) reply {
	t.Helper()
	return postModel(t, url, key, ModelAlias, stream)
}

// postModel posts a chat naming model.
func postModel(t *testing.T, url, key, model string, stream bool) reply {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp.Header.Get("Retry-After")}
}

// newGateway serves profile "busy" (its provider held until release
// closes; model m) and a keyless profile "nokey", with one turn slot per
// profile and room for one waiting turn, with the seeded faults seeded.
func newGateway(t *testing.T, release <-chan struct{}, seeded ...faults.Name) (*httptest.Server, *fakellm.Server, *server.Server) {
	t.Helper()
	root := t.TempDir()
	homes := profile.Homes{Launch: filepath.Join(root, "launch")}
	llm, err := fakellm.New(fakellm.Options{Keys: []string{"pk"}, Responder: func(fakellm.Record) fakellm.Response {
		<-release
		return fakellm.Text("done")
	}})
	require.NoError(t, err)
	t.Cleanup(llm.Close)
	_, err = homes.Get("")
	require.NoError(t, err)
	for _, name := range []string{"busy", "nokey"} {
		p, err := homes.Create(name)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p.File("config.yaml"), []byte(fmt.Sprintf(
			"model:\n  base_url: %s\n  default: m\n  key_env: K\nterminal:\n  cwd: %s\n", llm.BaseURL, p.Home)), 0o600))
		require.NoError(t, p.SetEnv("K", "pk"))
		if name == "busy" {
			require.NoError(t, p.SetEnv(KeyEnv, "gw-key"))
		}
	}
	srv := server.New(server.Options{Homes: homes, BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		Limits: server.Limits{ProfileTurns: 1, ProfileQueue: 1}})
	fs := faults.Set{}
	for _, n := range seeded {
		fs[n] = true
	}
	g, err := New(Options{Homes: homes, Server: srv, Faults: fs})
	require.NoError(t, err)
	hs := httptest.NewServer(g)
	t.Cleanup(func() {
		hs.Close()
		g.Close()
		require.NoError(t, srv.Shutdown(context.Background()))
	})
	return hs, llm, srv
}

func TestTheKeyIsCheckedBeforeTheProfileIsKnown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	close(release)
	hs, _, _ := newGateway(t, release)
	ghost := post(t, hs.URL+"/p/ghost/v1/chat/completions", "gw-key", false)
	wrong := post(t, hs.URL+"/p/busy/v1/chat/completions", "nope", false)
	keyless := post(t, hs.URL+"/p/nokey/v1/chat/completions", "", false)
	for _, r := range []reply{ghost, wrong, keyless} {
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		require.Equal(t, wrong.body, r.body, "an unknown or keyless profile reads the same as a wrong key")
	}
	ok := post(t, hs.URL+"/p/busy/v1/chat/completions", "gw-key", false)
	require.Equal(t, http.StatusOK, ok.status, ok.body)
}

func TestAFullTurnQueueIs429WithRetryAfter(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hs, llm, srv := newGateway(t, release)
	url := hs.URL + "/p/busy/v1/chat/completions"
	var wg sync.WaitGroup
	replies := make([]reply, 2)
	wg.Add(1)
	go func() { defer wg.Done(); replies[0] = post(t, url, "gw-key", false) }()
	_, err := llm.WaitRequests(context.Background(), fakellm.KindMain, 1)
	require.NoError(t, err)
	wg.Add(1)
	go func() { defer wg.Done(); replies[1] = post(t, url, "gw-key", true) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, turns := srv.Load(); turns.Waiting == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second turn never queued")
	}
	refused := post(t, url, "gw-key", true)
	require.Equal(t, http.StatusTooManyRequests, refused.status, refused.body)
	require.Equal(t, "1", refused.retryAfter)
	require.Contains(t, refused.body, "too many turns in flight")
	close(release)
	wg.Wait()
	require.Equal(t, http.StatusOK, replies[0].status, replies[0].body)
	require.Equal(t, http.StatusOK, replies[1].status, replies[1].body)
	require.Contains(t, replies[1].body, "data: [DONE]")
}
