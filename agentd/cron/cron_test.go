package cron

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

func TestTriggerTickRecordsAndWritesOutput(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := profile.Profile{Name: "a", Home: filepath.Join(root, "a")}
	b := profile.Profile{Name: "b", Home: filepath.Join(root, "b")}
	for _, p := range []profile.Profile{a, b} {
		require.NoError(t, os.Mkdir(p.Home, 0o700)) // the store fills a home in, never makes one
	}
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
	idle := ForProfile(profile.Profile{Name: "idle", Home: filepath.Join(root, "idle")})
	due, err := idle.Claim(time.Now())
	require.NoError(t, err)
	require.Empty(t, due)
	require.NoDirExists(t, idle.Dir, "no cron folder made for a profile without jobs")
	_, err = idle.Create("j", "p", "every 1h", time.Now())
	require.Error(t, err, "a job of a profile with no home")
	require.NoDirExists(t, filepath.Join(root, "idle"), "a home is never made by its cron store")

	busy := ForProfile(profile.Profile{Name: "busy", Home: filepath.Join(root, "busy")})
	require.NoError(t, os.Mkdir(filepath.Join(root, "busy"), 0o700))
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
