package scenarios

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/dialecttest"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// framedTarget is the dialect server's second transport, from its target
// file alone (harness/testdata/dialect-framed-target.yaml): framed
// websocket messages first, or, with chatFirst, the HTTP chat selecting
// the agent by model.
func framedTarget(t *testing.T, chatFirst bool, edits ...string) harness.Target {
	t.Helper()
	dialectTarget(t) // builds the binary
	if chatFirst {
		swap, err := dialecttest.ChatFirst()
		require.NoError(t, err)
		edits = append(swap, edits...)
	}
	tg, err := dialecttest.TargetOf(dialecttest.FramedFile, t.TempDir(), dialectBin, edits...)
	require.NoError(t, err)
	require.Equal(t, map[bool]string{false: harness.TransportFramed, true: harness.TransportChat}[chatFirst], tg.Dialect.TransportList()[0].Kind)
	return tg
}

// transportProbeSpec drives the serve backend over the target's first
// transport: a session and a turn per tenant, each turn's probe result back
// on its own provider, the tool calls from the framed step.end events (a
// chat's stream carries none: its tool calls are the provider's), and an
// unknown profile's session falling back to the launch tenant's.
func transportProbeSpec() Spec {
	s := dialectProbeSpec() // its first phase: serve, sessions, a turn each
	s.ID, s.Purpose = "transport-probe", "the dialect server's turns over its second transport"
	s.Phases = []Phase{s.Phases[0], {Name: "transport", Run: func(e *Env) {
		kind := e.Box.Target.Dialect.TransportList()[0].Kind
		for _, t := range e.Tenants {
			c, sid := e.Conns[t.Name], e.Sessions[t.Name].SessionID
			calls := c.ToolCalls(sid, 0)
			switch kind {
			case harness.TransportFramed:
				if len(calls) != 1 || calls[0].Name != "exec" || !strings.Contains(calls[0].Args["cmd"].(string), tenants.ProbeBegin) {
					e.T.Errorf("framed: tool calls of %s from step.end: %+v, want one exec{cmd: the probe}", t.Name, calls)
				}
			case harness.TransportChat:
				if len(calls) != 0 {
					e.T.Errorf("chat: the dialect server streams no tool calls, got %+v", calls)
				}
			}
			if len(c.Frames()) == 0 {
				e.T.Errorf("%s: no frame kept on %s's connection: the RPC-frame scan would see nothing", kind, t.Name)
			}
		}
		e.UnknownProfile(e.Conns[e.Launch().Name], "nosuchprofile")
	}}}
	return s
}

func TestDialectTransportsPassClean(t *testing.T) {
	t.Parallel()
	for _, chat := range []bool{false, true} {
		t.Run(map[bool]string{false: "framed", true: "chat"}[chat], func(t *testing.T) {
			t.Parallel()
			rep, out := runDialect(t, transportProbeSpec(), framedTarget(t, chat))
			requireClean(t, rep, out)
			skipped := map[string]string{}
			for _, s := range rep.Skipped {
				skipped[s.Invariant] = s.Reason
			}
			if chat {
				require.Contains(t, skipped[string(LaunchBleed)], "chat transport's sessions", "a check the chat cannot make is skipped, never passed")
				require.Contains(t, skipped[string(PositiveControl)], "own model in own frames")
			} else {
				require.Empty(t, skipped)
			}
		})
	}
}

// TestDialectTransportsLeakIsFound: DIALECT_LEAK=1 puts the launch
// profile's .env in every answer of a named profile's session: in the
// reply.done frame over the framed websocket, in the answer's chunk over
// the chat; the RPC-frame scan finds it either way. DIALECT_LEAK=launch-env
// expands a named profile's key from the launch profile's .env: over the
// chat, its provider gets the launch key (a request finding).
func TestDialectTransportsLeakIsFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, leak string
		chat       bool
		inv        invariants.Invariant
		kind       tenants.Kind
	}{
		{"framed", "1", false, invariants.RPC, tenants.ProviderKey},
		{"chat", "1", true, invariants.RPC, tenants.ProviderKey},
		{"chat/launch-env", "launch-env", true, invariants.Request, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg := framedTarget(t, c.chat)
			tg.Env = map[string]string{"DIALECT_LEAK": c.leak}
			rep, out := runDialect(t, transportProbeSpec(), tg)
			requireLeak(t, rep, out, c.inv, "default", c.kind)
		})
	}
}

