package cron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

func TestParseEvery(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"every 1h": time.Hour, "90s": 90 * time.Second, " every 2m30s ": 150 * time.Second} {
		got, err := ParseEvery(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "every", "daily", "every 10ms", "every -1h"} {
		_, err := ParseEvery(bad)
		require.ErrorIs(t, err, ErrBadSchedule, bad)
	}
}

type recorder struct {
	mu   sync.Mutex
	runs []string // profile/job
	fail map[string]bool
}

func (r *recorder) RunJob(ctx context.Context, p profile.Profile, job Job) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, p.Name+"/"+job.Name)
	if r.fail[job.Name] {
		return "", errors.New("provider down")
	}
	return "answer for " + job.Prompt, nil
}

// makeHome is a profile whose home exists (and nothing in it): cron never
// makes a home, only folders inside one.
func makeHome(t *testing.T, root, name string) profile.Profile {
	t.Helper()
	p := profile.Profile{Name: name, Home: filepath.Join(root, name)}
	require.NoError(t, os.Mkdir(p.Home, 0o700))
	return p
}

func TestTriggerTickRecordsAndWritesOutput(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := makeHome(t, root, "a")
	b := makeHome(t, root, "b")
	now := time.Now()
	ja, err := ForProfile(a).Create("ja", "prompt-a", "every 1h", now)
	require.NoError(t, err)
	jb, err := ForProfile(b).Create("jb", "prompt-b", "every 1h", now)
	require.NoError(t, err)
	jbad, err := ForProfile(b).Create("bad", "prompt-bad", "every 1h", now)
	require.NoError(t, err)

	rec := &recorder{fail: map[string]bool{"bad": true}}
	require.Empty(t, Tick(context.Background(), []profile.Profile{a, b}, now, rec), "nothing is due yet")

	_, err = ForProfile(a).Trigger(ja.ID, now)
	require.NoError(t, err)
	_, err = ForProfile(b).Trigger(jbad.ID, now)
	require.NoError(t, err)
	_, err = ForProfile(b).Trigger("nope", now)
	require.ErrorIs(t, err, ErrUnknownJob)

	res := Tick(context.Background(), []profile.Profile{a, b}, now.Add(time.Second), rec)
	require.Len(t, res, 2)
	require.Equal(t, []string{"a/ja", "b/bad"}, rec.runs, "each job ran once, in its own profile; jb was not due")
	require.NoError(t, res[0].Err)
	require.Error(t, res[1].Err, "a failing job is recorded and the tick goes on")

	out, err := os.ReadFile(res[0].Output)
	require.NoError(t, err)
	require.Contains(t, string(out), "answer for prompt-a")
	require.Equal(t, filepath.Join(a.Home, "cron", "output", ja.ID), filepath.Dir(res[0].Output))

	list, err := ForProfile(b).List()
	require.NoError(t, err)
	for _, j := range list {
		switch j.ID {
		case jbad.ID:
			require.Equal(t, "error", j.LastStatus)
			require.Contains(t, j.LastError, "provider down")
			require.True(t, j.NextRun.After(now.Add(time.Minute)), "claimed jobs move on")
		case jb.ID:
			require.Nil(t, j.LastRun)
		}
	}
	require.Empty(t, Tick(context.Background(), []profile.Profile{a, b}, now.Add(2*time.Second), rec), "a fired job is not due again until its interval passes")
}

// A tick that finds nothing due touches no file: a ticker over every
// profile may write only where a job actually ran.
func TestClaimWithNothingDueWritesNothing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	idle := ForProfile(makeHome(t, root, "idle"))
	due, err := idle.Claim(time.Now())
	require.NoError(t, err)
	require.Empty(t, due)
	require.NoDirExists(t, idle.Dir, "no cron folder made for a profile without jobs")

	busy := ForProfile(makeHome(t, root, "busy"))
	job, err := busy.Create("j", "p", "every 1h", time.Now())
	require.NoError(t, err)
	before, err := os.ReadFile(busy.path())
	require.NoError(t, err)
	entries, err := os.ReadDir(busy.Dir)
	require.NoError(t, err)
	due, err = busy.Claim(time.Now())
	require.NoError(t, err)
	require.Empty(t, due)
	after, err := os.ReadFile(busy.path())
	require.NoError(t, err)
	require.Equal(t, before, after)
	again, err := os.ReadDir(busy.Dir)
	require.NoError(t, err)
	require.Equal(t, len(entries), len(again))

	_, err = busy.Trigger(job.ID, time.Now())
	require.NoError(t, err)
	due, err = busy.Claim(time.Now().Add(time.Second))
	require.NoError(t, err)
	require.Len(t, due, 1, "positive control: a due job is claimed")
}

