package oneapi

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // one-api's own SQLite driver, to read its database
)

// provider is a tenant's upstream: an OpenAI-compatible server that
// records every request (before checking the key) and accepts only its
// tenant's key.
type provider struct {
	*httptest.Server
	tenant, key, model string

	mu   sync.Mutex
	reqs []seen
}

type seen struct{ method, path, auth, body string }

func newProvider(t *testing.T, tenant string) *provider {
	p := &provider{tenant: tenant, key: "provider-key-" + tenant + "-0123456789", model: "model-" + tenant + "-0123456789"}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		p.mu.Lock()
		p.reqs = append(p.reqs, seen{r.Method, r.URL.Path, auth, string(body)})
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case auth != p.key:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
		case strings.HasSuffix(r.URL.Path, "/models"):
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":%q}]}`, p.model, p.tenant)
		case strings.HasSuffix(r.URL.Path, "/chat/completions"):
			fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":"answer of %s's provider"},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, p.model, p.tenant)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"no route"}}`)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) requests() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.reqs...)
}

// instance is one one-api process on a loopback port, its data in dir.
type instance struct {
	url, rootToken, dir string
	log                 *bytes.Buffer
}

// startOneAPI runs $ONEAPI_BIN (built by examples/targets/one-api/ci.sh)
// in a process group of its own, killed at cleanup, and waits for
// /api/status. It skips the test when ONEAPI_BIN is not set.
func startOneAPI(t *testing.T) *instance {
	t.Helper()
	bin := os.Getenv("ONEAPI_BIN")
	if bin == "" {
		t.Skip("ONEAPI_BIN is not set: build one-api first (examples/targets/one-api/ci.sh does, or: go build -o bin/one-api github.com/songquanpeng/one-api)")
	}
	dir := t.TempDir()
	tk := filepath.Join(dir, "tiktoken")
	if _, err := WriteTiktokenCache(tk); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	in := &instance{url: "http://127.0.0.1:" + strconv.Itoa(port), rootToken: "root-token-test-0123456789abcdef", dir: dir, log: &bytes.Buffer{}}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--log-dir", filepath.Join(dir, "logs"))
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir,
		"TIKTOKEN_CACHE_DIR=" + tk, "SQLITE_PATH=" + filepath.Join(dir, "one-api.db"),
		"INITIAL_ROOT_ACCESS_TOKEN=" + in.rootToken, "GLOBAL_API_RATE_LIMIT=100000",
	}
	cmd.Stdout, cmd.Stderr = syncWriter{w: in.log}, syncWriter{w: in.log}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start one-api: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("one-api's output:\n%s", in.log)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(in.url + "/api/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return in
			}
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("one-api exited before it was ready (%v)", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("one-api never answered GET %s/api/status in 60s (last: %v)", in.url, err)
		}
	}
}

type syncWriter struct{ w *bytes.Buffer }

var logMu sync.Mutex

