// The cron steps of hostile-chains: how long a chain's job is waited
// for, from what the tenants' own jobs take on this target.

package scenarios

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// waitJob waits (bounded) for the job r's steps made or triggered to have
// run since its last step. It asks cron.list on the attacker's connection,
// or, once that refuses (a chain that replaced its .env revokes its own
// credential), reads the attacker's jobs file. A job that has not run
// after a quick look is given several times what the tenants' own jobs
// take to run on this target under this run's load (cronRunTime), and at
// most maxJobWait: a target that refuses to run it (a jobs file it will
// not follow) is then known for held in seconds, not after the fixed
// bound.
func (e *Env) waitJob(c *harness.Conn, r *chainRun) {
	start := time.Now()
	bound, measured := maxJobWait, false
	for {
		jobs, err := e.listCron(c, r.a)
		if err != nil {
			var res struct {
				Jobs []cronJob `json:"jobs"`
			}
			data, ferr := os.ReadFile(filepath.Join(r.a.Home, r.vars["jobs"]))
			if ferr != nil || json.Unmarshal(data, &res) != nil {
				r.outcome += "; cron.list: " + err.Error()
				return
			}
			jobs = res.Jobs
		}
		for _, j := range jobs {
			if j.ID == r.job && j.ranSince(r.since) {
				r.outcome += fmt.Sprintf("; the job ran (%s %s)", j.LastStatus, truncateText(j.LastError, 120))
				return
			}
		}
		if !measured && time.Since(start) >= quickJobLook {
			measured = true
			if took := e.cronRunTime(); took > 0 {
				bound = min(maxJobWait, max(minJobWait, jobWaitFactor*took))
			}
			continue // a look after the measure, which may have outlasted the bound
		}
		if time.Since(start) >= bound {
			break
		}
		if !sleepCtx(e.Ctx, 100*time.Millisecond) {
			return
		}
	}
	r.outcome += fmt.Sprintf("; the job did not run within %s", bound.Round(100*time.Millisecond))
}

// The bounds of waitJob: a quick look first, then jobWaitFactor times the
// measured run time of a job, within [minJobWait, maxJobWait].
const (
	quickJobLook  = 2 * time.Second
	jobWaitFactor = 5
	minJobWait    = 3 * time.Second
	maxJobWait    = 20 * time.Second
)

// cronRunTime triggers every tenant's own job at once (the first time it
// is asked in a run) and reports how long the slowest of those that ran
// took, from the trigger to cron.list showing the run; 0 when none ran
// within maxJobWait (a tenant whose credential a chain revoked, or whose
// jobs a chain broke, is left out). The jobs' turns are the tenants' own.
func (e *Env) cronRunTime() time.Duration {
	st := stateOf(e, chainsKey)
	st.cron.once.Do(func() {
		var mu sync.Mutex
		e.atOnce(e.Tenants, func(t *tenants.Tenant) {
			took, ok := e.timeJob(t, st.jobs[t.Name])
			mu.Lock()
			defer mu.Unlock()
			if ok {
				st.cron.took = max(st.cron.took, took)
			}
		})
		if st.cron.took > 0 {
			e.Logf("the tenants' own cron jobs ran within %s of their trigger: a chain's job is given %dx that (%s to %s)", st.cron.took.Round(time.Millisecond), jobWaitFactor, minJobWait, maxJobWait)
		} else {
			e.Logf("no tenant's own cron job ran within %s of its trigger: a chain's job is given %s", maxJobWait, maxJobWait)
		}
	})
	return st.cron.took
}

// timeJob triggers t's job id and waits, up to maxJobWait, for cron.list
// to show it ran; it reports how long that took.
func (e *Env) timeJob(t *tenants.Tenant, id string) (time.Duration, bool) {
	c := e.Conns[t.Name]
	if c == nil || id == "" {
		return 0, false
	}
	start := time.Now()
	ctx, cancel := e.ctx(e.Times.Call)
	err := c.Call(ctx, "cron.trigger", map[string]any{"profile": profileParam(t), "id": id}, nil)
	cancel()
	if err != nil {
		return 0, false
	}
	w := Wait{What: "the cron job " + id + " of " + t.Name + " to run", Within: maxJobWait, Poll: 50 * time.Millisecond}
	err = Await(e.Ctx, w, func() (bool, string) {
		jobs, err := e.listCron(c, t)
		if err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(jobs, func(j cronJob) bool { return j.ID == id && j.ranSince(start) }), "not run yet"
	})
	return time.Since(start), err == nil
}
