package host

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type sessionBackend struct {
	mu   sync.Mutex
	seen []string
}

func (b *sessionBackend) DispatchTool(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = append(b.seen, session)
	return "ran as " + session, nil
}

func (b *sessionBackend) Facade(ctx context.Context, session, facade, method string, args []string) (string, error) {
	return "", ErrUnsupported
}

// A host names the parent call its nested call belongs to; the server runs
// it as the session it recorded for that call, never as a session the host
// claims, and refuses a call that is not in flight.
func TestNestedCallsRunAsTheParentsRecordOfTheSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	be := &sessionBackend{}
	m, err := New(Config{Profile: "p", Command: []string{"unused"}, Backend: be})
	require.NoError(t, err)
	h := &hostProc{desc: "plugin host for profile p (test)"}
	parentCalls := make(chan *Frame, 1)
	var server, child *conn
	server, child = pair(t, DefaultMaxFrame, func(c *conn, f *Frame) { m.serveHost(h, f) }, func(c *conn, f *Frame) { parentCalls <- f })
	h.conn = server

	go func() { _, _ = server.request(ctx, &Frame{Op: opCall, Session: "alice"}, "alice") }()
	call := <-parentCalls

	nested := func(parent uint64) (string, error) {
		raw, err := child.request(ctx, &Frame{Op: opDispatch, Parent: parent, Session: "mallory", Body: mustJSON(callBody{Tool: "t"})}, "")
		if err != nil {
			return "", err
		}
		var r resultBody
		require.NoError(t, json.Unmarshal(raw, &r))
		return r.Result, nil
	}
	out, err := nested(call.ID)
	require.NoError(t, err)
	require.Equal(t, "ran as alice", out)
	_, err = nested(call.ID + 100)
	require.ErrorIs(t, err, ErrNotFound)
	out, err = nested(0)
	require.NoError(t, err)
	require.Equal(t, "ran as ", out, "a call naming no parent runs as no session")
	require.Equal(t, []string{"alice", ""}, be.seen)
}
