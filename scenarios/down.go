package scenarios

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tenantcanary/tenantcanary/harness"
)

// targetDown remembers the first scenario in which the target could not
// start (its process exited before its ready line, or never printed it, or
// could not be executed). A run stops there: every scenario not yet begun
// would wait out the same start-up for nothing (60 s each), so it is
// reported failed, not run, and the certificate fails at once (exit 2).
type targetDown struct {
	mu     sync.Mutex
	reason string
}

// note records err when it is a start-up failure of the target.
func (d *targetDown) note(scenario, backend string, err error) {
	if d == nil || err == nil {
		return
	}
	if !errors.Is(err, harness.ErrNotReady) && !errors.Is(err, harness.ErrExited) && !errors.Is(err, harness.ErrStart) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reason == "" {
		d.reason = fmt.Sprintf("the target could not start (%s in scenario %s): %v", backend, scenario, err)
	}
}

// why is the recorded reason, or "" while the target starts fine.
func (d *targetDown) why() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reason
}

// targetCannotStart notes a start-up failure of one of the target's
// backends, so the catalog stops after this scenario.
func (e *Env) targetCannotStart(backend string, err error) {
	if e.Ctx.Err() != nil {
		return // the scenario's own deadline or an interrupt, not the target
	}
	e.down.note(e.Spec.ID, backend, err)
}
