package scenarios

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/harness"
)

// targetDown remembers, per backend, the first scenario in which the
// target could not start it (its process exited before its ready line,
// never printed it, or could not be executed), and whether any backend
// of the target became ready at all in the run. A backend that fails
// costs only the scenarios that need it: every scenario not yet begun
// that needs it would wait out the same start-up for nothing (60 s each),
// so it is reported not run, with the reason; every other scenario runs.
type targetDown struct {
	mu      sync.Mutex
	reasons map[harness.Backend]string
	order   []harness.Backend
}

// note records err when it is a start-up failure of the target's backend
// (the first one of that backend stands) and returns the backend's
// recorded reason; "" when err is no start-up failure.
func (d *targetDown) note(scenario string, backend harness.Backend, err error) string {
	if d == nil || err == nil {
		return ""
	}
	if !errors.Is(err, harness.ErrNotReady) && !errors.Is(err, harness.ErrExited) && !errors.Is(err, harness.ErrStart) {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reasons == nil {
		d.reasons = map[harness.Backend]string{}
	}
	if d.reasons[backend] == "" {
		what := "the " + string(backend) + " backend"
		if backend == sandboxSetup {
			what = "the target's sandbox"
		}
		d.reasons[backend] = fmt.Sprintf("%s could not start (in scenario %s): %v", what, scenario, err)
		d.order = append(d.order, backend)
	}
	return d.reasons[backend]
}

// sandboxSetup stands for what every scenario needs before any backend:
// the target's sandbox (its homes, its set-up hooks).
const sandboxSetup harness.Backend = "sandbox"

// whyFor is the recorded reason one of backends (or the sandbox every
// scenario needs) could not start, or "" while they all start fine.
func (d *targetDown) whyFor(backends []harness.Backend) string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if why := d.reasons[sandboxSetup]; why != "" {
		return why
	}
	for _, b := range d.order {
		if slices.Contains(backends, b) {
			return d.reasons[b]
		}
	}
	return ""
}

// backendOf names the backend a process of the target serves, by the name
// the harness starts it under ("serve", "serve-<n>" for replica n,
// "gateway", "stdio-<tenant>").
func backendOf(name string) harness.Backend {
	switch {
	case name == string(harness.BackendServe) || strings.HasPrefix(name, string(harness.BackendServe)+"-"):
		return harness.BackendServe // "serve-2": a replica
	case name == string(harness.BackendGateway):
		return harness.BackendGateway
	}
	return harness.BackendStdio
}

// targetCannotStart notes a start-up failure of one of the target's
// backends: the later scenarios that need that backend do not run, and
// this one, when none of its backends had become ready yet, is marked as
// not run for it (Report.NotRun).
func (e *Env) targetCannotStart(backend harness.Backend, err error) {
	if e.Ctx.Err() != nil {
		return // the scenario's own deadline or an interrupt, not the target
	}
	if why := e.down.note(e.Spec.ID, backend, err); why != "" {
		e.mu.Lock()
		if e.Report.NotRun == "" && !e.backendUp {
			e.Report.NotRun = why
		}
		e.mu.Unlock()
	}
}

// targetReady notes that a backend of the target became ready in this
// scenario: a later start-up failure (a restart) no longer makes it "not
// run".
func (e *Env) targetReady() {
	e.mu.Lock()
	e.backendUp = true
	e.mu.Unlock()
}
