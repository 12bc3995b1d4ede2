package cron

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
)

var (
	// ErrUnknownJob is returned for a job id not in jobs.json.
	ErrUnknownJob = errors.New("unknown cron job")
	// ErrBadSchedule is returned for a schedule that is not "every <duration>".
	ErrBadSchedule = errors.New("bad cron schedule")
	// ErrBadJob marks a job id or name outside its allow-list (see
	// CheckID, CheckName): such a job is never run nor joined into a path.
	ErrBadJob = errors.New("bad cron job")
)

// Ids and names are checked against an allow-list wherever they are read
// (jobs.json included: a tenant can edit its own), because an id becomes a
// folder name under cron/output. The lengths are checked apart: a counted
// repetition ({0,63}) compiles into as many copies, at the start of every
// process of the binary.
var (
	idRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._:@+-]*$`)
)

// CheckID reports whether id may be a job id: 1-64 of [A-Za-z0-9_-],
// starting with a letter or digit (no '/', no '.', nothing absolute).
func CheckID(id string) error {
	if len(id) > 64 || !idRE.MatchString(id) {
		return fmt.Errorf("%w id %q: want 1-64 of [A-Za-z0-9_-], starting with a letter or digit", ErrBadJob, clip(id))
	}
	return nil
}

// CheckName reports whether name may be a job name: 1-128 of
// [A-Za-z0-9 ._:@+-], starting with a letter or digit.
func CheckName(name string) error {
	if len(name) > 128 || !nameRE.MatchString(name) {
		return fmt.Errorf("%w name %q: want 1-128 of [A-Za-z0-9 ._:@+-], starting with a letter or digit", ErrBadJob, clip(name))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

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

// Jobs is one profile's job store. Its files are opened through the
// profile's home (package homefs: no symlink followed).
type Jobs struct {
	Dir string       // the cron directory (Jobs{Dir: ...} alone: a store outside any profile)
	Log *slog.Logger // where skipped jobs are reported; slog.Default() when nil

	home      homefs.Home // the profile's home, when made by ForProfile
	sub       string      // the cron directory within home
	unchecked bool        // the unchecked-job-ids fault
}

// ForProfile is p's job store.
func ForProfile(p profile.Profile) Jobs {
	return Jobs{Dir: p.File("cron"), home: p.FS(), sub: "cron", unchecked: p.Faults.Has(faults.UncheckedJobIDs)}
}

// fs is the home the store's files are opened in, and the cron
// directory's name there.
func (j Jobs) fs() (homefs.Home, string) {
	if j.home.Dir == "" {
		return homefs.Home{Dir: j.Dir}, "."
	}
	return j.home, j.sub
}

func (j Jobs) file(name string) (homefs.Home, string) {
	h, sub := j.fs()
	return h, path.Join(sub, name)
}

func (j Jobs) path() string { return filepath.Join(j.Dir, "jobs.json") }

func (j Jobs) log() *slog.Logger {
	if j.Log != nil {
		return j.Log
	}
	return slog.Default()
}

// lockWait is how long a read-modify-write waits for the store's lock.
// The lock file is in the tenant's home, so its own terminal can hold it
// forever (flock): a wait without end would hold the cron ticker, which
// serves every profile in turn, and the server's stop.
const lockWait = 2 * time.Second

// ErrLocked marks a store whose lock stayed held for lockWait.
var ErrLocked = errors.New("cron jobs locked by another process")

// lock takes an exclusive lock on the store for a read-modify-write,
// waiting at most lockWait.
func (j Jobs) lock() (func(), error) {
	h, name := j.file("jobs.lock")
	f, err := h.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock cron jobs in %s: %w", j.Dir, err)
	}
	if err := flockWithin(int(f.Fd()), lockWait); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock cron jobs in %s: %w", j.Dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// flockWithin takes an exclusive flock on fd, polling (LOCK_NB) until
// wait has passed: ErrLocked then.
func flockWithin(fd int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("held for %s: %w", wait, ErrLocked)
		}
		time.Sleep(delay) // a poll of a lock another process holds: nothing to wait on
	}
}

// Present reports whether the store has a jobs file at all: false when
// there is none (nothing can be due), an error when the name holds a link
// or anything but a regular file (what read would refuse).
func (j Jobs) Present() (bool, error) {
	h, name := j.file("jobs.json")
	return h.CheckFile(name)
}

// read returns the valid jobs of jobs.json and, untouched, the entries
// whose id or name is outside its allow-list (each skipped with a log
// line, and written back as they were).
func (j Jobs) read() ([]Job, []json.RawMessage, error) {
	h, name := j.file("jobs.json")
	data, err := h.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read cron jobs: %w", err)
	}
	var doc struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil, nil
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("parse %s: %s", j.path(), jsonErr(err))
	}
	var jobs []Job
	var bad []json.RawMessage
	for i, raw := range doc.Jobs {
		var job Job
		if err := json.Unmarshal(raw, &job); err != nil {
			return nil, nil, fmt.Errorf("parse %s: job %d: %s", j.path(), i+1, jsonErr(err))
		}
		if !j.unchecked {
			err := CheckID(job.ID)
			if err == nil {
				err = CheckName(job.Name)
			}
			if err != nil {
				j.log().Warn("cron: job skipped", "file", j.path(), "index", i+1, "err", err.Error())
				bad = append(bad, raw)
				continue
			}
		}
		jobs = append(jobs, job)
	}
	return jobs, bad, nil
}

// jsonErr describes a JSON error without quoting the file: the offset
// of a syntax error, the field of a type error.
func jsonErr(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: want %s", te.Field, te.Type)
	default:
		return "not valid JSON"
	}
}

func (j Jobs) write(jobs []Job, bad []json.RawMessage) error {
	all := make([]any, 0, len(jobs)+len(bad))
	for _, job := range jobs {
		all = append(all, job)
	}
	for _, raw := range bad {
		all = append(all, raw)
	}
	data, err := json.MarshalIndent(map[string]any{"jobs": all}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", j.path(), err)
	}
	h, name := j.file("jobs.json")
	return h.WriteFileAtomic(name, append(data, '\n'), 0o600)
}

// update runs fn over the jobs under the lock and writes them back.
func (j Jobs) update(fn func([]Job) ([]Job, error)) error {
	unlock, err := j.lock()
	if err != nil {
		return err
	}
	defer unlock()
	jobs, bad, err := j.read()
	if err != nil {
		return err
	}
	jobs, err = fn(jobs)
	if err != nil {
		return err
	}
	return j.write(jobs, bad)
}

// List returns the jobs (those whose id and name pass the allow-lists).
func (j Jobs) List() ([]Job, error) {
	jobs, _, err := j.read()
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
	if err := CheckName(job.Name); err != nil && !j.unchecked {
		return Job{}, fmt.Errorf("create cron job: %w", err)
	}
	err = j.update(func(jobs []Job) ([]Job, error) { return append(jobs, job), nil })
	if err != nil {
		return Job{}, fmt.Errorf("create cron job: %w", err)
	}
	return job, nil
}

// Trigger makes a job due now: the next tick fires it.
func (j Jobs) Trigger(id string, now time.Time) (Job, error) {
	if err := CheckID(id); err != nil && !j.unchecked {
		return Job{}, fmt.Errorf("trigger cron job: %w", err)
	}
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
	jobs, _, err := j.read()
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
	status := "ok"
	if runErr != nil {
		status = "error: " + runErr.Error()
	}
	doc := fmt.Sprintf("# %s\n\n- job: %s\n- profile: %s\n- ran: %s\n- status: %s\n\n## Prompt\n\n%s\n\n## Response\n\n%s\n",
		job.Name, job.ID, p.Name, started.Format(time.RFC3339), status, job.Prompt, answer)
	if file, err := writeOutput(p, job, started, []byte(doc)); err != nil {
		res.Err = errors.Join(runErr, fmt.Errorf("write cron output: %w", err))
	} else {
		res.Output = file
	}
	if err := ForProfile(p).Record(job.ID, started, res.Output, runErr); err != nil {
		res.Err = errors.Join(res.Err, err)
	}
	return res
}

// writeOutput writes a run's output file, cron/output/<id>/<ts>.md,
// through the profile's home; it returns the file's path. The id is
// checked again here: it is joined into a path.
func writeOutput(p profile.Profile, job Job, started time.Time, doc []byte) (string, error) {
	stamp := started.Format("20060102T150405.000000000Z") + ".md"
	if p.Faults.Has(faults.UncheckedJobIDs) {
		// The bug: the id and the name are joined into a plain path and
		// written there.
		file := filepath.Join(p.File("cron", "output", job.ID), job.Name+"-"+stamp)
		return file, profile.WriteFileAtomic(file, doc, 0o600)
	}
	if err := CheckID(job.ID); err != nil {
		return "", err
	}
	name := path.Join("cron/output", job.ID, stamp)
	return p.File(name), p.FS().WriteFileAtomic(name, doc, 0o600)
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
