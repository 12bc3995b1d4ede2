// The Manager's calls into its host (plugins, tools, hooks, config
// schemas) and its answers to the host's own requests.

package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
)

// serveHost answers the host's requests: loading notices, nested tool
// dispatch and facade calls, each run as the session of the call it is
// nested in.
func (m *Manager) serveHost(h *hostProc, f *Frame) {
	if f.ID == 0 {
		return
	}
	timeout := m.cfg.CallTimeout
	if f.TimeoutMS > 0 {
		timeout = min(timeout, time.Duration(f.TimeoutMS)*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(withReadToken(context.Background(), f), timeout)
	defer cancel()
	if f.Op == opLoading {
		var b loadingBody
		err := decode(f, &b)
		if err == nil {
			h.mu.Lock()
			h.loading = b.Name
			h.mu.Unlock()
		}
		h.conn.reply(ctx, f.ID, nil, err)
		return
	}
	session := ""
	if f.Parent != 0 {
		s, ok := h.conn.sessionOf(f.Parent)
		if !ok {
			h.conn.reply(ctx, f.ID, nil, fmt.Errorf("nested %s names call %d, which is not in flight: %w", f.Op, f.Parent, ErrNotFound))
			return
		}
		session = s
	}
	ctx = plugin.WithSession(ctx, session)
	var out string
	var err error
	switch f.Op {
	case opDispatch:
		var b callBody
		if err = decode(f, &b); err == nil {
			out, err = m.cfg.Backend.DispatchTool(ctx, session, b.Tool, b.Args)
		}
	case opFacade:
		var b facadeBody
		if err = decode(f, &b); err == nil {
			out, err = m.cfg.Backend.Facade(ctx, session, b.Facade, b.Method, b.Args)
		}
	default:
		err = fmt.Errorf("operation %q: %w", f.Op, ErrUnsupported)
	}
	if err != nil {
		h.conn.reply(ctx, f.ID, nil, err)
		return
	}
	h.conn.reply(ctx, f.ID, resultBody{out}, nil)
}

// request sends one request to the live host (starting it if need be) and
// wraps every error with what was asked of which host.
func (m *Manager) request(ctx context.Context, what, op, session string, body any) (*hostProc, json.RawMessage, error) {
	for attempt := 0; ; attempt++ {
		h, err := m.ensure(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		raw, err := m.requestOn(ctx, h, what, op, session, body)
		if resend(ctx, attempt, err) {
			continue
		}
		return h, raw, err
	}
}

// resend reports whether a request that failed with err goes again, to the
// host that replaces the one it was meant for. It goes once, and only when
// that host never received it: a host can die between being picked as live
// and being written to, and the caller would have reached its successor a
// moment later. A request the host did receive is never sent twice.
func resend(ctx context.Context, attempt int, err error) bool {
	return attempt == 0 && notSent(err) && ctx.Err() == nil
}

func (m *Manager) requestOn(ctx context.Context, h *hostProc, what, op, session string, body any) (json.RawMessage, error) {
	b, err := encodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("%s: arguments are not plain data: %w", what, err)
	}
	// Which deadline binds is decided here, not from the time left a
	// moment later: on a loaded machine that moment can be long.
	parent, bounded := ctx.Deadline()
	byCallTimeout := !bounded || time.Until(parent) >= m.cfg.CallTimeout
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	f := &Frame{Op: op, Session: session, Body: b}
	h.lastCall.Store(&what)
	var allowed time.Duration
	if dl, ok := ctx.Deadline(); ok {
		allowed = time.Until(dl)
		f.TimeoutMS = max(1, allowed.Milliseconds())
	}
	raw, err := h.conn.request(ctx, f, session)
	if err != nil {
		var we *Error
		if errors.Is(err, ErrTimeout) && !errors.As(err, &we) {
			// Not the plugin's own timeout error: the host did not answer.
			limit := fmt.Sprintf("its deadline of %v", allowed.Round(time.Millisecond))
			if byCallTimeout {
				limit = fmt.Sprintf("plugins.host.call_timeout (%v)", m.cfg.CallTimeout)
			}
			return nil, m.pastDeadline(h, what, limit, err)
		}
		if errors.As(err, &we) {
			return nil, fmt.Errorf("%s in the %s: %w", what, h.desc, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return raw, nil
}

// pastDeadline ends a host whose call ran past its deadline: the plugin
// code may still be running (a busy loop, an allocation), and only ending
// the process stops it. The error names the call, the host (so the
// profile) and the deadline.
func (m *Manager) pastDeadline(h *hostProc, what, limit string, err error) error {
	if m.cfg.KeepPastDeadline {
		return fmt.Errorf("%s in the %s: no answer within %s: %w", what, h.desc, limit, err)
	}
	h.mu.Lock()
	killed := false
	if !h.stopping && !h.reaped && h.killedFor == "" {
		h.killedFor = fmt.Sprintf("killed: %s ran past %s", what, limit)
		h.kill()
		killed = true
	}
	h.mu.Unlock()
	if killed {
		// Calls from now on wait for the restart rather than reach it.
		h.conn.fail(fmt.Errorf("%s: %s: %w", h.desc, h.killedFor, ErrUnavailable))
		fmt.Fprintf(m.cfg.Log, "agentd: %s: %s ran past %s; killed the host and everything it started\n", h.desc, what, limit)
	}
	return fmt.Errorf("%s in the %s: no answer within %s; the host was killed (a new one starts on the next call): %w",
		what, h.desc, limit, err)
}

// Plugins reports every discovered plugin and how loading it went in the
// live host (starting it if need be).
func (m *Manager) Plugins(ctx context.Context) ([]PluginStatus, error) {
	h, err := m.ensure(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]PluginStatus(nil), h.plugins...), nil
}

// Tools lists the tools of the plugins loaded in the host. When the host
// cannot run because its restart budget is spent, it returns the tools the
// last host had with the error (wrapping ErrBudgetExhausted): a caller keeps
// them listed, and calling one fails with the reason.
func (m *Manager) Tools(ctx context.Context) ([]ToolSpec, error) {
	ps, err := m.Plugins(ctx)
	if err != nil {
		if errors.Is(err, ErrBudgetExhausted) {
			m.mu.Lock()
			out := make([]ToolSpec, 0, len(m.known))
			for _, t := range m.known {
				out = append(out, t)
			}
			m.mu.Unlock()
			sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
			return out, err
		}
		return nil, err
	}
	var out []ToolSpec
	for _, p := range ps {
		out = append(out, p.Tools...)
	}
	return out, nil
}

// Call runs a plugin tool in the host as session.
func (m *Manager) Call(ctx context.Context, session, tool string, args map[string]any) (string, error) {
	for attempt := 0; ; attempt++ {
		what := "call tool " + tool
		h, err := m.ensure(ctx)
		if err != nil {
			m.mu.Lock()
			spec, ok := m.known[tool]
			m.mu.Unlock()
			if ok {
				what = fmt.Sprintf("call tool %s of plugin %s", tool, spec.Plugin)
			}
			return "", fmt.Errorf("%s: %w", what, err)
		}
		h.mu.Lock()
		spec, ok := h.tools[tool]
		h.mu.Unlock()
		if !ok {
			return "", fmt.Errorf("%s: no plugin in the %s registered it: %w", what, h.desc, ErrNotFound)
		}
		what = fmt.Sprintf("call tool %s of plugin %s", tool, spec.Plugin)
		raw, err := m.requestOn(ctx, h, what, opCall, session, callBody{Tool: tool, Args: args})
		if resend(ctx, attempt, err) {
			continue
		}
		if err != nil {
			return "", err
		}
		return resultOf(raw, what)
	}
}

// Hook runs every hook registered for event in the host, as session. A
// payload value that is not plain data (a live handle) arrives as
// isolation.HostPlaceholder.
func (m *Manager) Hook(ctx context.Context, session, event string, payload map[string]any) error {
	what := "run hook " + event
	plain := make(map[string]any, len(payload))
	for k, v := range payload {
		if _, err := json.Marshal(v); err != nil {
			v = isolation.HostPlaceholder
		}
		plain[k] = v
	}
attempts:
	for attempt := 0; ; attempt++ {
		h, err := m.ensure(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		h.mu.Lock()
		refs := append([]Ref(nil), h.hooks[event]...)
		h.mu.Unlock()
		var errs []error
		for i, r := range refs {
			_, err := m.requestOn(ctx, h, what, opHook, session, hookBody{Ref: r, Payload: plain})
			if i == 0 && resend(ctx, attempt, err) {
				// No hook ran yet: run them all in the new host.
				continue attempts
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// ConfigSchema runs a plugin's registered config schema function in the
// host.
func (m *Manager) ConfigSchema(ctx context.Context, pluginName string) (map[string]any, error) {
	_, raw, err := m.request(ctx, "config schema of plugin "+pluginName, opSchema, plugin.SessionID(ctx), schemaBody{Plugin: pluginName})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("config schema of plugin %s: %v: %w", pluginName, err, ErrProtocol)
	}
	return out, nil
}
