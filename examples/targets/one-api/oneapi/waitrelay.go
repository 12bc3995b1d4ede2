package oneapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// WaitRelay waits until one-api's relay serves a tenant: a chat
// completion with its gateway key and model is answered 2xx. With a Redis
// (REDIS_CONN_STRING), one-api routes the relay from a copy of the
// channels in each node's memory that it reloads from the database only
// every SYNC_FREQUENCY seconds, so a channel the provisioner just made is
// answered "no available channel" (HTTP 503) until the next reload. It
// polls every every until ctx ends, and then says what one-api last
// answered.
func WaitRelay(ctx context.Context, c *Client, a Access, every time.Duration) error {
	body, err := json.Marshal(map[string]any{
		"model":    a.Models[0],
		"messages": []map[string]string{{"role": "user", "content": "provisioning check: is my channel served?"}},
	})
	if err != nil {
		return err
	}
	last := "no answer yet"
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+a.BasePath+"/chat/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+a.Key)
		resp, err := c.HTTP.Do(req)
		if err == nil {
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %.300s", resp.StatusCode, raw)
		} else if ctx.Err() == nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the relay never served model %s with its key (one-api reloads its channels every SYNC_FREQUENCY seconds): last %s: %w", a.Models[0], last, ctx.Err())
		case <-tick.C:
		}
	}
}
