package scenarios

import (
	"context"
	"fmt"
	"time"
)

// Wait is one bounded wait, as a value: what it waits for, how long, and
// how often it looks. Await runs it.
type Wait struct {
	What   string        // what it waits for: a failed wait names it
	Within time.Duration // the deadline, counted from the start of the wait
	Poll   time.Duration // the pause between looks (default DefaultPoll)
	// Pause, when set, gives the pause before each next look instead of
	// Poll: a wait that looks again sooner to confirm what it saw.
	Pause func() time.Duration
}

// DefaultPoll is a Wait's pause between looks when it names none.
const DefaultPoll = 25 * time.Millisecond

// WaitError is a wait that ended unmet: what it waited for, its deadline,
// and the state its last look described. Err is the context's error when
// the context ended the wait, nil when the deadline passed.
type WaitError struct {
	What   string
	Within time.Duration
	Last   string
	Err    error
}

func (w *WaitError) Error() string {
	msg := fmt.Sprintf("waited %v for %s; last state: %s", w.Within, w.What, w.Last)
	if w.Err != nil {
		msg += " (" + w.Err.Error() + ")"
	}
	return msg
}

func (w *WaitError) Unwrap() error { return w.Err }

// Await looks at cond until it is met, the wait's deadline passes or ctx
// ends, pausing between looks (never sleeping past ctx). cond says
// whether the wait is met and describes the state it saw. It looks at
// least once; it returns nil once cond is met, or a *WaitError carrying
// the last state cond described.
func Await(ctx context.Context, w Wait, cond func() (met bool, last string)) error {
	deadline := time.Now().Add(w.Within)
	for {
		met, last := cond()
		if met {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return &WaitError{What: w.What, Within: w.Within, Last: last, Err: ctx.Err()}
		}
		pause := w.Poll
		if w.Pause != nil {
			pause = w.Pause()
		}
		if pause <= 0 {
			pause = DefaultPoll
		}
		if !sleepCtx(ctx, pause) {
			return &WaitError{What: w.What, Within: w.Within, Last: last, Err: ctx.Err()}
		}
	}
}
