package cron

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

var (
	// ErrUnknownJob is returned for a job id not in jobs.json.
	ErrUnknownJob = errors.New("unknown cron job")
	// ErrBadSchedule is returned for a schedule that is not "every <duration>".
	ErrBadSchedule = errors.New("bad cron schedule")
)

// Job is one scheduled prompt.
type Job struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prompt     string     `json:"prompt"`
	Schedule   string     `json:"schedule"`
	Enabled    bool       `json:"enabled"`
	NextRun    time.Time  `json:"next_run"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	LastStatus string     `json:"last_status,omitempty"` // "ok" or "error"
	LastError  string     `json:"last_error,omitempty"`
	LastOutput string     `json:"last_output,omitempty"` // path of the last output file
	CreatedAt  time.Time  `json:"created_at"`
}

// ParseEvery parses "every <duration>" (or a bare duration) into an
// interval of at least one second.
func ParseEvery(s string) (time.Duration, error) {
	d := strings.TrimSpace(s)
	d = strings.TrimSpace(strings.TrimPrefix(d, "every"))
	iv, err := time.ParseDuration(d)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want \"every <duration>\", like \"every 1h\"", ErrBadSchedule, s)
	}
	if iv < time.Second {
		return 0, fmt.Errorf("%w %q: the interval must be at least 1s", ErrBadSchedule, s)
	}
	return iv, nil
}

// Jobs is one profile's job store.
type Jobs struct {
	Dir string // the profile's cron directory
}

// ForProfile is p's job store.
func ForProfile(p profile.Profile) Jobs { return Jobs{Dir: p.File("cron")} }

func (j Jobs) path() string { return filepath.Join(j.Dir, "jobs.json") }

// lock takes an exclusive lock on the store for a read-modify-write.
func (j Jobs) lock() (func(), error) {
	// One level only: the cron folder of a home that exists, never the
	// home of a profile deleted meanwhile.
	if err := os.Mkdir(j.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("lock cron jobs in %s: %w", j.Dir, err)
	}
	f, err := os.OpenFile(filepath.Join(j.Dir, "jobs.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock cron jobs in %s: %w", j.Dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock cron jobs in %s: %w", j.Dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func (j Jobs) read() ([]Job, error) {
	data, err := os.ReadFile(j.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", j.path(), err)
	}
	var doc struct {
		Jobs []Job `json:"jobs"`
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", j.path(), err)
	}
	return doc.Jobs, nil
}

func (j Jobs) write(jobs []Job) error {
	if jobs == nil {
		jobs = []Job{}
	}
	data, err := json.MarshalIndent(map[string]any{"jobs": jobs}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", j.path(), err)
	}
	return profile.WriteFileAtomic(j.path(), append(data, '\n'), 0o600)
}

// update runs fn over the jobs under the lock and writes them back.
func (j Jobs) update(fn func([]Job) ([]Job, error)) error {
	unlock, err := j.lock()
	if err != nil {
		return err
	}
	defer unlock()
	jobs, err := j.read()
	if err != nil {
		return err
	}
	jobs, err = fn(jobs)
	if err != nil {
		return err
	}
	return j.write(jobs)
}

// List returns the jobs.
func (j Jobs) List() ([]Job, error) {
	jobs, err := j.read()
	if jobs == nil {
		jobs = []Job{}
	}
	return jobs, err
}

// Create adds an enabled job first due one interval from now.
func (j Jobs) Create(name, prompt, every string, now time.Time) (Job, error) {
	iv, err := ParseEvery(every)
	if err != nil {
		return Job{}, err
	}
	if strings.TrimSpace(prompt) == "" {
		return Job{}, errors.New("create cron job: empty prompt")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	job := Job{
		ID: hex.EncodeToString(b[:]), Name: name, Prompt: prompt, Schedule: "every " + iv.String(),
		Enabled: true, NextRun: now.Add(iv).UTC(), CreatedAt: now.UTC(),
	}
	if job.Name == "" {
		job.Name = job.ID
	}
	err = j.update(func(jobs []Job) ([]Job, error) { return append(jobs, job), nil })
	if err != nil {
		return Job{}, fmt.Errorf("create cron job: %w", err)
	}
	return job, nil
}

// Trigger makes a job due now: the next tick fires it.
func (j Jobs) Trigger(id string, now time.Time) (Job, error) {
	var out Job
	err := j.update(func(jobs []Job) ([]Job, error) {
		for i := range jobs {
			if jobs[i].ID == id {
				jobs[i].NextRun = now.UTC()
				jobs[i].Enabled = true
				out = jobs[i]
				return jobs, nil
			}
		}
		return nil, fmt.Errorf("%w %q in %s", ErrUnknownJob, id, j.path())
	})
	return out, err
}

// Claim takes the jobs due at now and moves their next run one interval
// on, under the lock, so no other ticker fires them too.
func (j Jobs) Claim(now time.Time) ([]Job, error) {
	// A tick that finds nothing due writes nothing: a ticker over every
	// profile must not touch a profile's files on every tick (nor create
	// its cron folder), or each tick would be a write no one addressed.
	jobs, err := j.read()
	if err != nil {
		return nil, err
	}
	if !anyDue(jobs, now) {
		return nil, nil
	}
	var due []Job
	err = j.update(func(jobs []Job) ([]Job, error) {
		for i := range jobs {
			if !jobs[i].Enabled || jobs[i].NextRun.After(now) {
				continue
			}
			iv, err := ParseEvery(jobs[i].Schedule)
			if err != nil {
				jobs[i].Enabled = false
				jobs[i].LastStatus, jobs[i].LastError = "error", err.Error()
				continue
			}
			due = append(due, jobs[i])
			next := jobs[i].NextRun.Add(iv)
			if !next.After(now) {
				next = now.Add(iv)
			}
			jobs[i].NextRun = next.UTC()
		}
		return jobs, nil
	})
	return due, err
}

// Record stores the outcome of a run.
func (j Jobs) Record(id string, ran time.Time, output string, runErr error) error {
	return j.update(func(jobs []Job) ([]Job, error) {
		for i := range jobs {
			if jobs[i].ID != id {
				continue
			}
			t := ran.UTC()
			jobs[i].LastRun = &t
			jobs[i].LastOutput = output
			if runErr != nil {
				jobs[i].LastStatus, jobs[i].LastError = "error", runErr.Error()
			} else {
				jobs[i].LastStatus, jobs[i].LastError = "ok", ""
			}
		}
		return jobs, nil // a job deleted meanwhile is not an error
	})
}

// Runner runs one job as a turn in its profile's own scope and returns the
// answer.
type Runner interface {
	RunJob(ctx context.Context, p profile.Profile, job Job) (string, error)
}

// Result is one fired job.
type Result struct {
	Profile string
	Job     Job
	Output  string // the output file written
	Err     error
}

// Tick fires the jobs due at now in every given profile, one profile after
// another, each job through runner in its own profile. A failing job is
// recorded and the tick goes on.
func Tick(ctx context.Context, profiles []profile.Profile, now time.Time, runner Runner) []Result {
	var out []Result
	for _, p := range profiles {
		jobs := ForProfile(p)
		due, err := jobs.Claim(now)
		if err != nil {
			out = append(out, Result{Profile: p.Name, Err: err})
			continue
		}
		for _, job := range due {
			if ctx.Err() != nil {
				return out
			}
			out = append(out, RunOne(ctx, p, job, runner))
		}
	}
	return out
}

// RunOne runs a claimed job, writes its output file and records the result.
func RunOne(ctx context.Context, p profile.Profile, job Job, runner Runner) Result {
	started := time.Now().UTC()
	answer, runErr := runner.RunJob(ctx, p, job)
	res := Result{Profile: p.Name, Job: job, Err: runErr}
	file := filepath.Join(p.File("cron", "output", job.ID), started.Format("20060102T150405.000000000Z")+".md")
	status := "ok"
	if runErr != nil {
		status = "error: " + runErr.Error()
	}
	doc := fmt.Sprintf("# %s\n\n- job: %s\n- profile: %s\n- ran: %s\n- status: %s\n\n## Prompt\n\n%s\n\n## Response\n\n%s\n",
		job.Name, job.ID, p.Name, started.Format(time.RFC3339), status, job.Prompt, answer)
	var err error
	for _, d := range []string{p.File("cron"), p.File("cron", "output"), filepath.Dir(file)} {
		// Folder by folder inside the home, never the home itself.
		if err = os.Mkdir(d, 0o700); errors.Is(err, os.ErrExist) {
			err = nil
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = profile.WriteFileAtomic(file, []byte(doc), 0o600)
	}
	if err != nil {
		res.Err = errors.Join(runErr, fmt.Errorf("write cron output: %w", err))
	} else {
		res.Output = file
	}
	if err := ForProfile(p).Record(job.ID, started, res.Output, runErr); err != nil {
		res.Err = errors.Join(res.Err, err)
	}
	return res
}

// SortByNext orders jobs by next run.
func SortByNext(jobs []Job) {
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].NextRun.Before(jobs[b].NextRun) })
}

// anyDue reports whether a job is enabled and due at now.
func anyDue(jobs []Job, now time.Time) bool {
	for _, j := range jobs {
		if j.Enabled && !j.NextRun.After(now) {
			return true
		}
	}
	return false
}
