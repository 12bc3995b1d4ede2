package llmgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/internal/dotpath"
)

// FetchListener is the harness's own canary listener on loopback for the
// fetch probes: every URL it hands out (one path per tenant and probe)
// answers a body the caller chose, and every request it receives is
// recorded. A gateway that fetches a URL a tenant gave it shows up here.
//
//	l, err := llmgw.NewFetchListener()
//	defer l.Close()
//	u := l.URL("alpha", "1", "fetched-body-alpha-0123456789")
//	... a route with u in its url field ...
//	hits := l.HitsOn(u)
type FetchListener struct {
	ln   net.Listener
	srv  *http.Server
	base string
	done chan struct{}

	mu     sync.Mutex
	bodies map[string]string // path -> answer
	hits   []FetchHit
	closed bool
}

// FetchHit is one request the listener received.
type FetchHit struct {
	Method, Path, Remote, UserAgent string
	Time                            time.Time
	// Query, Header and Body are the rest of the request (its body up to
	// 64 KiB): what the gateway sent along, scanned for other tenants'
	// data.
	Query  string
	Header http.Header
	Body   []byte
}

// Content is everything the request carried, as text: its query, each
// header and its body.
func (h FetchHit) Content() []byte {
	var b strings.Builder
	b.WriteString(h.Method + " " + h.Path + "?" + h.Query + "\n")
	for _, k := range slices.Sorted(maps.Keys(h.Header)) {
		for _, v := range h.Header[k] {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(h.Body)
	return []byte(b.String())
}

// NewFetchListener starts a listener on 127.0.0.1 (a free port).
func NewFetchListener() (*FetchListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fetch listener: %w", err)
	}
	l := &FetchListener{ln: ln, base: "http://" + ln.Addr().String(), bodies: map[string]string{}, done: make(chan struct{})}
	l.srv = &http.Server{Handler: http.HandlerFunc(l.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(l.done)
		_ = l.srv.Serve(ln)
	}()
	return l, nil
}

func (l *FetchListener) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	l.mu.Lock()
	l.hits = append(l.hits, FetchHit{Method: r.Method, Path: r.URL.Path, Remote: r.RemoteAddr, UserAgent: r.UserAgent(), Time: time.Now(),
		Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	answer, ok := l.bodies[r.URL.Path]
	l.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(answer))
}

// Base is the listener's base URL (http://127.0.0.1:PORT).
func (l *FetchListener) Base() string { return l.base }

// URL registers a path for tenant and probe that answers body, and
// returns its URL.
func (l *FetchListener) URL(tenant, probe, body string) string {
	p := "/canary-fetch/" + url.PathEscape(tenant) + "/" + url.PathEscape(probe)
	l.mu.Lock()
	l.bodies[p] = body
	l.mu.Unlock()
	return l.base + p
}

// HitsOn lists the requests received on u's path.
func (l *FetchListener) HitsOn(u string) []FetchHit {
	p := strings.TrimPrefix(u, l.base)
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []FetchHit
	for _, h := range l.hits {
		if h.Path == p {
			out = append(out, h)
		}
	}
	return out
}

// Hits lists every request received, in order.
func (l *FetchListener) Hits() []FetchHit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]FetchHit(nil), l.hits...)
}

// Close stops the listener and returns once its server is gone; safe
// twice.
func (l *FetchListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.srv.Shutdown(ctx)
	if err != nil {
		_ = l.srv.Close()
	}
	<-l.done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("fetch listener: close: %w", err)
	}
	return nil
}

// SetURLField sets one url field of a filled route (path and JSON body) to
// u: "?name" sets the query parameter name of path; any other field is a
// dotted path in the JSON body (objects made as needed; an empty body is
// {}).
func SetURLField(path, body, field, u string) (string, string, error) {
	if name, ok := strings.CutPrefix(field, "?"); ok {
		p, q, _ := strings.Cut(path, "?")
		vals, err := url.ParseQuery(q)
		if err != nil {
			return "", "", fmt.Errorf("url field %s: query of %s: %w", field, path, err)
		}
		vals.Set(name, u)
		return p + "?" + vals.Encode(), body, nil
	}
	doc := map[string]any{}
	if strings.TrimSpace(body) != "" {
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			return "", "", fmt.Errorf("url field %s: the route's body is not a JSON object: %w", field, err)
		}
	}
	n, err := dotpath.SetAll(doc, field, u)
	if err != nil {
		return "", "", fmt.Errorf("url field %s: %w", field, err)
	}
	if n == 0 {
		return "", "", fmt.Errorf("url field %s: no place in the route's body (an array it indexes is empty)", field)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", "", fmt.Errorf("url field %s: %w", field, err)
	}
	return path, string(b), nil
}
