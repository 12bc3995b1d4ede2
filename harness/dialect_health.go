// A target's readiness: the address a ready line names, and the health
// check of a serve backend.

package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PicksPort reports whether the harness picks the port of a backend
// started from argv itself: the command takes {port} and the ready line
// names no port (a server that refuses --port 0 and prints no port). The
// harness then passes a free loopback port, and the backend is ready once
// its ready line is printed and its health check answers.
func (t *Target) PicksPort(argv []string) bool {
	if t.ReadyRE() != nil && t.ReadyRE().NumSubexp() > 0 {
		return false
	}
	for _, a := range argv {
		if strings.Contains(a, "{port}") {
			return true
		}
	}
	return false
}

// FreePort is a loopback port free a moment ago, for a backend the harness
// picks the port of (a start that loses it fails at once, as any start).
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}

// ReadyAddr is the host:port a ready line's match names: the groups named
// host and port when the line has them, else group 1 as the port (one
// group) or groups 1 and 2 as host and port; host is given when the line
// names none.
func (t *Target) ReadyAddr(m []string, host string) string {
	re := t.ReadyRE()
	h, p := "", ""
	for i, name := range re.SubexpNames() {
		switch {
		case i >= len(m):
		case name == "host":
			h = m[i]
		case name == "port":
			p = m[i]
		}
	}
	if p == "" {
		switch re.NumSubexp() {
		case 1:
			p = m[1]
		default:
			h, p = m[1], m[2]
		}
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = host
	}
	return net.JoinHostPort(h, p)
}

// WaitHealthy polls the dialect's health check at base with token until it
// answers 200, failing with the last status and body seen. No health check
// returns at once.
func (t *Target) WaitHealthy(ctx context.Context, base, token string) error {
	h := t.Dialect.Health
	if h == nil {
		return nil
	}
	last := "no answer yet"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+h.Path, nil)
		if err != nil {
			return fmt.Errorf("health check %s: %w", h.Path, err)
		}
		switch strings.ToLower(h.Auth) {
		case "", "none":
		case "bearer":
			req.Header.Set("Authorization", "Bearer "+token)
		case "query":
			q := req.URL.Query()
			q.Set("token", token)
			req.URL.RawQuery = q.Encode()
		default:
			req.Header.Set(h.Auth, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else if ctx.Err() == nil || last == "no answer yet" {
			last = err.Error() // (a request the deadline cut keeps the answer before it)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("health check GET %s (auth %s) never answered 200: last %s: %w", h.Path, h.Auth, last, ctx.Err())
		case <-tick.C:
		}
	}
}
