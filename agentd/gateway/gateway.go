package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/server"
)

// KeyEnv is the .env variable holding a profile's gateway key.
const KeyEnv = "API_SERVER_KEY"

// ErrAlreadyServed means another gateway holds a profile's lock.
var ErrAlreadyServed = errors.New("profile already served by another gateway")

// Options configure a Gateway.
type Options struct {
	Homes  profile.Homes
	Server *server.Server
	Log    *slog.Logger // the gateway's own log; never tenant data
	// Faults are seeded bugs (test-only; see package faults).
	Faults faults.Set
}

// ModelAlias is the model name that means "this profile's model", beside
// the profile's own model.default and no model at all.
const ModelAlias = "gateway"

// Gateway is the HTTP handler.
type Gateway struct {
	opts Options

	mu     sync.Mutex
	locks  map[string]*os.File // profile name -> held lock
	closed bool
}

// New returns a gateway holding the lock of every profile that exists now;
// profiles created later are locked on their first request.
func New(opts Options) (*Gateway, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{opts: opts, locks: map[string]*os.File{}}
	list, err := opts.Homes.List()
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		if err := g.lock(p); err != nil {
			if errors.Is(err, homefs.ErrLink) || errors.Is(err, homefs.ErrNotRegular) {
				// One tenant's planted link (or FIFO, socket, folder) must
				// not stop every tenant's gateway: that profile is refused,
				// the others served.
				opts.Log.Warn("gateway: profile not served", "profile", p.Name, "err", err.Error())
				continue
			}
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// Close releases every lock.
func (g *Gateway) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for name, f := range g.locks {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
		delete(g.locks, name)
	}
}

// lock takes p's gateway lock (once).
func (g *Gateway) lock(p profile.Profile) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.locks[p.Name]; ok {
		return nil
	}
	if g.closed {
		return errors.New("gateway closed")
	}
	// gateway.lock is in the profile's home, which its tools can write:
	// opened through the home, following no symlink.
	path := p.File("gateway.lock")
	f, err := p.FS().OpenFile("gateway.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lock gateway of profile %q: %w", p.Name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w: profile %q (gateway pid %s holds %s)", ErrAlreadyServed, p.Name, strings.TrimSpace(string(holder)), path)
		}
		return fmt.Errorf("lock gateway of profile %q: %w", p.Name, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	g.locks[p.Name] = f
	return nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}
	name, ok := route(r.URL.Path)
	if !ok {
		apiError(w, http.StatusNotFound, "not found: want POST /v1/chat/completions or /p/<profile>/v1/chat/completions")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		apiError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	// The key check comes before anything is read or run for the profile,
	// and before the caller learns whether the profile exists: an unknown
	// profile, one without a gateway key and a wrong key get the same 401.
	p, ok, err := g.authorize(name, r.Header.Get("Authorization"))
	if err != nil {
		g.opts.Log.Error("gateway: profile .env unreadable", "profile", p.Name)
		apiError(w, http.StatusInternalServerError, "profile configuration error")
		return
	}
	if !ok {
		apiError(w, http.StatusUnauthorized, "missing or wrong API key")
		return
	}
	if err := g.lock(p); err != nil {
		if errors.Is(err, homefs.ErrLink) || errors.Is(err, homefs.ErrNotRegular) {
			apiError(w, http.StatusForbidden, err.Error())
			return
		}
		apiError(w, http.StatusConflict, "this profile is served by another gateway")
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20))
	if err := dec.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	var msgs []llm.Message
	for _, m := range req.Messages {
		text := contentText(m.Content)
		if m.Role == "user" || m.Role == "assistant" {
			msgs = append(msgs, llm.Message{Role: m.Role, Content: text})
		}
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" || msgs[len(msgs)-1].Content == "" {
		apiError(w, http.StatusBadRequest, "messages must end with a non-empty user message")
		return
	}
	cfg, err := p.LoadConfig()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "profile configuration error")
		return
	}
	model := cfg.Model.Default
	if req.Model != "" && req.Model != ModelAlias && req.Model != model && !g.opts.Faults.Has(faults.GatewayAnyModel) {
		// A profile serves its own model only: another profile's model,
		// or any other, is refused before anything runs.
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"message": "this route serves no such model", "type": "invalid_request_error", "code": "model_not_found"}})
		return
	}
	id := "chatcmpl-" + randHex(12)
	created := time.Now().Unix()
	d := server.Detached{Profile: p.Name, Source: "gateway", Title: "gateway", History: msgs[:len(msgs)-1], Text: msgs[len(msgs)-1].Content,
		Member: "gateway:" + r.RemoteAddr}
	if !req.Stream {
		answer, err := g.opts.Server.RunDetached(r.Context(), d)
		if err != nil && g.opts.Faults.Has(faults.GatewayFailoverForeign) {
			answer, err = g.failoverForeign(r.Context(), d, err)
		}
		if g.refused(r.Context(), w, err) {
			return
		}
		if err != nil {
			apiError(w, http.StatusBadGateway, "turn failed: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
		})
		return
	}
	flusher, _ := w.(http.Flusher)
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	// The stream starts once the turn holds its slot, so a turn refused
	// for load is still a plain 429.
	started := false
	d.OnStart = func() {
		started = true
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	}
	d.Sink = func(typ string, payload any) {
		if typ != "message.delta" {
			return
		}
		if p, ok := payload.(map[string]any); ok {
			if text, _ := p["text"].(string); text != "" {
				chunk(map[string]any{"content": text}, nil)
			}
		}
	}
	_, err = g.opts.Server.RunDetached(r.Context(), d)
	if !started {
		if !g.refused(r.Context(), w, err) {
			apiError(w, http.StatusBadGateway, "turn failed: "+err.Error())
		}
		return
	}
	if err != nil {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": "turn failed: " + err.Error(), "type": "server_error"}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	} else {
		chunk(map[string]any{}, "stop")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// failoverForeign is the seeded fault GatewayFailoverForeign: a failed
// turn is played again in the first other profile, on its provider.
func (g *Gateway) failoverForeign(ctx context.Context, d server.Detached, failed error) (string, error) {
	list, err := g.opts.Homes.List()
	if err != nil {
		return "", failed
	}
	for _, p := range list {
		if p.Name == d.Profile || (d.Profile == "" && p.Name == profile.LaunchName) {
			continue
		}
		d.Profile = p.Name
		return g.opts.Server.RunDetached(ctx, d)
	}
	return "", failed
}

// authorize reports whether the Authorization header carries the named
// profile's gateway key. An unknown profile, or one without a key, is
// compared with a key no one has, so it answers no differently; only an
// unreadable .env of an existing profile is an error.
func (g *Gateway) authorize(name, header string) (profile.Profile, bool, error) {
	got, hasBearer := strings.CutPrefix(header, "Bearer ")
	got = strings.TrimSpace(got)
	want := ""
	p, err := g.opts.Homes.Get(name)
	if err == nil {
		env, err := p.LoadEnv()
		if err != nil {
			return p, false, err
		}
		if want, _ = env.Lookup(KeyEnv); want == "" {
			g.opts.Log.Info("gateway: refused a request for a profile without "+KeyEnv, "profile", p.Name)
		}
	}
	if want == "" {
		want = "no key:" + randHex(16) // matches no header
	}
	match := subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
	return p, match && hasBearer, nil
}

// refused answers a turn refused for load (429 with Retry-After, held
// back for the refusal delay like the websocket's 4290) or for shutdown
// (503); it reports whether it answered.
func (g *Gateway) refused(ctx context.Context, w http.ResponseWriter, err error) bool {
	switch {
	case errors.Is(err, server.ErrTooBusy):
		t := time.NewTimer(g.opts.Server.Limits().RefusalDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		secs := int(g.opts.Server.Limits().RetryAfter.Round(time.Second) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(1, secs)))
		apiError(w, http.StatusTooManyRequests, err.Error())
		return true
	case errors.Is(err, server.ErrShuttingDown):
		apiError(w, http.StatusServiceUnavailable, "agentd is shutting down")
		return true
	}
	return false
}

// route maps a path to a profile name ("" = launch).
func route(path string) (string, bool) {
	if path == "/v1/chat/completions" {
		return "", true
	}
	rest, ok := strings.CutPrefix(path, "/p/")
	if !ok {
		return "", false
	}
	name, tail, ok := strings.Cut(rest, "/")
	if !ok || tail != "v1/chat/completions" || profile.ValidName(name) != nil {
		return "", false
	}
	return name, true
}

// contentText flattens a message content (a string or an array of parts).
func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, part := range v {
			if m, ok := part.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": http.StatusText(status)}})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
