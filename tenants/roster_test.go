package tenants

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

func chat(t *testing.T, base, key string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	req, _ := http.NewRequest("POST", base+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestRosterRoundTripAndJournalledRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jpath := filepath.Join(dir, "journal.jsonl")
	f, err := os.Create(jpath)
	require.NoError(t, err)
	defer f.Close()
	// The staging side: providers journaling to a file.
	stage, err := Build(filepath.Join(dir, "stage"), Options{Names: []string{"default", "alpha"}, Journal: &syncio.Writer{W: f},
		AdvertiseHost: "127.0.0.1"})
	require.NoError(t, err)
	defer stage.Close()
	a := stage.Get("alpha")
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/v1$`, a.ProviderURL())
	require.Equal(t, 200, chat(t, a.ProviderURL(), a.ProviderKey()), "a request from before the run")

	rpath := filepath.Join(dir, "roster.json")
	require.NoError(t, WriteRoster(rpath, stage.Roster(jpath)))
	r, err := ReadRoster(rpath)
	require.NoError(t, err)
	assert.Equal(t, "default", r.Launch)

	// The run side: same tenants, providers elsewhere.
	run, err := FromRoster(filepath.Join(dir, "run"), r, Layout{}, "")
	require.NoError(t, err)
	ra := run.Get("alpha")
	require.NotNil(t, ra)
	assert.Nil(t, ra.Provider)
	assert.True(t, ra.HasProvider())
	assert.Equal(t, a.Canaries(), ra.Canaries())
	assert.Equal(t, a.Workdirs(), ra.Workdirs(), "the target's workdir, not one of the run's")
	assert.Empty(t, ra.Requests(), "records from before the run are not this run's")
	assert.Equal(t, 401, chat(t, a.ProviderURL(), stage.Get("default").ProviderKey()))
	assert.Equal(t, 200, chat(t, stage.Get("default").ProviderURL(), stage.Get("default").ProviderKey()))
	recs := ra.Requests()
	require.Len(t, recs, 1)
	assert.Equal(t, stage.Get("default").ProviderKey(), recs[0].Auth, "the foreign key is on the record")
	assert.Len(t, run.Get("default").Requests(), 1)
	require.NoError(t, ra.RequestsErr())

	_, err = FromRoster(filepath.Join(dir, "run2"), r, Layout{}, filepath.Join(dir, "missing.jsonl"))
	assert.ErrorContains(t, err, "missing.jsonl")
}

func TestReadRosterRefusesTamperedFiles(t *testing.T) {
	t.Parallel()
	s := buildFiles(t, "default", "alpha")
	for _, tn := range s.Tenants {
		tn.Provider = nil
	}
	good := s.Roster("/j")
	for i := range good.Tenants {
		good.Tenants[i].BaseURL = "http://x/v1"
	}
	cases := map[string]func(r *Roster){
		"version":     func(r *Roster) { r.Version = 9 },
		"no tenant":   func(r *Roster) { r.Tenants = nil },
		"two launch":  func(r *Roster) { r.Tenants[1].Launch = true },
		"canary":      func(r *Roster) { r.Tenants[0].Canaries[2].Value = "env-marker-default-0000000000" },
		"key":         func(r *Roster) { r.Tenants[1].Key = r.Tenants[0].Key },
		"bad name":    func(r *Roster) { r.Tenants[1].Name = "Alpha" },
		"no base url": func(r *Roster) { r.Tenants[0].BaseURL = "" },
		"workdir":     func(r *Roster) { r.Tenants[0].Workdir = "/tmp/elsewhere" },
	}
	for name, mutate := range cases {
		var r Roster
		data, _ := json.Marshal(good)
		require.NoError(t, json.Unmarshal(data, &r))
		mutate(&r)
		p := filepath.Join(t.TempDir(), "roster.json")
		require.NoError(t, WriteRoster(p, r))
		_, err := ReadRoster(p)
		assert.ErrorIs(t, err, ErrRoster, name)
	}
	p := filepath.Join(t.TempDir(), "roster.json")
	require.NoError(t, WriteRoster(p, good))
	_, err := ReadRoster(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(`{"version":1,"surprise":true}`), 0o600))
	_, err = ReadRoster(p)
	assert.ErrorIs(t, err, ErrRoster)
}
