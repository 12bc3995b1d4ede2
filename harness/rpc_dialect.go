package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenantcanary/tenantcanary/internal/dotpath"
)

// DialOption shapes a connection.
type DialOption func(*RPC)

// WithDialect makes the connection speak d: logical operations become the
// server's methods, hooks run through hooks (nil: a hook is an error),
// turns are judged by d's events, and the connection speaks d's first
// transport (a stdio backend: its first that is not chat).
func WithDialect(d Dialect, hooks HookRunner) DialOption {
	return func(c *RPC) {
		dd := d.WithDefaults()
		c.dialect, c.hooks = &dd, hooks
	}
}

// WithTransport makes the connection speak t rather than its dialect's
// first transport (`canary-run target check` walks them all).
func WithTransport(t Transport) DialOption {
	return func(c *RPC) {
		tt := t.WithDefaults()
		c.transport = &tt
	}
}

// Transport is the transport the connection speaks.
func (c *RPC) Transport() Transport { return c.speaks }

// transportFor is the transport a connection speaks: WithTransport's, else
// the dialect's first (stdio: its first that is not chat).
func (c *RPC) transportFor(stdio bool) Transport {
	var d Dialect
	if c.dialect != nil {
		d = *c.dialect
	}
	switch {
	case c.transport != nil:
		return *c.transport
	case stdio:
		return d.stdioTransport()
	}
	return d.TransportList()[0]
}

func (c *Conn) apply(opts []DialOption) {
	for _, o := range opts {
		o(c.RPC)
	}
}

// eventMap is the connection's event names (agentd's without a dialect).
func (c *RPC) eventMap() EventMap {
	if c.dialect != nil {
		return c.dialect.Events
	}
	return Dialect{}.WithDefaults().Events
}

// callDialect is Call through the connection's dialect, as request id
// (0: the connection's next).
func (c *RPC) callDialect(ctx context.Context, id int64, op string, params any, result any) error {
	if c.chat != nil && chatBuiltins[op] {
		return c.chat.call(ctx, op, asMap(params), result)
	}
	key, spec, mapped := c.dialect.spec(op, params)
	if !mapped {
		if c.chat != nil {
			return &UnsupportedError{Op: op, Reason: "the chat transport cannot express it (map it to a hook, or declare it unsupported)"}
		}
		return c.call(ctx, id, op, params, result)
	}
	logical, spec, err := forCall(key, spec, params)
	if err != nil {
		return err
	}
	var raw []byte
	switch {
	case len(spec.Hook) > 0 && id != 0:
		return &UnsupportedError{Op: key, Reason: "the target runs it as a hook, which has no request id"}
	case len(spec.Hook) > 0:
		if c.hooks == nil {
			return fmt.Errorf("%s: the target runs it as a hook, and this connection has no hook runner", key)
		}
		out, err := c.hooks(ctx, key, logical, spec.Hook, spec.HookEnv)
		if err != nil {
			return fmt.Errorf("%s (hook): %w", key, err)
		}
		raw = hookReply(out)
	case c.chat != nil:
		return &UnsupportedError{Op: key, Reason: fmt.Sprintf("the chat transport cannot express method %q (only a hook runs beside a chat)", spec.Method)}
	default:
		var res json.RawMessage
		if err := c.call(ctx, id, spec.Method, spec.wireParams(logical, c.dialect.LaunchAgent), &res); err != nil {
			var rerr *RPCError
			if errors.As(err, &rerr) {
				return fmt.Errorf("%s (as %s): %w", key, spec.Method, err)
			}
			return err
		}
		raw = res
	}
	if result == nil {
		return nil
	}
	mappedRaw, err := mapResult(raw, spec)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := json.Unmarshal(mappedRaw, result); err != nil {
		return fmt.Errorf("%s: decode result %s: %w", key, truncate(string(mappedRaw), 200), err)
	}
	return nil
}

// forCall is the mapping key's spec gives a call with params: the logical
// params as a map and the spec for them (ByProfile where it applies), or
// the UnsupportedError of a spec that declares the operation unsupported.
func forCall(key string, spec MethodSpec, params any) (map[string]any, MethodSpec, error) {
	logical := asMap(params)
	spec = spec.forCall(logical)
	if spec.Unsupported != "" {
		return nil, spec, &UnsupportedError{Op: key, Reason: spec.Unsupported}
	}
	return logical, spec, nil
}

// WithoutArgs is ev's payload as JSON with the tool call's arguments taken
// out (the field the dialect names), so what is left is what the tool
// returned and who called it: a command's own text is no proof that it ran.
func (c *RPC) WithoutArgs(ev Event) string {
	em := c.eventMap()
	b, _ := json.Marshal(dotpath.Without(ev.Payload, em.ArgsField))
	return string(b)
}

// ToolCall is a tool call a session's events announced.
type ToolCall struct {
	Name string
	Args map[string]any
}

// ToolCalls are the tool calls of session sid among the events from index
// from on, read from the event the dialect says carries their arguments
// (tool.start in agentd; tool.complete in Hermes).
func (c *RPC) ToolCalls(sid string, from int) []ToolCall {
	em := c.eventMap()
	var out []ToolCall
	for _, e := range c.Events() {
		if e.Index < from || e.SessionID != sid || e.Type != em.ToolArgs {
			continue
		}
		tc := ToolCall{}
		name, _ := dotpath.Get(e.Payload, em.ToolField)
		tc.Name, _ = name.(string)
		args, _ := dotpath.Get(e.Payload, em.ArgsField)
		switch a := args.(type) {
		case map[string]any:
			tc.Args = a
		case string:
			_ = json.Unmarshal([]byte(a), &tc.Args)
		}
		if tc.Args == nil {
			continue
		}
		out = append(out, tc)
	}
	return out
}