// Ids and names a tenant writes into its own jobs.json are never joined
// into a path: a job whose id or name is outside the allow-list is skipped
// (and kept in the file as it was), cron.trigger names the rule, and the
// output of a job is written only under the home's own cron/output. With
// unchecked-job-ids seeded, the id is joined and the output lands outside
// (the positive control).
// An id is 1-64 characters and a name 1-128: the bounds themselves pass,
// one more fails.
func TestJobIDAndNameLengths(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckID("a"+strings.Repeat("b", 63)))
	require.ErrorIs(t, CheckID("a"+strings.Repeat("b", 64)), ErrBadJob)
	require.NoError(t, CheckName("a"+strings.Repeat(" .", 63)+"b"))
	require.ErrorIs(t, CheckName("a"+strings.Repeat(" .", 63)+"bc"), ErrBadJob)
	require.ErrorIs(t, CheckName(" a"), ErrBadJob, "a name starts with a letter or digit")
}

func TestJobIDsNeverLeaveTheHome(t *testing.T) {
	t.Parallel()
	bad := []string{"../../x", "a/b", "..", ".", "/abs/olute", "", "x\x00y", ".hidden", "a b"}
	for _, seeded := range []bool{false, true} {
		root := t.TempDir()
		p := makeHome(t, root, "mine")
		if seeded {
			p.Faults = faults.Set{faults.UncheckedJobIDs: true}
		}
		var entries []string
		for _, id := range append([]string{"good-1"}, bad...) {
			raw, err := json.Marshal(map[string]any{"id": id, "name": "n", "prompt": "p", "schedule": "every 1h", "enabled": true, "next_run": time.Unix(0, 0)})
			require.NoError(t, err)
			entries = append(entries, string(raw))
		}
		require.NoError(t, os.MkdirAll(filepath.Join(p.Home, "cron"), 0o700))
		doc := `{"jobs":[` + strings.Join(entries, ",") + `]}`
		require.NoError(t, os.WriteFile(filepath.Join(p.Home, "cron", "jobs.json"), []byte(doc), 0o600))

		jobs := ForProfile(p)
		var logged bytes.Buffer
		jobs.Log = slog.New(slog.NewTextHandler(&logged, nil))
		list, err := jobs.List()
		require.NoError(t, err)
		due, err := jobs.Claim(time.Now())
		require.NoError(t, err)
		if !seeded {
			require.Len(t, list, 1, "only the good job is listed")
			require.Contains(t, logged.String(), `cron: job skipped`, "a skipped job leaves a log line")
			require.Contains(t, logged.String(), `bad cron job id \"../../x\"`)
			require.Equal(t, "good-1", list[0].ID)
			require.Len(t, due, 1, "only the good job is claimed")
			for _, id := range bad {
				_, err := jobs.Trigger(id, time.Now())
				require.ErrorIs(t, err, ErrBadJob, "%q", id)
				require.ErrorContains(t, err, "want 1-64 of [A-Za-z0-9_-]")
			}
			after, err := os.ReadFile(filepath.Join(p.Home, "cron", "jobs.json"))
			require.NoError(t, err)
			for _, id := range bad[:5] {
				require.Contains(t, string(after), `"id": "`+id+`"`, "a skipped job is kept as it was")
			}
			// RunOne checks the id again before it joins it.
			res := RunOne(context.Background(), p, Job{ID: "../../../escaped", Name: "n", Prompt: "p"}, &recorder{})
			require.ErrorIs(t, res.Err, ErrBadJob)
			require.NoDirExists(t, filepath.Join(root, "escaped"))
			_, err = jobs.Create("../x", "p", "every 1h", time.Now())
			require.ErrorIs(t, err, ErrBadJob, "a bad name is refused at create")
			continue
		}
		require.Len(t, list, len(bad)+1, "the fault lists every job")
		res := RunOne(context.Background(), p, Job{ID: "../../../escaped", Name: "n", Prompt: "p"}, &recorder{})
		require.NoError(t, res.Err)
		require.DirExists(t, filepath.Join(root, "escaped"), "the fault writes the output outside the home")
		// The name too: the output file is named after it.
		res = RunOne(context.Background(), p, Job{ID: "good-1", Name: "../../../named-escape", Prompt: "p"}, &recorder{})
		require.NoError(t, res.Err)
		out, err := filepath.Glob(filepath.Join(p.Home, "named-escape-*.md"))
		require.NoError(t, err)
		require.Len(t, out, 1, "the fault joins the name into the path: %s", res.Output)
	}
}
