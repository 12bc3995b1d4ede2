package remote

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultHealth is the health path of a remote: block that gives none
// (agentd's: public, 200 once serving).
const DefaultHealth = "/api/health"

// HealthURL is the server's health URL: base (the target's url) and the
// block's health path.
func (s *Spec) HealthURL(base string) string {
	h := DefaultHealth
	if s != nil && s.Health != "" {
		h = s.Health
	}
	return strings.TrimRight(base, "/") + h
}

// WaitHealth polls url until it answers 200 (up) or stops answering 200
// (down), or ctx ends; the error then says what the last look saw.
func WaitHealth(ctx context.Context, url string, up bool) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 5 * time.Second}
	want := "to answer 200"
	if !up {
		want = "to stop answering"
	}
	last := "no look yet"
	for {
		ok, seen := healthy(ctx, client, url)
		last = seen
		if ok == up {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited for %s %s: %w (last: %s)", url, want, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func healthy(ctx context.Context, client *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK, resp.Status
}
