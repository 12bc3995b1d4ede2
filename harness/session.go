package harness

import (
	"context"
	"fmt"
	"slices"

	"github.com/tenantcanary/tenantcanary/internal/dotpath"
)

// SessionInfo is the reply of session.create and session.resume.
type SessionInfo struct {
	SessionID       string `json:"session_id"`
	StoredSessionID string `json:"stored_session_id"`
	Info            struct {
		Model       string `json:"model"`
		ProfileName string `json:"profile_name"`
		Cwd         string `json:"cwd"`
	} `json:"info"`
	// NoModel, set by the harness (never by a reply), is why the session
	// reports no model: a chat transport's sessions are the harness's own.
	// The launch-bleed check of info.model is then skipped with it.
	NoModel string `json:"-"`
}

// noModel is why a chat transport's session reports no model.
const noModel = "a chat transport's sessions are the harness's own and report no model (each turn's model is on the tenant's provider requests, which the request checks see)"

// CreateSession opens a session of profile ("" for the launch profile).
func (c *RPC) CreateSession(ctx context.Context, profile string) (SessionInfo, error) {
	var s SessionInfo
	err := c.Call(ctx, "session.create", createParams(profile), &s)
	if c.chat != nil {
		s.NoModel = noModel
	}
	return s, err
}

// PostCreateSession asks for a session in profile without waiting for
// it: done gets the outcome (see Post).
func (c *RPC) PostCreateSession(profile string, done func(error)) error {
	return c.Post("session.create", createParams(profile), done)
}

// createParams are session.create's params for profile ("" the
// connection's own).
func createParams(profile string) map[string]any {
	params := map[string]any{}
	if profile != "" {
		params["profile"] = profile
	}
	return params
}

// ResumeSession reopens a stored session under a new live id.
func (c *RPC) ResumeSession(ctx context.Context, storedID, profile string) (SessionInfo, error) {
	params := map[string]any{"session_id": storedID}
	if profile != "" {
		params["profile"] = profile
	}
	var s SessionInfo
	err := c.Call(ctx, "session.resume", params, &s)
	return s, err
}

// TurnEnd reports whether ev ends a turn of session sid (its end event or
// an error event), in the connection's dialect.
func (c *RPC) TurnEnd(ev Event, sid string) bool {
	return ev.SessionID == sid && c.endsTurn(ev)
}

// endsTurn reports whether ev ends the turn it belongs to: an error event,
// or the dialect's turn-end event (with, where the dialect names one, its
// final value in the turn-end field).
func (c *RPC) endsTurn(ev Event) bool {
	em := c.eventMap()
	switch {
	case ev.Type == em.Error:
		return true
	case ev.Type != em.TurnEnd:
		return false
	case em.TurnEndField == "":
		return true
	}
	v, _ := dotpath.Get(ev.Payload, em.TurnEndField)
	s, _ := v.(string)
	return slices.Contains(em.TurnEndValues, s)
}

// Turn submits text to session sid and waits for the turn's end. It fails
// when the turn ends with status error or an error event, naming the
// session and showing the last frames.
func (c *RPC) Turn(ctx context.Context, sid, text string) (Event, error) {
	return c.turn(ctx, 0, sid, text)
}

// TurnWithID is Turn with the prompt.submit request id the caller chooses
// (see CallWithID).
func (c *RPC) TurnWithID(ctx context.Context, id int64, sid, text string) (Event, error) {
	if id <= 0 {
		return Event{}, fmt.Errorf("%s: prompt.submit: request id %d: want one above 0", c.name, id)
	}
	return c.turn(ctx, id, sid, text)
}

// turn is Turn with its prompt.submit sent as request id (0: the
// connection's next).
func (c *RPC) turn(ctx context.Context, id int64, sid, text string) (Event, error) {
	mark := c.EventCount()
	var ack struct {
		Status string `json:"status"`
	}
	params := map[string]any{"session_id": sid, "text": text}
	submit := func() error { return c.Call(ctx, "prompt.submit", params, &ack) }
	if id != 0 {
		submit = func() error { return c.CallWithID(ctx, id, "prompt.submit", params, &ack) }
	}
	if err := submit(); err != nil {
		return Event{}, err
	}
	em := c.eventMap()
	ev, err := c.WaitEvent(ctx, mark, "the end of the turn of session "+sid+" (event "+em.TurnEnd+" or "+em.Error+")", func(e Event) bool {
		return e.SessionID == sid && c.endsTurn(e)
	})
	if err != nil {
		return ev, err
	}
	status, _ := dotpath.Get(ev.Payload, em.Status)
	if s, _ := status.(string); ev.Type != em.TurnEnd || s != em.StatusOK {
		return ev, fmt.Errorf("turn of session %s failed: %s", sid, truncate(string(ev.Raw), 500))
	}
	return ev, nil
}
