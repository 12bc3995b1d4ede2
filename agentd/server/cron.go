package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/cron"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

// RunJob implements cron.Runner: the job runs as a turn in a session of
// its own in profile p's scope.
func (s *Server) RunJob(ctx context.Context, p profile.Profile, job cron.Job) (string, error) {
	name := p.Name
	if s.opts.Faults.Has(faults.CronLaunchScope) {
		name = profile.LaunchName // the bug: every job runs in the launch scope
	}
	answer, err := s.RunDetached(ctx, Detached{Profile: name, Source: "cron", Title: "cron: " + job.Name, Text: job.Prompt})
	if err != nil {
		return "", fmt.Errorf("cron job %s: %w", job.ID, err)
	}
	return answer, nil
}

// TickCron fires the due jobs of every profile once.
func (s *Server) TickCron(ctx context.Context, now time.Time) ([]cron.Result, error) {
	profiles, err := s.opts.Homes.List()
	if err != nil {
		return nil, err
	}
	var out []cron.Result
	for _, p := range profiles {
		out = append(out, s.TickProfile(ctx, p.Name, now)...)
	}
	return out, nil
}

// TickProfile fires the due jobs of one profile, holding its scope for the
// whole tick: a delete of the profile waits for the tick (and cancels its
// turns), and a tick never writes in a home that was deleted meanwhile.
// A profile deleted before the tick has no jobs.
func (s *Server) TickProfile(ctx context.Context, name string, now time.Time) []cron.Result {
	// A profile without a jobs file has nothing due: its scope (its state
	// database among it) is not opened for the tick. Anything else (a
	// jobs file, a link in its place, a home that went) takes the tick's
	// whole path, which reports it.
	if p, err := s.opts.Homes.Get(name); err == nil {
		if present, err := cron.ForProfile(p).Present(); err == nil && !present {
			return nil
		}
	}
	sc, release, err := s.pool.Use(ctx, name)
	if errors.Is(err, profile.ErrUnknownProfile) {
		return nil
	}
	if err != nil {
		return []cron.Result{{Profile: name, Err: err}}
	}
	defer release()
	return cron.Tick(ctx, []profile.Profile{sc.Profile}, now, s.cronRunner())
}

// cronRunner is the server itself, or in cluster mode the server behind
// the cluster's cron leases (leasedRunner).
func (s *Server) cronRunner() cron.Runner {
	if s.opts.Cluster == nil {
		return s
	}
	return leasedRunner{s}
}

// CronLease bounds how long a replica holds a cron job's lease (a
// replica that dies holding one gives it up this late).
const CronLease = 15 * time.Minute

// leasedRunner runs a cron job only under its lease in the cluster's
// PostgreSQL (one replica at a time), and records the run there.
type leasedRunner struct{ s *Server }

func (l leasedRunner) RunJob(ctx context.Context, p profile.Profile, job cron.Job) (string, error) {
	cl := l.s.opts.Cluster
	pg, me := cl.Postgres(), cl.Replica()
	if err := pg.AcquireLease(ctx, p.Name, job.ID, me, CronLease); err != nil {
		return "", fmt.Errorf("cron job %s: %w", job.ID, err)
	}
	defer func() {
		if err := pg.ReleaseLease(context.WithoutCancel(ctx), p.Name, job.ID, me); err != nil {
			l.s.log.Warn("cluster: release a cron lease", "profile", p.Name, "job", job.ID, "err", err)
		}
	}()
	started := time.Now()
	answer, err := l.s.RunJob(ctx, p, job)
	status := "ok"
	if err != nil {
		status = "error"
	}
	if rerr := pg.RecordJobRun(context.WithoutCancel(ctx), store.JobRun{Profile: p.Name, ID: job.ID, Name: job.Name, Schedule: job.Schedule,
		LastRun: started, LastStatus: status, LastReplica: me}); rerr != nil {
		l.s.log.Warn("cluster: record a cron run", "profile", p.Name, "job", job.ID, "err", rerr)
	}
	return answer, err
}

func (s *Server) cronCreate(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
		Name    string `json:"name"`
		Prompt  string `json:"prompt"`
		Every   string `json:"every"`
	}
	check := func() error {
		if p.Prompt == "" || p.Every == "" {
			return rpc.Errorf(rpc.CodeInvalidParams, "cron.create: prompt and every are required")
		}
		if _, err := cron.ParseEvery(p.Every); err != nil {
			return rpc.Errorf(rpc.CodeInvalidParams, "cron.create: %v", err)
		}
		return nil
	}
	return s.inScope(ctx, c, &p, &p.Profile, check, func(sc *scope.Scope) (any, error) {
		job, err := cron.ForProfile(sc.Profile).Create(p.Name, p.Prompt, p.Every, time.Now())
		if err != nil {
			return nil, internalError("cron.create: %v", err)
		}
		sc.Log.Info("cron job created", "job", job.ID)
		return map[string]any{"ok": true, "profile": sc.Profile.Name, "job": job}, nil
	})
}

func (s *Server) cronTrigger(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
		ID      string `json:"id"`
	}
	return s.inScope(ctx, c, &p, &p.Profile, required(&p.ID, "cron.trigger: id is required"), func(sc *scope.Scope) (any, error) {
		job, err := cron.ForProfile(sc.Profile).Trigger(p.ID, time.Now())
		if errors.Is(err, cron.ErrUnknownJob) {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "cron.trigger: unknown job %q in profile %q", p.ID, sc.Profile.Name)
		}
		if err != nil {
			return nil, internalError("cron.trigger: %v", err)
		}
		return map[string]any{"ok": true, "profile": sc.Profile.Name, "job": job}, nil
	})
}

func (s *Server) cronList(ctx context.Context, c *rpc.Call) (any, error) {
	var p struct {
		Profile string `json:"profile"`
	}
	return s.inScope(ctx, c, &p, &p.Profile, nil, func(sc *scope.Scope) (any, error) {
		jobs, err := cron.ForProfile(sc.Profile).List()
		if err != nil {
			return nil, internalError("cron.list: %v", err)
		}
		return map[string]any{"profile": sc.Profile.Name, "jobs": jobs}, nil
	})
}