// requireLeak fails unless rep is a leak with a finding of invariant inv
// whose canary is owner's (of kind, unless kind is empty).
func requireLeak(t *testing.T, rep *Report, out harness.Outcome, inv invariants.Invariant, owner string, kind tenants.Kind) {
	t.Helper()
	require.Equal(t, Leak, rep.Result, "log:\n%s", strings.Join(out.Log, "\n"))
	for _, f := range rep.Findings() {
		if f.Invariant == inv && f.Owner == owner && (kind == "" || f.Kind == kind) {
			return
		}
	}
	t.Fatalf("no %s finding of %s's %s among %v", inv, owner, kind, rep.Findings())
}

// TestDialectTransportsCatalog runs catalog scenarios through the framed
// file: the profile lifecycle (hooks beside either transport) and the
// stdio backends speaking framed lines.
func TestDialectTransportsCatalog(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id   string
		chat bool
	}{{"profile-lifecycle", false}, {"profile-lifecycle", true}, {"stdio-separate", false}} {
		t.Run(c.id+map[bool]string{false: "/framed", true: "/chat"}[c.chat], func(t *testing.T) {
			t.Parallel()
			runCatalogDialect(t, c.id, framedTarget(t, c.chat), Pass)
		})
	}
}

// stagedEdits map the dialect server's staged events (DIALECT_EVENTS=
// staged: a reply.done with state "delta" after every step, the last one
// "final"; a step's arguments at step.call.input) in its framed target.
var stagedEdits = []string{"    tool_args: step.end\n    args_field: input\n    tool_field: tool\n",
	"    tool_args: step.end\n    args_field: step.call.input\n    tool_field: step.tool\n    turn_end_field: state\n    turn_end_values: [final]\n"}

// TestDialectStagedEvents: a server whose turn-end event comes after
// every step (state "delta") and ends the turn only with state "final",
// and whose tool arguments sit below the top level, certifies clean once
// its target file says so (turn_end_field, dotted args_field), and its
// leak switch is caught through it. The control: without turn_end_field
// the harness takes the first delta for the end of the turn.
func TestDialectStagedEvents(t *testing.T) {
	t.Parallel()
	ends := func(tg harness.Target) (*Report, harness.Outcome, []string) {
		var mu sync.Mutex
		var states []string
		spec := transportProbeSpec()
		spec.Phases = append(spec.Phases, Phase{Name: "turn-ends", Run: func(e *Env) {
			for _, tn := range e.Tenants {
				// A session of its own: without turn_end_field the
				// server is still playing the earlier phases' turns (the
				// harness took their first delta for their end), and a
				// turn in the same session may get no step of its own.
				sid := e.CreateSession(e.Conns[tn.Name], tn).SessionID
				ctx, cancel := e.ctx(e.Times.Turn)
				ev, err := e.Conns[tn.Name].Turn(ctx, sid, "Run the environment probe for "+tn.Name+".")
				cancel()
				if err != nil {
					e.T.Fatalf("turn of %s: %v", tn.Name, err)
				}
				mu.Lock()
				states = append(states, fmt.Sprint(ev.Payload["state"]))
				mu.Unlock()
			}
		}})
		tg.Env = map[string]string{"DIALECT_EVENTS": "staged"}
		rep, out := runDialect(t, spec, tg)
		return rep, out, states
	}
	rep, out, states := ends(framedTarget(t, false, stagedEdits...))
	requireClean(t, rep, out)
	require.Equal(t, []string{"final", "final"}, states, "every turn ended on its final event")

	leaky := framedTarget(t, false, stagedEdits...)
	leaky.Env = map[string]string{"DIALECT_LEAK": "1", "DIALECT_EVENTS": "staged"}
	rep, out = runDialect(t, transportProbeSpec(), leaky)
	requireLeak(t, rep, out, invariants.RPC, "default", tenants.ProviderKey)

	// The control: the same server, its target file naming no final
	// state: the first delta ends the turn.
	plain := framedTarget(t, false, stagedEdits[0], strings.ReplaceAll(stagedEdits[1], "    turn_end_field: state\n    turn_end_values: [final]\n", ""))
	_, _, states = ends(plain)
	require.Contains(t, states, "delta", "without turn_end_field a delta ended a turn")
}
