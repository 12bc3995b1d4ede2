package oneapi

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeRoster(t *testing.T) {
	good := `{"version": 1, "launch": "alpha", "journal": "j", "tenants": [
	  {"name": "alpha", "tag": "0123456789", "base_url": "http://127.0.0.1:1/v1", "key": "k-a", "model": "m-a", "canaries": []},
	  {"name": "beta", "base_url": "http://127.0.0.1:2/v1", "key": "k-b", "model": "m-b"}]}`
	r, err := DecodeRoster("good", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tenants) != 2 || r.Tenants[1].Key != "k-b" || r.Tenants[0].BaseURL != "http://127.0.0.1:1/v1" {
		t.Errorf("decoded %+v", r)
	}
	for _, c := range []struct{ name, json, want string }{
		{"not json", `{`, "unexpected end"},
		{"version", `{"version": 2, "tenants": [{"name": "a", "base_url": "u", "key": "k", "model": "m"}]}`, "version 2, want 1"},
		{"empty", `{"version": 1, "tenants": []}`, "no tenant"},
		{"no key", `{"version": 1, "tenants": [{"name": "a", "base_url": "u", "model": "m"}]}`, `tenant 0 ("a"): want name, base_url, key and model`},
		{"comma", `{"version": 1, "tenants": [{"name": "a,b", "base_url": "u", "key": "k", "model": "m"}]}`, "comma or space"},
		{"twice", `{"version": 1, "tenants": [{"name": "a", "base_url": "u", "key": "k", "model": "m"}, {"name": "a", "base_url": "u", "key": "k", "model": "m"}]}`, `"a" listed twice`},
	} {
		_, err := DecodeRoster(c.name, []byte(c.json))
		if !errors.Is(err, ErrRoster) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "roster "+c.name) {
			t.Errorf("%s: %v, want ErrRoster naming the roster and %q", c.name, err, c.want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := Username("alpha"); got != "alpha" {
		t.Errorf("Username(alpha) = %q", got)
	}
	long := Username("a-rather-long-tenant-name")
	if len(long) > 12 || !strings.HasPrefix(long, "a-rathe-") || long != Username("a-rather-long-tenant-name") || long == Username("a-rather-long-tenant-name2") {
		t.Errorf("Username of a long name: %q (want at most 12 characters, stable, distinct)", long)
	}
	if got := Group("default"); got != "tc-default" {
		t.Errorf("Group(default) = %q, want tc-default (not one-api's own default group)", got)
	}
	for in, want := range map[string]string{"http://h:1/v1": "http://h:1", "http://h:1/v1/": "http://h:1", "http://h:1/p": "http://h:1/p"} {
		if got := UpstreamBase(in); got != want {
			t.Errorf("UpstreamBase(%q) = %q, want %q", in, got, want)
		}
	}
}
