package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/store"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
)

// Session is a live session: one profile's scope, one owner connection,
// one persistent shell, its history.
type Session struct {
	ID     string
	Stored string
	Scope  *scope.Scope
	conn   rpc.Conn                      // owner; nil for detached (cron, gateway) sessions
	sink   func(typ string, payload any) // events of a detached session, when set

	turn sync.Mutex // held for a whole turn

	mu         sync.Mutex
	busy       bool
	closed     bool
	history    []llm.Message
	shell      *terminal.Shell
	shellCwd   string                                    // cwd the shell was last put in from config
	shellEnv   map[string]string                         // environment the shell was last given
	shellBox   *sandbox.Policy                           // the shell's sandbox (nil: unconfined)
	shellStamp string                                    // its home's entries as the sandbox granted them (Policy.HomeStamp)
	sandboxFor func(cwd string) (*sandbox.Policy, error) // the sandbox of a shell in cwd; nil: none
	cancelTurn context.CancelFunc
	state      map[string]string // the plugins' state facade of this session
	lifecycle  *agent.Registry   // the tools whose session hooks and memory StartSession ran
	unfollow   func()            // cluster mode: stop following the profile's events

	// Seeded faults (test-only; see package faults).
	broadcast   func(frame []byte)                          // broadcast-events
	sharedShell func(opts terminal.Options) *terminal.Shell // shared-shell
	processCwd  bool                                        // global-cwd: shells start in the process cwd
}

func newLiveID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

// emit sends one event of this session to its owner connection only.
func (s *Session) emit(typ string, payload any) {
	if s.sink != nil {
		s.sink(typ, payload)
		return
	}
	frame := rpc.EventFrame(rpc.Event{Type: typ, SessionID: s.ID, Payload: payload})
	if s.broadcast != nil {
		s.broadcast(frame)
		return
	}
	if s.conn == nil {
		return
	}
	_ = s.conn.Send(frame)
}

// shellFor returns the session's shell, started (or brought up to date)
// with the turn's cwd and environment.
func (s *Session) shellFor(ctx context.Context, snap *scope.Snapshot) (*terminal.Shell, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %s is closed", s.ID)
	}
	cwd := snap.Config.Terminal.Cwd
	if s.processCwd {
		if wd, err := os.Getwd(); err == nil {
			cwd = wd
		}
	}
	env := envMap(snap.ToolEnv)
	if s.sharedShell != nil {
		s.mu.Unlock()
		return s.sharedShell(terminal.Options{Dir: cwd, Env: snap.ToolEnv}), nil
	}
	var box *sandbox.Policy
	if s.sandboxFor != nil {
		b, err := s.sandboxFor(cwd)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		box = b
		if box != nil && box.Dir != "" {
			// The shell starts where its sandbox binds the workdir: its
			// real path (a cwd that is a link outside every bound folder
			// does not exist in the sandbox).
			cwd = box.Dir
		}
	}
	var stamp string
	if box != nil {
		// Taken before the shell starts: a file written anew in between
		// restarts it once more, never leaves it without the file.
		stamp = box.HomeStamp()
	}
	sameBox := reflect.DeepEqual(box, s.shellBox)
	if s.shell != nil && (!sameBox || stamp != s.shellStamp) {
		// A workdir the running sandbox does not hold (or a new mode), or a
		// home entry it was granted as another file: the next shell starts
		// in a new sandbox, with the new settings.
		why := "its sandbox changed (workdir " + cwd + ")"
		if sameBox {
			why = "its sandbox changed (a file at its home's top level was made anew since the shell started, and the sandbox grants each as it was then)"
		}
		sh := s.shell
		s.shellCwd, s.shellEnv, s.shellBox, s.shellStamp = cwd, env, box, stamp
		s.mu.Unlock()
		sh.SetStart(cwd, snap.ToolEnv)
		sh.Reconfine(box, why)
		return sh, nil
	}
	if s.shell == nil {
		s.shell = terminal.New(terminal.Options{Dir: cwd, Env: snap.ToolEnv, Sandbox: box})
		s.shellCwd, s.shellEnv, s.shellBox, s.shellStamp = cwd, env, box, stamp
		sh := s.shell
		s.mu.Unlock()
		return sh, nil
	}
	sh := s.shell
	var steps []string
	if cwd != s.shellCwd {
		steps = append(steps, "cd -- "+shellQuote(cwd))
	}
	if diff := envDiff(s.shellEnv, env); diff != "" {
		steps = append(steps, diff)
	}
	s.shellCwd, s.shellEnv = cwd, env
	s.mu.Unlock()
	// A shell started from now on starts with the new settings; a live one
	// keeps its state and has the new settings brought in.
	sh.SetStart(cwd, snap.ToolEnv)
	if len(steps) > 0 && sh.Pid() != 0 {
		if _, err := sh.Run(ctx, strings.Join(steps, "; ")); err != nil {
			return nil, fmt.Errorf("apply new settings to the shell: %w", err)
		}
	}
	return sh, nil
}

