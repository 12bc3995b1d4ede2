package scenarios

import (
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// cronJob is the part of a cron job the harness reads.
type cronJob struct {
	ID         string     `json:"id"`
	LastRun    *time.Time `json:"last_run"`
	LastStatus string     `json:"last_status"`
	LastError  string     `json:"last_error"`
}

// CreateCron creates (over c) a cron job in t's profile whose prompt carries
// t's cron canary, and returns its id.
func (e *Env) CreateCron(c *harness.Conn, t *tenants.Tenant) string {
	e.T.Helper()
	var res struct {
		Job cronJob `json:"job"`
	}
	e.Call(c, "cron.create", map[string]any{"profile": profileParam(t), "name": "canary-" + t.Name,
		"prompt": t.CronPromptText(), "every": "every 1h"}, &res)
	if res.Job.ID == "" {
		e.T.Fatalf("cron.create for %s returned no job id", t.Name)
	}
	return res.Job.ID
}

// TriggerCron marks t's job due now; the target's cron ticker (or CronTick)
// fires it as a turn in t's own scope, which must reach t's provider as one
// more snapshot.
func (e *Env) TriggerCron(c *harness.Conn, t *tenants.Tenant, id string) time.Time {
	e.T.Helper()
	at := time.Now()
	e.Call(c, "cron.trigger", map[string]any{"profile": profileParam(t), "id": id}, nil)
	e.ExpectSnapshots(t, 1)
	return at
}

// WaitCron waits until t's job id has run after since, and fails if the run
// failed.
func (e *Env) WaitCron(c *harness.Conn, t *tenants.Tenant, id string, since time.Time) {
	e.T.Helper()
	var last cronJob
	e.Eventually(fmt.Sprintf("cron job %s of %s to run", id, t.Name), 60*time.Second, func() (bool, string) {
		jobs, err := e.listCron(c, t)
		if err != nil {
			e.SkipUnsupported(err)
			return false, err.Error()
		}
		for _, j := range jobs {
			if j.ID == id {
				last = j
				return j.ranSince(since) && j.LastStatus != "", fmt.Sprintf("%+v", j)
			}
		}
		return false, fmt.Sprintf("job %s not listed", id)
	})
	if last.LastStatus != "ok" {
		e.T.Fatalf("cron job %s of %s ran with status %q: %s", id, t.Name, last.LastStatus, last.LastError)
	}
}

// listCron is t's cron jobs, as cron.list over c gives them.
func (e *Env) listCron(c *harness.Conn, t *tenants.Tenant) ([]cronJob, error) {
	var res struct {
		Jobs []cronJob `json:"jobs"`
	}
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	err := c.Call(ctx, "cron.list", map[string]any{"profile": profileParam(t)}, &res)
	return res.Jobs, err
}

// ranSince reports whether j ran at since or after it (less a second: a
// target may keep a run's time in whole seconds).
func (j cronJob) ranSince(since time.Time) bool {
	return j.LastRun != nil && !j.LastRun.Before(since.Add(-time.Second))
}

// CronTick runs the target's one-shot tick (stdio targets have no ticker).
func (e *Env) CronTick() {
	e.T.Helper()
	ctx, cancel := e.ctx(120 * time.Second)
	defer cancel()
	if _, err := e.Box.RunCronTick(ctx); err != nil {
		e.T.Fatalf("cron tick: %v", err)
	}
}

// StdioPerTenant starts one stdio backend per tenant as its main
// connection.
func (e *Env) StdioPerTenant() {
	e.T.Helper()
	e.Conns = map[string]*harness.Conn{}
	for _, t := range e.Tenants {
		e.Conns[t.Name] = e.StartStdio(t)
	}
}

// ServePerTenant starts the pooled server and dials one websocket
// connection per tenant as its main connection.
func (e *Env) ServePerTenant() {
	e.T.Helper()
	srv := e.StartServe()
	e.Conns = map[string]*harness.Conn{}
	for _, t := range e.Tenants {
		e.Conns[t.Name] = e.Dial(srv, t)
	}
}

// OpenSessions opens one session per tenant on its main connection.
func (e *Env) OpenSessions() {
	e.T.Helper()
	e.Sessions = map[string]harness.SessionInfo{}
	for _, t := range e.Tenants {
		e.Sessions[t.Name] = e.CreateSession(e.Conns[t.Name], t)
		if got := e.Sessions[t.Name].Info.ProfileName; got != "" && got != t.Name {
			e.T.Errorf("session of %s reports profile %q", t.Name, got)
		}
	}
}

// InterleavedTurns runs rounds of turns on the main sessions, one per
// tenant per round, tenant after tenant.
func (e *Env) InterleavedTurns(rounds int) {
	e.T.Helper()
	for r := 0; r < rounds; r++ {
		for _, t := range e.Tenants {
			e.Turn(e.Conns[t.Name], t, e.Sessions[t.Name].SessionID)
		}
	}
}

// serveSessions starts the pooled server with a connection per tenant,
// opens each tenant's session and runs rounds interleaved turns: where a
// scenario on the pooled server starts.
func (e *Env) serveSessions(rounds int) {
	e.T.Helper()
	e.ServePerTenant()
	e.OpenSessions()
	e.InterleavedTurns(rounds)
}

// CronEach creates a cron job per tenant, triggers them all, and waits for
// each to run (the serve backend's ticker fires them).
func (e *Env) CronEach() {
	e.T.Helper()
	ids := map[string]string{}
	since := map[string]time.Time{}
	for _, t := range e.Tenants {
		ids[t.Name] = e.CreateCron(e.Conns[t.Name], t)
		since[t.Name] = e.TriggerCron(e.Conns[t.Name], t, ids[t.Name])
	}
	for _, t := range e.Tenants {
		e.WaitCron(e.Conns[t.Name], t, ids[t.Name], since[t.Name])
	}
}
