package oneapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestDecodeDeprovision(t *testing.T) {
	good := `{"step": "disable", "tenant": "alpha", "access": {"key": "k", "headers": {"Authorization": "a"},
	  "credentials": {"session": {"Cookie": "s=1"}}, "ids": {"user": "3", "token": "7", "channel": "2"}}}`
	r, err := DecodeDeprovision("good", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if r.Step != StepDisable || r.Tenant != "alpha" || r.Access.IDs["user"] != "3" || r.Access.IDs["channel"] != "2" {
		t.Errorf("decoded %+v", r)
	}
	for _, c := range []struct{ name, json, want string }{
		{"not json", `{`, "unexpected end"},
		{"step", `{"step": "pause", "tenant": "a", "access": {"ids": {"user": "1", "channel": "1"}}}`, `step "pause"`},
		{"tenant", `{"step": "delete", "access": {"ids": {"user": "1", "channel": "1"}}}`, "no tenant"},
		{"user", `{"step": "delete", "tenant": "a", "access": {"ids": {"user": "x", "channel": "1"}}}`, `access.ids.user "x"`},
		{"channel", `{"step": "delete", "tenant": "a", "access": {"ids": {"user": "1"}}}`, `access.ids.channel ""`},
	} {
		_, err := DecodeDeprovision(c.name, []byte(c.json))
		if !errors.Is(err, ErrDeprovision) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "request "+c.name) {
			t.Errorf("%s: %v, want ErrDeprovision naming the request and %q", c.name, err, c.want)
		}
	}
}

// TestDeprovisionOneAPI offboards a tenant of a real one-api: after
// disable its gateway token and access token are refused and its
// neighbour is still served; after delete its channel is gone and a
// tenant provisioned again under its name gets a new user and channel,
// served by its own provider.
func TestDeprovisionOneAPI(t *testing.T) {
	in := startOneAPI(t)
	provs := map[string]*provider{}
	var r Roster
	r.Version = 1
	for _, n := range []string{"alpha", "beta"} {
		p := newProvider(t, n)
		provs[n] = p
		r.Tenants = append(r.Tenants, RosterTenant{Name: n, BaseURL: p.URL + "/v1", Key: p.key, Model: p.model})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := NewClient(in.url, in.rootToken)
	out, err := Provision(ctx, root, r)
	if err != nil {
		t.Fatal(err)
	}
	alpha, beta := out.Tenants["alpha"], out.Tenants["beta"]
	served := func(who string, a Access, p *provider) bool {
		status, body := relay(t, in, "POST", "/v1/chat/completions", a.Key, chat(p.model))
		return status == http.StatusOK && strings.Contains(body, "answer of "+who+"'s provider")
	}
	if !served("alpha", alpha, provs["alpha"]) {
		t.Fatal("alpha is not served before offboarding: the refusals below would mean nothing")
	}
	if err := Deprovision(ctx, root, DeprovisionRequest{Step: StepDisable, Tenant: "alpha", Access: alpha}); err != nil {
		t.Fatal(err)
	}
	before := len(provs["alpha"].requests())
	if status, body := relay(t, in, "POST", "/v1/chat/completions", alpha.Key, chat(provs["alpha"].model)); status/100 == 2 {
		t.Errorf("alpha's token after its disable: HTTP %d %s, want refused", status, body)
	}
	if err := root.As(alpha.Headers["Authorization"]).Call(ctx, "GET", "/api/user/self", nil, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("alpha's access token after its disable: %v, want refused", err)
	}
	if n := len(provs["alpha"].requests()); n != before {
		t.Errorf("alpha's provider got %d requests after its disable", n-before)
	}
	if !served("beta", beta, provs["beta"]) {
		t.Error("beta is not served after alpha's disable")
	}
	if err := Deprovision(ctx, root, DeprovisionRequest{Step: StepDelete, Tenant: "alpha", Access: alpha}); err != nil {
		t.Fatal(err)
	}
	if err := root.Call(ctx, "GET", "/api/channel/"+alpha.IDs["channel"], nil, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("alpha's channel after its delete: %v, want gone", err)
	}
	again := newProvider(t, "alpha-again")
	r2 := Roster{Version: 1, Tenants: []RosterTenant{{Name: "alpha", BaseURL: again.URL + "/v1", Key: again.key, Model: again.model}}}
	out2, err := Provision(ctx, root, r2)
	if err != nil {
		t.Fatalf("provision again under alpha's name: %v", err)
	}
	a2 := out2.Tenants["alpha"]
	if a2.IDs["user"] == alpha.IDs["user"] || a2.IDs["channel"] == alpha.IDs["channel"] || a2.Key == alpha.Key {
		t.Errorf("the new alpha reuses the old one's user, channel or key: %v vs %v", a2.IDs, alpha.IDs)
	}
	if !served("alpha-again", a2, again) {
		t.Error("the new alpha is not served by its own provider")
	}
	if status, body := relay(t, in, "POST", "/v1/chat/completions", alpha.Key, chat(again.model)); status/100 == 2 {
		t.Errorf("the old alpha's token after a new alpha: HTTP %d %s, want refused", status, body)
	}
}