// Why a session ended, as its session end hooks are told (payload
// "reason").
const (
	EndClosed        = "closed"          // session.close
	EndDisconnected  = "disconnected"    // its connection went
	EndProfileDelete = "profile deleted" // profiles.delete of its profile
	EndServerStop    = "server stopped"  // Shutdown
	EndDetachedDone  = "turn done"       // a cron job's or gateway request's turn ended
)

// lifecycleTimeout bounds a session's start or end hooks and memory calls,
// so a wedged plugin host cannot hold a session.create or a shutdown.
const lifecycleTimeout = 10 * time.Second

// hookEnv is what the session's start and end hooks run as: the session,
// with no shell (an ending session starts none).
func (s *Session) hookEnv() *agent.Env {
	return &agent.Env{Session: s.ID, Stored: s.Stored, Profile: s.Scope.Profile.Name, Home: s.Scope.Profile.Home}
}

// start runs the session start hooks and opens the plugins' memory for
// the session, in its profile's own plugins (tools is its profile's).
func (s *Session) start(ctx context.Context, tools *agent.Registry, payload map[string]any) {
	if !tools.HasSessionWork() {
		return // no plugins: nothing to start, or to end
	}
	s.mu.Lock()
	s.lifecycle = tools
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimeout)
	defer cancel()
	env := s.hookEnv()
	env.Emit = s.emit // a plugin that did not load is said to the session's owner, before the reply
	tools.StartSession(ctx, env, payload)
}

// cancelCurrentTurn cancels the turn the session is playing, if any.
func (s *Session) cancelCurrentTurn() {
	s.mu.Lock()
	cancel := s.cancelTurn
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// close ends the session: cancels its turn, kills its shell, and runs its
// session end hooks and shuts its memory down (once, and only if it was
// started) once the turn has returned.
func (s *Session) close(reason string) {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	sh := s.shell
	cancel := s.cancelTurn
	tools := s.lifecycle
	s.lifecycle = nil
	unfollow := s.unfollow
	s.unfollow = nil
	s.mu.Unlock()
	if unfollow != nil {
		unfollow()
	}
	if cancel != nil {
		cancel()
	}
	if sh != nil {
		_ = sh.Close() // ends the turn's tool command too, so the turn returns
	}
	if tools != nil && !already {
		ctx, cancelHooks := context.WithTimeout(context.Background(), lifecycleTimeout)
		if cancel != nil {
			s.awaitTurn(ctx) // its last hooks and memory sync come before the end
		}
		tools.EndSession(ctx, s.hookEnv(), map[string]any{"reason": reason})
		cancelHooks()
	}
}

// awaitTurn waits, until ctx ends, for the session's cancelled turn to
// return. The goroutine waiting on the turn's lock ends when the turn does.
func (s *Session) awaitTurn(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.turn.Lock()
		s.turn.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// envDiff is the shell code turning environment old into new.
func envDiff(old, new map[string]string) string {
	var parts []string
	keys := make([]string, 0, len(new))
	for k := range new {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if ov, ok := old[k]; !ok || ov != new[k] {
			parts = append(parts, "export "+k+"="+shellQuote(new[k]))
		}
	}
	var gone []string
	for k := range old {
		if _, ok := new[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	if len(gone) > 0 {
		parts = append(parts, "unset "+strings.Join(gone, " "))
	}
	return strings.Join(parts, "; ")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// toStored converts a chat message for the store.
func toStored(m llm.Message) store.Message {
	out := store.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
	if len(m.ToolCalls) > 0 {
		b, _ := json.Marshal(m.ToolCalls)
		out.ToolCalls = string(b)
	}
	return out
}

// fromStored converts stored messages back into chat history.
func fromStored(msgs []store.Message) []llm.Message {
	out := make([]llm.Message, 0, len(msgs))
	for _, m := range msgs {
		lm := llm.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.ToolCalls != "" {
			_ = json.Unmarshal([]byte(m.ToolCalls), &lm.ToolCalls)
		}
		out = append(out, lm)
	}
	return out
}
