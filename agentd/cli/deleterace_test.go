package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// racer is a tenant's connection (bound by its API_SERVER_KEY) looping
// session.create, config.set, model.save_key and prompt.submit, each
// carrying its canary, until halted. It counts the replies it got and the
// iterations every call of which succeeded.
type racer struct {
	ws     *websocket.Conn
	canary string
	stop   chan struct{}
	done   chan struct{}
	nextID int
	ended  map[string]bool // sessions whose message.complete arrived

	mu      sync.Mutex
	replies int
	rounds  int
	err     error
	change  chan struct{}
}

func startRacer(t *testing.T, s *served, key, canary string) *racer {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(s.url(key), nil)
	require.NoError(t, err)
	r := &racer{ws: ws, canary: canary, stop: make(chan struct{}), done: make(chan struct{}), ended: map[string]bool{}, change: make(chan struct{})}
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, first, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(first), "gateway.ready")
	go r.loop() // ends at halt
	t.Cleanup(r.halt)
	return r
}

// errHalted ends the loop before its next request.
var errHalted = errors.New("halted")

// halt stops the loop before its next request, waits for the reply to
// the one in flight (so nothing of the connection is left in the server),
// then closes the connection; safe twice.
func (r *racer) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	_ = r.ws.Close()
}

// call sends a request and reads frames up to its reply; code is 0 on success.
func (r *racer) call(method string, params map[string]any) (map[string]any, int, error) {
	select {
	case <-r.stop:
		return nil, 0, errHalted
	default:
	}
	r.nextID++
	id := r.nextID
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := r.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		return nil, 0, err
	}
	for {
		m, err := r.read()
		if err != nil {
			return nil, 0, err
		}
		if m["id"] != float64(id) || m["method"] != nil {
			continue
		}
		r.note(func() { r.replies++ })
		if e, ok := m["error"].(map[string]any); ok {
			code, _ := e["code"].(float64)
			return nil, int(code), nil
		}
		res, _ := m["result"].(map[string]any)
		return res, 0, nil
	}
}

// read reads one frame, noting the sessions whose turn completed.
func (r *racer) read() (map[string]any, error) {
	if err := r.ws.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	_, msg, err := r.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, fmt.Errorf("bad frame %q: %w", msg, err)
	}
	if p, _ := m["params"].(map[string]any); eventType(m) == "message.complete" {
		sid, _ := p["session_id"].(string)
		r.ended[sid] = true
	}
	return m, nil
}

func (r *racer) loop() {
	defer close(r.done)
	fail := func(err error) {
		if !errors.Is(err, errHalted) {
			r.note(func() { r.err = err })
		}
	}
	for {
		res, c1, err := r.call("session.create", map[string]any{})
		if err != nil {
			fail(err)
			return
		}
		sid, _ := res["session_id"].(string)
		_, c2, err := r.call("config.set", map[string]any{"key": "prompt", "value": r.canary})
		if err != nil {
			fail(err)
			return
		}
		_, c3, err := r.call("model.save_key", map[string]any{"slug": "race", "api_key": r.canary})
		if err != nil {
			fail(err)
			return
		}
		c4 := -1
		if sid != "" {
			if _, c4, err = r.call("prompt.submit", map[string]any{"session_id": sid, "text": r.canary}); err != nil {
				fail(err)
				return
			}
			for c4 == 0 && !r.ended[sid] { // the turn ends, even when its profile is deleted
				if _, err := r.read(); err != nil {
					fail(err)
					return
				}
			}
			if _, _, err := r.call("session.close", map[string]any{"session_id": sid}); err != nil && !errors.Is(err, errHalted) {
				fail(err)
				return
			}
		}
		if c1 == 0 && c2 == 0 && c3 == 0 && c4 == 0 {
			r.note(func() { r.rounds++ })
		}
	}
}

func (r *racer) note(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	close(r.change)
	r.change = make(chan struct{})
}

