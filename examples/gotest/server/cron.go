package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// job is one cron job of a profile, in its cron/jobs.json.
type job struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prompt     string     `json:"prompt"`
	Every      string     `json:"every"` // "every 1h"
	NextRun    time.Time  `json:"next_run"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	LastStatus string     `json:"last_status,omitempty"` // ok or error
	LastError  string     `json:"last_error,omitempty"`
}

func (pr profile) jobs() ([]job, error) {
	var jobs []job
	data, err := pr.readFile("cron/jobs.json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read jobs of profile %q: %w", pr.name, err)
	}
	if err := json.Unmarshal(data, &jobs); err != nil {
		return nil, fmt.Errorf("read jobs of profile %q: %w", pr.name, err)
	}
	return jobs, nil
}

func (pr profile) saveJobs(jobs []job) error {
	data, err := json.MarshalIndent(jobs, "", "  ")
	if err != nil {
		return err
	}
	return pr.writeFile("cron/jobs.json", data, 0o644)
}

// editJobs applies edit to prof's jobs and saves them, one editor at a time.
func (p *pool) editJobs(prof profile, edit func([]job) ([]job, error)) error {
	p.cron.Lock()
	defer p.cron.Unlock()
	jobs, err := prof.jobs()
	if err != nil {
		return err
	}
	if jobs, err = edit(jobs); err != nil {
		return err
	}
	return prof.saveJobs(jobs)
}

func parseEvery(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "every "))
	if err != nil || d <= 0 {
		return 0, errorf(codeBadParams, "bad schedule %q: want \"every <duration>\"", s)
	}
	return d, nil
}

func (c *conn) cronCreate(params json.RawMessage) (any, error) {
	c.pool.life.RLock()
	defer c.pool.life.RUnlock()
	var p struct {
		Profile, Name, Prompt, Every string
	}
	if err := decode(params, &p); err != nil {
		return nil, err
	}
	d, err := parseEvery(p.Every)
	if err != nil {
		return nil, err
	}
	if p.Prompt == "" {
		return nil, errorf(codeBadParams, "cron.create: prompt is empty")
	}
	prof, err := c.pool.profile(p.Profile)
	if err != nil {
		return nil, err
	}
	j := job{ID: newID("job-"), Name: p.Name, Prompt: p.Prompt, Every: p.Every, NextRun: time.Now().Add(d)}
	err = c.pool.editJobs(prof, func(jobs []job) ([]job, error) { return append(jobs, j), nil })
	if err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "job": j}, nil
}

func (c *conn) cronTrigger(params json.RawMessage) (any, error) {
	c.pool.life.RLock()
	defer c.pool.life.RUnlock()
	var p struct {
		Profile, ID string
	}
	prof, err := c.decodeProfile(params, &p, &p.Profile)
	if err != nil {
		return nil, err
	}
	var found *job
	err = c.pool.editJobs(prof, func(jobs []job) ([]job, error) {
		for i := range jobs {
			if jobs[i].ID == p.ID {
				jobs[i].NextRun = time.Now()
				found = &jobs[i]
				return jobs, nil
			}
		}
		return nil, errorf(codeBadParams, "cron.trigger: no job %q in this profile", p.ID)
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"ok": true, "job": found}, nil
}

func (c *conn) cronList(params json.RawMessage) (any, error) {
	var p struct{ Profile string }
	prof, err := c.decodeProfile(params, &p, &p.Profile)
	if err != nil {
		return nil, err
	}
	c.pool.cron.Lock()
	defer c.pool.cron.Unlock()
	jobs, err := prof.jobs()
	if err != nil {
		return nil, err
	}
	if jobs == nil {
		jobs = []job{}
	}
	return map[string]any{"jobs": jobs}, nil
}

// tick fires every due job of every profile, each as a turn of a new
// conversation in its own profile. A profile with nothing due is not
// written.
func (p *pool) tick(ctx context.Context) {
	names, err := p.profileNames()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinyagent: cron:", err)
		return
	}
	for _, name := range append([]string{""}, names...) {
		p.fireDue(ctx, name)
	}
}

func (p *pool) fireDue(ctx context.Context, name string) {
	p.life.RLock()
	defer p.life.RUnlock()
	prof, err := p.profile(name)
	if err != nil {
		return // deleted since it was listed
	}
	now := time.Now()
	p.cron.Lock()
	jobs, err := prof.jobs()
	p.cron.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinyagent: cron:", err)
		return
	}
	for _, j := range jobs {
		if j.NextRun.After(now) {
			continue
		}
		_, added, runErr := p.runTurn(ctx, prof, nil, j.Prompt, func(string, map[string]any) {})
		stored := newID("st-cron-")
		if serr := prof.storeSession(stored); serr == nil {
			_ = prof.appendMessages(stored, added) // the job's record; its status says how it went
		}
		err := p.editJobs(prof, func(jobs []job) ([]job, error) {
			for i := range jobs {
				if jobs[i].ID != j.ID {
					continue
				}
				ran := time.Now()
				d, _ := parseEvery(jobs[i].Every)
				jobs[i].LastRun, jobs[i].NextRun, jobs[i].LastStatus, jobs[i].LastError = &ran, ran.Add(d), "ok", ""
				if runErr != nil {
					jobs[i].LastStatus, jobs[i].LastError = "error", runErr.Error()
				}
			}
			return jobs, nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "tinyagent: cron:", err)
		}
	}
}
