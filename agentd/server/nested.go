package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
	"github.com/tenantcanary/tenantcanary/host"
)

// ErrUnknownSession is returned by DispatchTool for a session that is not live.
var ErrUnknownSession = errors.New("unknown live session")

// ErrUnknownTool is returned by DispatchTool for a tool the session's
// profile does not offer.
var ErrUnknownTool = errors.New("unknown tool")

// DispatchTool runs one of the tools offered in a live session's turns as
// that session: in its profile's scope, with its shell. It is how a
// plugin's nested call (plugin -> ctx.DispatchTool -> server) comes back
// into the server as the session that made the outer call.
func (s *Server) DispatchTool(ctx context.Context, sessionID, tool string, args map[string]any) (string, error) {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.mu.Unlock()
	if sess == nil {
		return "", fmt.Errorf("dispatch %s: %w %q", tool, ErrUnknownSession, sessionID)
	}
	if err := s.checkSession(ctx, sess, "the nested tool call "+tool); err != nil {
		return "", fmt.Errorf("dispatch %s: %w", tool, err)
	}
	sc := sess.Scope
	snap, err := sc.Load()
	if err != nil {
		return "", fmt.Errorf("dispatch %s: %w", tool, err)
	}
	t, ok := s.toolsOf(sc).Get(tool)
	if !ok {
		return "", fmt.Errorf("dispatch: %w %q in profile %q", ErrUnknownTool, tool, sc.Profile.Name)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return "", fmt.Errorf("dispatch %s: encode arguments: %w", tool, err)
	}
	if args == nil {
		raw = []byte("{}")
	}
	return t.Call(ctx, &agent.Env{
		Session: sess.ID, Stored: sess.Stored, Profile: sc.Profile.Name, Home: sc.Profile.Home,
		Shell: func(ctx context.Context) (*terminal.Shell, error) { return sess.shellFor(ctx, snap) },
	}, raw)
}

// Facade serves a plugin's facade call as the live session: "state" get
// and set (a key-value store of the session) and "llm" complete (one
// answer from the session's profile's own provider and model, no tools).
func (s *Server) Facade(ctx context.Context, sessionID, facade, method string, args []string) (string, error) {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.mu.Unlock()
	if sess == nil {
		return "", fmt.Errorf("facade %s.%s: %w %q", facade, method, ErrUnknownSession, sessionID)
	}
	need := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("facade %s.%s: want %d arguments, got %d", facade, method, n, len(args))
		}
		return nil
	}
	switch facade + "." + method {
	case "state.get":
		if err := need(1); err != nil {
			return "", err
		}
		var v string
		s.pluginState(sess, func(state map[string]string) { v = state[args[0]] })
		return v, nil
	case "state.set":
		if err := need(2); err != nil {
			return "", err
		}
		s.pluginState(sess, func(state map[string]string) { state[args[0]] = args[1] })
		return "", nil
	case "llm.complete":
		if err := need(1); err != nil {
			return "", err
		}
		if err := s.checkSession(ctx, sess, "the nested model request"); err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		sc := s.facadeScope(ctx, sess.Scope)
		snap, err := sc.Load()
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		client, err := s.toolsOf(sc).ModelClient(ctx, sess.hookEnv(), sc.Client(snap))
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		resp, err := client.Stream(ctx, llm.Request{Model: snap.Config.Model.Default,
			Messages: []llm.Message{{Role: "user", Content: args[0]}}}, nil)
		if err != nil {
			return "", fmt.Errorf("facade llm.complete: %w", err)
		}
		return resp.Message.Content, nil
	}
	return "", fmt.Errorf("facade %s.%s: %w", facade, method, host.ErrUnsupported)
}