func (s syncWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return s.w.Write(p)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// relay sends method path with the bearer key and returns status and body.
func relay(t *testing.T, in *instance, method, path, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, in.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func chat(model string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}]}`, model)
}

// TestProvisionedOneAPI provisions three tenants in a real one-api and
// checks what the provisioning promises: each tenant's chat reaches only
// its own provider with its own key, another tenant's model finds no
// channel, no or a wrong token is refused, the management API refuses
// another tenant's token, the root's default password and registration are
// closed, and the upstream keys rest only in the channels table, each in
// its own tenant's channel.
func TestProvisionedOneAPI(t *testing.T) {
	in := startOneAPI(t)
	names := []string{"default", "alpha", "beta"}
	provs := map[string]*provider{}
	var r Roster
	r.Version = 1
	for _, n := range names {
		p := newProvider(t, n)
		provs[n] = p
		r.Tenants = append(r.Tenants, RosterTenant{Name: n, BaseURL: p.URL + "/v1", Key: p.key, Model: p.model})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := NewClient(in.url, in.rootToken)
	out, err := Provision(ctx, root, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tenants) != len(names) {
		t.Fatalf("provisioned %d tenants, want %d", len(out.Tenants), len(names))
	}

	for _, n := range names {
		a := out.Tenants[n]
		if a.Key == "" || a.Headers["Authorization"] == "" || a.IDs["user"] == "" || a.IDs["token"] == "" || a.IDs["channel"] == "" || a.BasePath != "/v1" {
			t.Fatalf("tenant %s: incomplete access %+v", n, a)
		}
		status, body := relay(t, in, "POST", "/v1/chat/completions", a.Key, chat(provs[n].model))
		if status != http.StatusOK || !strings.Contains(body, "answer of "+n+"'s provider") {
			t.Errorf("tenant %s, own model: HTTP %d %s", n, status, body)
		}
	}
	for _, n := range names {
		reqs := provs[n].requests()
		if len(reqs) != 1 {
			t.Errorf("provider of %s got %d requests, want 1 (its tenant's chat): %+v", n, len(reqs), reqs)
		}
		for _, q := range reqs {
			if q.auth != provs[n].key || q.path != "/v1/chat/completions" || !strings.Contains(q.body, provs[n].model) {
				t.Errorf("provider of %s got %s %s with key %q body %s", n, q.method, q.path, q.auth, q.body)
			}
		}
	}

	alpha, beta := out.Tenants["alpha"], out.Tenants["beta"]
	if status, body := relay(t, in, "POST", "/v1/chat/completions", alpha.Key, chat(provs["beta"].model)); status != http.StatusServiceUnavailable {
		t.Errorf("alpha naming beta's model: HTTP %d %s, want 503 (no channel of alpha's group serves it)", status, body)
	}
	for _, key := range []string{"", "sk-not-a-token-of-anyone-0123456789abcdef0123456"} {
		if status, body := relay(t, in, "POST", "/v1/chat/completions", key, chat(provs["alpha"].model)); status != http.StatusUnauthorized {
			t.Errorf("token %q: HTTP %d %s, want 401", key, status, body)
		}
	}
	if n := len(provs["beta"].requests()); n != 1 {
		t.Errorf("beta's provider got %d requests after the refused ones, want still 1", n)
	}

	asAlpha := root.As(alpha.Headers["Authorization"])
	var own Token
	if err := asAlpha.Call(ctx, "GET", "/api/token/"+alpha.IDs["token"], nil, &own); err != nil || own.Key != alpha.Key {
		t.Errorf("alpha reading its own token: %v (key %q)", err, own.Key)
	}
	var mine []Token
	if err := asAlpha.Call(ctx, "GET", "/api/token/?p=0", nil, &mine); err != nil || len(mine) != 1 || strconv.Itoa(mine[0].ID) != alpha.IDs["token"] {
		t.Errorf("alpha's tokens: %v %+v, want only token %s (one-api's own default token deleted)", err, mine, alpha.IDs["token"])
	}
	var foreign Token
	if err := asAlpha.Call(ctx, "GET", "/api/token/"+beta.IDs["token"], nil, &foreign); !errors.Is(err, ErrRefused) || foreign.Key != "" {
		t.Errorf("alpha reading beta's token %s: err %v, key %q; want refused, no key", beta.IDs["token"], err, foreign.Key)
	}
	for _, path := range []string{"/api/channel/" + beta.IDs["channel"], "/api/user/" + beta.IDs["user"]} {
		if err := asAlpha.Call(ctx, "GET", path, nil, nil); !errors.Is(err, ErrRefused) {
			t.Errorf("alpha GET %s: %v, want refused (admin only)", path, err)
		}
	}
	if err := root.As("").Call(ctx, "POST", "/api/user/login", map[string]string{"username": "root", "password": "123456"}, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("root login with one-api's default password: %v, want refused", err)
	}
	if err := root.As("").Call(ctx, "POST", "/api/user/register", map[string]string{"username": "stranger", "password": "stranger-pass-1"}, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("registering a new user: %v, want refused", err)
	}

	checkKeysAtRest(t, filepath.Join(in.dir, "one-api.db"), r, out)
}

// checkKeysAtRest reads every text cell of every table and wants each
// tenant's upstream key in channels.key of its own channel only.
func checkKeysAtRest(t *testing.T, path string, r Roster, out Provisioned) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tables := queryStrings(t, db, "SELECT name FROM sqlite_master WHERE type = 'table'")
	found := map[string][]string{}
	for _, table := range tables {
		rows, err := db.Query(fmt.Sprintf("SELECT rowid, * FROM %q", table))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				s := fmt.Sprint(v)
				if b, ok := v.([]byte); ok {
					s = string(b)
				}
				for _, rt := range r.Tenants {
					if strings.Contains(s, rt.Key) {
						found[rt.Name] = append(found[rt.Name], fmt.Sprintf("%s.%s rowid %v", table, cols[i], vals[0]))
					}
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	for _, rt := range r.Tenants {
		want := "channels.key rowid " + out.Tenants[rt.Name].IDs["channel"]
		if got := found[rt.Name]; len(got) != 1 || got[0] != want {
			t.Errorf("%s's upstream key rests in %v, want only %s", rt.Name, got, want)
		}
	}
}

func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestKnownHoleProxyRoute pins the cross-tenant hole of one-api v0.6.10:
// /v1/oneapi/proxy/{channel_id}/* relays a tenant's request, with its OWN
// token, through ANY channel by id (middleware.TokenAuth sets the channel
// from the path for every user; middleware.Distribute loads it with no
// group check): alpha reaches beta's provider with beta's upstream key and
// reads beta's answer. This is the real-world positive control of the
// certification (examples/targets/one-api/target.yaml declares the route);
// if it fails, one-api closed the hole and the certificate's expectation
// must change with it.
func TestKnownHoleProxyRoute(t *testing.T) {
	in := startOneAPI(t)
	provs := map[string]*provider{}
	r := Roster{Version: 1}
	for _, n := range []string{"alpha", "beta"} {
		p := newProvider(t, n)
		provs[n] = p
		r.Tenants = append(r.Tenants, RosterTenant{Name: n, BaseURL: p.URL + "/v1", Key: p.key, Model: p.model})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := Provision(ctx, NewClient(in.url, in.rootToken), r)
	if err != nil {
		t.Fatal(err)
	}
	alpha, beta := out.Tenants["alpha"], out.Tenants["beta"]

	// Own channel first: the route works for its owner.
	status, body := relay(t, in, "GET", "/v1/oneapi/proxy/"+alpha.IDs["channel"]+"/v1/models", alpha.Key, "")
	if status != http.StatusOK || !strings.Contains(body, provs["alpha"].model) {
		t.Fatalf("alpha through its own channel: HTTP %d %s", status, body)
	}
	status, body = relay(t, in, "GET", "/v1/oneapi/proxy/"+beta.IDs["channel"]+"/v1/models", alpha.Key, "")
	if status != http.StatusOK || !strings.Contains(body, provs["beta"].model) {
		t.Fatalf("alpha through beta's channel %s: HTTP %d %s; want beta's model list (the v0.6.10 hole): closed?", beta.IDs["channel"], status, body)
	}
	status, body = relay(t, in, "POST", "/v1/oneapi/proxy/"+beta.IDs["channel"]+"/v1/chat/completions", alpha.Key, chat(provs["alpha"].model))
	if status != http.StatusOK || !strings.Contains(body, "answer of beta's provider") {
		t.Fatalf("alpha chatting through beta's channel: HTTP %d %s", status, body)
	}
	var crossed []seen
	for _, q := range provs["beta"].requests() {
		if q.auth == provs["beta"].key && strings.Contains(q.path, "/v1/oneapi/proxy/") {
			crossed = append(crossed, q)
		}
	}
	if len(crossed) != 2 || !strings.Contains(crossed[1].body, provs["alpha"].model) {
		t.Fatalf("beta's provider got %+v; want alpha's two requests, with beta's key", provs["beta"].requests())
	}
}