// await waits until pred holds over (replies, rounds), or the loop ended.
func (r *racer) await(t *testing.T, what string, pred func(replies, rounds int) bool) {
	t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, err, ch := pred(r.replies, r.rounds), r.err, r.change
		r.mu.Unlock()
		require.NoError(t, err, "the tenant's connection failed while waiting for %s", what)
		if ok {
			return
		}
		select {
		case <-ch:
		case <-r.done:
			r.mu.Lock()
			ok, err = pred(r.replies, r.rounds), r.err
			r.mu.Unlock()
			require.NoError(t, err)
			require.True(t, ok, "the tenant's connection ended before %s", what)
			return
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (r *racer) count() (replies, rounds int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replies, r.rounds
}

// homeHolds lists the files under home that hold any of the canaries.
func homeHolds(t *testing.T, home string, canaries []string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range canaries {
			if bytes.Contains(data, []byte(c)) {
				found = append(found, filepath.Base(path)+": "+c)
			}
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// raceResult is what deleteCreateRace saw over its rounds.
type raceResult struct {
	rounds, leaked, deleteFailed int
	leaks, deleteErrors          []string
}

// deleteCreateRace runs rounds of: a tenant's connections (racers of them) loop requests
// carrying a canary of the round in profile "victim"; once it has written
// the canary everywhere (a whole iteration succeeded: config.yaml, .env,
// state.db), the operator deletes the profile and creates it again, while
// the connection goes on; then, after a few more of its replies, the new
// home is scanned for the canary of every earlier round.
func deleteCreateRace(t *testing.T, rounds, racers int, env ...string) raceResult {
	t.Helper()
	w := newWorld(t)
	w.addTenant("alpha", true)
	provKey := "sk-prov-victim-" + tag()
	srv, err := fakellm.New(fakellm.Options{Keys: []string{provKey}, Responder: func(fakellm.Record) fakellm.Response { return fakellm.Text("ok") }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	s := w.startServe(nil, env...)
	op := s.dial()
	var res raceResult
	var canaries []string
	var prev []*racer
	for round := 0; round < rounds; round++ {
		if round == 0 {
			op.ok("profiles.create", map[string]any{"name": "victim"})
		}
		home := filepath.Join(w.launch, "profiles", "victim")
		key := "victim-key-" + tag()
		writeFile(t, filepath.Join(home, "config.yaml"), fmt.Sprintf(
			"model:\n  base_url: %s\n  default: m\n  key_env: TENANT_PROVIDER_KEY\n", srv.BaseURL))
		writeFile(t, filepath.Join(home, ".env"), "TENANT_PROVIDER_KEY="+provKey+"\nAPI_SERVER_KEY="+key+"\n")
		canary := fmt.Sprintf("racecanary%02dx%s", round, tag())
		canaries = append(canaries, canary)
		// The tenant's connections: several, as a tenant may open.
		var rs []*racer
		for range racers {
			rs = append(rs, startRacer(t, s, key, canary))
		}
		for _, r := range rs {
			r.await(t, "a whole iteration of round "+fmt.Sprint(round), func(_, rounds int) bool { return rounds >= 1 })
		}
		for _, r := range prev {
			r.halt()
		}
		require.NotEmpty(t, homeHolds(t, home, []string{canary}), "positive control: round %d's canary is in the home before its delete", round)

		del := op.call("profiles.delete", map[string]any{"name": "victim"})
		if e, ok := del["error"].(map[string]any); ok {
			res.deleteFailed++
			res.deleteErrors = append(res.deleteErrors, fmt.Sprint(e["message"]))
		}
		op.ok("profiles.create", map[string]any{"name": "victim"})
		for _, r := range rs {
			replies, _ := r.count()
			r.await(t, "4 more replies after the re-create", func(n, _ int) bool { return n >= replies+4 })
		}
		for _, r := range rs {
			r.halt() // its last request has been answered: nothing of it is in flight
		}
		if found := homeHolds(t, home, canaries); len(found) > 0 {
			res.leaked++
			res.leaks = append(res.leaks, fmt.Sprintf("round %d: %v", round, found))
		}
		res.rounds++
		prev = rs
	}
	s.stop()
	return res
}

// TestDeleteAndCreateAreAtomic: while a tenant's connection loops requests
// in its profile, the operator deletes and re-creates the profile, round
// after round: delete never fails, and the re-created home holds nothing
// of the deleted one (no canary of an earlier round in any of its files).
// With the delete-race fault the same race leaks (the positive control).
func TestDeleteAndCreateAreAtomic(t *testing.T) {
	t.Parallel()
	t.Run("defended", func(t *testing.T) {
		t.Parallel()
		res := deleteCreateRace(t, 20, 3)
		t.Logf("defended: %d of %d rounds leaked, %d deletes failed", res.leaked, res.rounds, res.deleteFailed)
		require.Zero(t, res.deleteFailed, "deletes failed: %v", res.deleteErrors)
		require.Zero(t, res.leaked, "re-created homes held the deleted one's data: %v", res.leaks)
	})
	t.Run("delete-race", func(t *testing.T) {
		t.Parallel()
		res := deleteCreateRace(t, 20, 3, "AGENTD_FAULTS=delete-race", "AGENTD_ALLOW_FAULTS=1")
		t.Logf("delete-race fault: %d of %d rounds leaked, %d deletes failed (%v)", res.leaked, res.rounds, res.deleteFailed, res.leaks)
		// The fault leaves the deleted home's .env (see server.deleteRacing),
		// so every round leaks; the race alone leaked in 10-35% of rounds.
		require.Equal(t, res.rounds, res.leaked, "positive control: with the fault a re-created home holds the deleted one's data")
	})
}
