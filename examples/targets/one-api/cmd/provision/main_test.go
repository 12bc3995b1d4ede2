package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenantcanary/tenantcanary/examples/targets/one-api/oneapi"
)

func TestRunRefusesBadInput(t *testing.T) {
	t.Setenv("GATEWAY_URL", "")
	t.Setenv("ROOT_TOKEN", "")
	var out bytes.Buffer
	if err := run(nil, strings.NewReader("{}"), &out); err == nil || !strings.Contains(err.Error(), "GATEWAY_URL") {
		t.Errorf("no GATEWAY_URL: %v", err)
	}
	t.Setenv("GATEWAY_URL", "http://127.0.0.1:1")
	t.Setenv("ROOT_TOKEN", "t")
	if err := run(nil, strings.NewReader(`{"version": 1, "tenants": []}`), &out); !errors.Is(err, oneapi.ErrRoster) {
		t.Errorf("an empty roster on stdin: %v, want ErrRoster", err)
	}
	t.Setenv("ROSTER", "")
	if err := run(nil, strings.NewReader(""), &out); err == nil || !strings.Contains(err.Error(), "no roster") {
		t.Errorf("nothing on stdin, no ROSTER: %v", err)
	}
	path := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(path, []byte(`{"version": 3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ROSTER", path)
	if err := run(nil, strings.NewReader(""), &out); !errors.Is(err, oneapi.ErrRoster) || !strings.Contains(err.Error(), path) {
		t.Errorf("a bad roster in $ROSTER: %v, want ErrRoster naming %s", err, path)
	}
	if err := run([]string{"extra"}, strings.NewReader(""), &out); err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("an extra argument: %v", err)
	}
	if err := run([]string{"deprovision"}, strings.NewReader(`{"step": "pause", "tenant": "alpha", "access": {"ids": {"user": "2", "channel": "1"}}}`), &out); !errors.Is(err, oneapi.ErrDeprovision) {
		t.Errorf("an unknown deprovision step: %v, want ErrDeprovision", err)
	}
	t.Setenv("RETRIES", "yes")
	if err := run(nil, strings.NewReader(`{"version": 1, "tenants": [{"name": "a", "base_url": "http://127.0.0.1:1/v1", "key": "k", "model": "m"}]}`), &out); err == nil || !strings.Contains(err.Error(), `RETRIES="yes"`) {
		t.Errorf("RETRIES=yes: %v, want a refusal naming it", err)
	}
	if out.Len() != 0 {
		t.Errorf("stdout after refusals: %q, want nothing", out.String())
	}
}
