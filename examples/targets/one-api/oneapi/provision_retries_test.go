package oneapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// flakyProvider is a tenant's upstream that fails (HTTP 500) the first
// request of every chat (told apart by the marker in its text) and
// answers the next one, recording each request's chat marker.
type flakyProvider struct {
	*httptest.Server
	tenant, key, model string

	mu    sync.Mutex
	tries map[string]int // chat marker -> requests seen
	all   []string       // every request's body
}

func newFlakyProvider(t *testing.T, tenant string) *flakyProvider {
	p := &flakyProvider{tenant: tenant, key: "provider-key-" + tenant + "-0123456789", model: "model-" + tenant + "-0123456789", tries: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") != p.key {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided"}}`)
			return
		}
		marker := chatMarker(string(body))
		p.mu.Lock()
		p.all = append(p.all, string(body))
		p.tries[marker]++
		n := p.tries[marker]
		p.mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"message":"upstream failure (retry probe)","type":"server_error"}}`)
			return
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"answer of %s's provider to %s"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, p.model, p.tenant, marker)
	}))
	t.Cleanup(p.Close)
	return p
}

// chatMarker is the "chat-N" word of a request body ("" when none).
func chatMarker(body string) string {
	i := strings.Index(body, "chat-")
	if i < 0 {
		return ""
	}
	j := i + len("chat-")
	for j < len(body) && body[j] >= '0' && body[j] <= '9' {
		j++
	}
	return body[i:j]
}

func (p *flakyProvider) bodies() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.all...)
}

// TestProvisionRetriesOneAPI provisions two tenants in a real one-api with
// retries on: the option RetryTimes reads back as set, each tenant has a
// fallback channel of its own group, and a chat whose first upstream call
// fails is answered after a retry, by its own provider; no request of a
// tenant's reaches the other's provider. The control: with RetryTimes set
// back to 0 on the same instance, every such chat fails, so the answers
// before came from one-api's retries.
func TestProvisionRetriesOneAPI(t *testing.T) {
	in := startOneAPI(t)
	provs := map[string]*flakyProvider{}
	r := Roster{Version: 1}
	for _, n := range []string{"alpha", "beta"} {
		p := newFlakyProvider(t, n)
		provs[n] = p
		r.Tenants = append(r.Tenants, RosterTenant{Name: n, BaseURL: p.URL + "/v1", Key: p.key, Model: p.model})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := NewClient(in.url, in.rootToken)
	out, err := ProvisionWith(ctx, root, r, Options{RetryTimes: DefaultRetryTimes})
	if err != nil {
		t.Fatal(err)
	}
	var opts []Option
	if err := root.Call(ctx, http.MethodGet, "/api/option/", nil, &opts); err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, o := range opts {
		if o.Key == "RetryTimes" {
			got = o.Value
		}
	}
	if want := fmt.Sprint(DefaultRetryTimes); got != want {
		t.Errorf("option RetryTimes = %q, want %s", got, want)
	}
	for n, a := range out.Tenants {
		fb := a.IDs["fallback_channel"]
		if fb == "" || fb == a.IDs["channel"] || a.IDs["group"] != Group(n) {
			t.Fatalf("tenant %s: ids %v: want a fallback channel of its own and group %s", n, a.IDs, Group(n))
		}
		var ch struct {
			Group  string `json:"group"`
			Models string `json:"models"`
		}
		if err := root.Call(ctx, http.MethodGet, "/api/channel/"+fb, nil, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Group != Group(n) || ch.Models != provs[n].model {
			t.Errorf("tenant %s's fallback channel %s serves group %q, models %q; want %s, %s", n, fb, ch.Group, ch.Models, Group(n), provs[n].model)
		}
	}

	// With retries: a chat whose first call failed may be answered after a
	// retry (one draws the failed channel again and is spent: not every
	// chat recovers, but of ten some must).
	const chats = 10
	recovered := 0
	alpha := out.Tenants["alpha"]
	for i := 0; i < chats; i++ {
		marker := fmt.Sprintf("chat-%d", i)
		status, body := relay(t, in, http.MethodPost, "/v1/chat/completions", alpha.Key,
			fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello %s"}]}`, provs["alpha"].model, marker))
		switch {
		case status == http.StatusOK && strings.Contains(body, "answer of alpha's provider to "+marker):
			recovered++
		case status == http.StatusOK:
			t.Errorf("chat %d of alpha answered by someone else: %s", i, body)
		}
	}
	if recovered == 0 {
		t.Errorf("none of alpha's %d chats was answered after its first upstream call failed: one-api's retries did not run", chats)
	}
	if b := provs["beta"].bodies(); len(b) != 0 {
		t.Errorf("beta's provider got %d request(s) while only alpha chatted: %.300q", len(b), b)
	}

	// The control: retries off, the same chats all fail.
	if err := setRetries(ctx, root, 0); err != nil {
		t.Fatal(err)
	}
	for i := chats; i < chats+3; i++ {
		marker := fmt.Sprintf("chat-%d", i)
		status, body := relay(t, in, http.MethodPost, "/v1/chat/completions", alpha.Key,
			fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello %s"}]}`, provs["alpha"].model, marker))
		if status == http.StatusOK {
			t.Errorf("with RetryTimes 0, chat %d of alpha was answered (HTTP 200 %s): the recovery above was not one-api's retries", i, body)
		}
	}
	t.Logf("with retries, %d of %d chats recovered after a failed first call", recovered, chats)
}
