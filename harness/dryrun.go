package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ErrDryPass is the error of a dry pass that did not get through.
var ErrDryPass = errors.New("the dry pass did not get through")

// ErrDryPassLeaked is the error of a dry pass that got through while the
// server leaked on the way (a session reporting another tenant's model, a
// turn whose provider requests carried another tenant's key): the target
// file drives the server, and the catalog will report the leaks as
// findings. Each leak is a "warn" line.
var ErrDryPassLeaked = errors.New("the dry pass got through, and the server leaked")

// DryPass makes one pass over target with two tenants under root, the way
// a new target file is tried: sandbox (profile root, homes), start, ready
// line, health check, connect, a session per tenant, one turn each, stop.
// It writes each step to w as it goes ("ok" or "FAIL" with a diagnosis of
// what did not match, "warn" for a leak seen on the way) and returns an
// error wrapping ErrDryPass at the first step that failed, or one wrapping
// ErrDryPassLeaked when every step got through and something leaked. A
// leak is no fault of the file: a turn that failed because its provider
// got another tenant's key is a warning, provided another tenant's turn
// got through every check. wait bounds each step's wait for the target (the ready
// line, a connection, a reply, a turn's end); 0 means 90s.
func DryPass(ctx context.Context, target Target, root string, w io.Writer, wait time.Duration) (err error) {
	if wait <= 0 {
		wait = 90 * time.Second
	}
	rep := &DryReport{W: w}
	step, fail := rep.Step, rep.Fail
	if err := target.Validate(); err != nil {
		return fail("target file", "%v", err)
	}
	step("target file", "%s %s is valid", target.Name, target.Version)
	if n := dryRemote(ctx, target, root, rep, wait); n > 0 {
		return fmt.Errorf("%w: %d command(s) of the remote: block failed (the FAIL lines)", ErrDryPass, n)
	}
	if len(target.Preflight) > 0 {
		out, err := Preflight(ctx, target, filepath.Join(root, "preflight"))
		if err != nil {
			return fail("preflight", "%v", err)
		}
		step("preflight", "%s: %s", strings.Join(target.Preflight, " "), lastLine(out))
	}
	box, err := NewSandbox(ctx, root, target, SandboxOptions{Tenants: tenants.Options{Names: tenants.Names(2)}})
	if err != nil {
		return fail("sandbox", "%v\n(the profile_root command must print a folder inside the sandbox; the homes are written there)", err)
	}
	defer rep.Close(box, &err)
	step("sandbox", "%d tenants under %s, profiles resolve inside it", len(box.Set.Tenants), box.Root)
	if p := box.SharedConfigPath(); p != "" {
		step("shared config", "%s: %d section(s) per tenant", p, len(target.SharedConfig.Sections))
	}

	var srv *Proc
	failed, walked := 0, 0
	walk := func(dial dialFunc, trs []Transport, what string) {
		walked += len(trs)
		for i, tr := range trs {
			if len(trs) > 1 {
				fmt.Fprintf(w, "----  %-18s %s (%d of %d)\n", "transport", tr.Label(), i+1, len(trs))
			}
			if !dryTransport(ctx, box, tr, w, wait, dial, what, rep) {
				failed++
			}
		}
	}
	switch {
	case len(target.Serve) > 0 || target.URL != "":
		base, token := target.URL, target.Token
		if target.URL == "" {
			token = dryToken()
			argv := Expand(target.Serve, map[string]string{"host": "127.0.0.1", "port": "0", "cron_interval": "1s"})
			if srv, err = box.Start(ctx, "serve", argv, false, map[string]string{target.TokenVar: token}); err != nil {
				return fail("start", "%v", err)
			}
			step("start", "%s (pid %d)", strings.Join(argv, " "), srv.Pid())
			ready := max(wait, target.ReadyWithin(0)) // a slow starter's own ready_timeout
			rctx, cancel := context.WithTimeout(ctx, ready)
			m, err := srv.WaitLine(rctx, target.ReadyRE())
			cancel()
			if err != nil {
				msg := fmt.Sprintf("no line matched ready_line %q within %v\n%v", target.ReadyLine, ready, err)
				select {
				case <-srv.Done():
					msg += fmt.Sprintf("\nthe server exited (%v); its output:\n%s", srv.ExitErr(), srv.Output())
				case <-time.After(5 * time.Second):
				}
				return fail("ready line", "%s", msg)
			}
			base = "http://" + target.ReadyAddr(m, "127.0.0.1")
			step("ready line", "%q -> %s", m[0], base)
		}
		if target.Dialect.Health != nil {
			hctx, cancel := context.WithTimeout(ctx, wait)
			err := target.WaitHealthy(hctx, base, token)
			cancel()
			if err != nil {
				return fail("health", "%v", err)
			}
			step("health", "GET %s answered 200", target.Dialect.Health.Path)
		}
		box.NoteServe(base, token)
		walk(func(dctx context.Context, t *tenants.Tenant, tr Transport) (*Conn, error) {
			return DialWebsocket(dctx, base, token, append(box.DialOptions(), WithTransport(tr))...)
		}, target.Dialect.TransportList(), "connection")
		if ok, _ := target.Supports(BackendStdio); ok && target.URL != "" {
			// A running server's stdio command, through its transport.
			fmt.Fprintf(w, "----  %-18s %s\n", "stdio", strings.Join(target.Stdio, " "))
			walk(dialStdio(ctx, box), []Transport{target.Dialect.stdioTransport()}, "stdio backend")
		}
	case len(target.Stdio) > 0:
		walk(dialStdio(ctx, box), []Transport{target.Dialect.stdioTransport()}, "stdio backend")
	default:
		return fail("start", "the dry pass drives a serve or stdio backend, and the target gives neither")
	}
	if failed > 0 {
		if srv != nil {
			_ = srv.Stop(20 * time.Second)
		}
		return fmt.Errorf("%w: %d of %d transport(s) failed (the FAIL lines)", ErrDryPass, failed, walked)
	}
	if srv != nil {
		if err := srv.Stop(20 * time.Second); err != nil && !isSignalExit(err) {
			return fail("stop", "the server did not exit cleanly on SIGTERM: %v\n%s", err, srv.Tail())
		}
	}
	step("stop", "the server stopped")
	if rep.Leaks > 0 {
		return fmt.Errorf("%w: %d leak(s) seen (the warn lines)", ErrDryPassLeaked, rep.Leaks)
	}
	return nil
}

// dialFunc opens tenant t's connection over transport tr.
type dialFunc func(ctx context.Context, t *tenants.Tenant, tr Transport) (*Conn, error)

// dialStdio starts a stdio backend of box's target per connection (its
// process lives as long as ctx) and dials it.
func dialStdio(ctx context.Context, box *Sandbox) dialFunc {
	return func(dctx context.Context, t *tenants.Tenant, tr Transport) (*Conn, error) {
		p, err := box.StartStdio(ctx, "stdio-"+t.Name)
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		c, err := DialStdio(dctx, p, append(box.DialOptions(), WithTransport(tr))...)
		if err != nil {
			return nil, fmt.Errorf("%w\nlast output:\n%s", err, p.Tail())
		}
		return c, nil
	}
}

// dryTransport is the dry pass over one transport: a connection per
// tenant, a session per tenant, one turn each (its tool calls from the
// declared events, or from the provider's side when a chat's stream
// carries none). It reports whether the transport got through; a step that
// did not is a FAIL line of rep's, a leak a warn line.
func dryTransport(ctx context.Context, box *Sandbox, tr Transport, w io.Writer, wait time.Duration, dial dialFunc, what string, rep *DryReport) bool {
	step, warn, fail := rep.Step, rep.Warn, rep.Fail
	target := box.Target
	conns := map[string]*Conn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, t := range box.Set.Tenants {
		dctx, cancel := context.WithTimeout(ctx, wait)
		c, err := dial(dctx, t, tr)
		cancel()
		if err != nil {
			hint := readyHint(target, tr)
			if strings.Contains(err.Error(), "the connect request") {
				hint = "(the server refused the transport's connect request: see dialect.transports[].connect)"
			}
			fail("connect", "%s for %s over %s: %v\n%s", what, t.Name, tr.Label(), err, hint)
			return false
		}
		conns[t.Name] = c
	}
	if tr.Kind == TransportChat {
		step("connect", "%d %s clients (a turn is a request; %s)", len(conns), tr.Label(), chatSelects(tr))
	} else {
		step("connect", "%d %ss, each ready", len(conns), connNoun(what, tr))
	}
	sessions := map[string]string{}
	for _, t := range box.Set.Tenants {
		profile := ""
		if !t.Launch {
			profile = t.Name
		}
		sctx, cancel := context.WithTimeout(ctx, wait)
		s, err := conns[t.Name].CreateSession(sctx, profile)
		cancel()
		if err != nil {
			fail("session.create", "for %s: %s", t.Name, diagnoseCall("session.create", err))
			return false
		}
		if s.SessionID == "" {
			fail("session.create", "for %s: the reply has no session_id (map it with dialect.methods.session.create.result)", t.Name)
			return false
		}
		sessions[t.Name] = s.SessionID
		if m := s.Info.Model; m != "" && m != t.Model() {
			owner := modelOwner(box.Set.Tenants, m)
			if owner == nil {
				fail("session.create", "session of %s reports model %q, not its own %q: its config.yaml was not read (see dialect.config)", t.Name, m, t.Model())
				return false
			}
			// Another tenant's model is no fault of the target file: the
			// catalog reports it (launch_bleed); the turn below shows
			// whether the tenant's own config drives the session.
			warn("session.create", "session of %s reports %s's model %q, not its own %q: the catalog will report it as a leak (launch_bleed)", t.Name, owner.Name, m, t.Model())
		}
	}
	step("session.create", "one session per tenant: %v", sessions)

	em := target.Dialect.WithDefaults().Events
	pt := target.Dialect.WithDefaults().ProbeTool
	turned := 0
	for _, t := range box.Set.Tenants {
		c := conns[t.Name]
		mark, reqMark := c.EventCount(), len(t.Requests())
		tctx, cancel := context.WithTimeout(ctx, wait)
		_, err := c.Turn(tctx, sessions[t.Name], "Run the environment probe for "+t.Name+".")
		cancel()
		if owner := foreignKeyOwner(box.Set.Tenants, t, reqMark); err != nil && owner != nil {
			warn("turn", "of %s failed, and its provider got requests carrying %s's provider key: the catalog will report it as a leak (request)\n%v\nproviders: %s", t.Name, owner.Name, err, providerSummary(t))
			continue
		}
		if err != nil {
			fail("turn", "of %s: %s\nevents seen in the turn: %s\nproviders: %s", t.Name, diagnoseCall("prompt.submit", err), eventTypes(c, mark), providerSummary(t))
			return false
		}
		if !probeReturned(t, reqMark) {
			fail("turn", "of %s ended, but the probe's output never came back to its provider: the server did not run the probe tool %s{%s} (set dialect.probe_tool)\nproviders: %s", t.Name, pt.Name, pt.Arg, providerSummary(t))
			return false
		}
		where := fmt.Sprintf("tool args in %s.%s", em.ToolArgs, em.ArgsField)
		if len(c.ToolCalls(sessions[t.Name], mark)) == 0 {
			if tr.Kind != TransportChat {
				fail("tool events", "turn of %s: no %s event carried the tool's arguments in field %q (set dialect.events.tool_args and args_field)\nevents seen in the turn: %s", t.Name, em.ToolArgs, em.ArgsField, eventTypes(c, mark))
				return false
			}
			where = "tool calls on the provider's side (the chat stream carries none)"
		}
		step("turn", "%s: ended with %s, %s, %s", t.Name, turnEnd(tr, em), where, providerSummary(t))
		turned++
	}
	if turned == 0 {
		fail("turn", "no tenant's turn got through, so the file's turn mapping is unproven")
		return false
	}
	return true
}

// turnEnd names how a turn of tr ends.
func turnEnd(tr Transport, em EventMap) string {
	if tr.Kind == TransportChat {
		return "the chat stream's end"
	}
	return em.TurnEnd
}

// connNoun is what one connection of tr is called in a step.
func connNoun(what string, tr Transport) string {
	switch {
	case what != "connection":
		return what
	case tr.Kind == TransportFramed:
		return "framed websocket connection"
	}
	return "websocket connection"
}

// chatSelects says how a chat transport picks the tenant.
func chatSelects(tr Transport) string {
	var by []string
	if strings.Contains(tr.Chat.Model, "{agent}") {
		by = append(by, "model "+tr.Chat.Model)
	}
	if strings.Contains(tr.Chat.User, "{agent}") {
		by = append(by, "user "+tr.Chat.User)
	}
	for k, v := range tr.Chat.Headers {
		if strings.Contains(v, "{agent}") {
			by = append(by, "header "+k)
		}
	}
	if len(by) == 0 {
		return "no field names the agent: the token alone selects it"
	}
	return "the agent by " + strings.Join(by, ", ")
}

// diagnoseCall explains a failed call: a method the server does not know,
// an operation declared unsupported, or the error as it came.
func diagnoseCall(op string, err error) string {
	var rerr *RPCError
	var uerr *UnsupportedError
	switch {
	case errors.As(err, &uerr):
		return fmt.Sprintf("%v: the dry pass needs it", uerr)
	case errors.As(err, &rerr) && rerr.Code == -32601:
		return fmt.Sprintf("the server does not know method %q (it answered -32601 %s): map %s to the server's method under dialect.methods.%s", rerr.Method, rerr.Message, op, op)
	}
	return err.Error()
}

func readyHint(t Target, tr Transport) string {
	em := t.Dialect.WithDefaults().Events
	if em.NoReadyEvt || tr.Kind == TransportChat {
		return ""
	}
	return fmt.Sprintf("(a connection is ready on event %q: set dialect.events.ready, or no_ready: true if the server sends none)", em.Ready)
}

func eventTypes(c *Conn, from int) string {
	counts := map[string]int{}
	for _, e := range c.Events() {
		if e.Index >= from {
			counts[e.Type]++
		}
	}
	if len(counts) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(counts)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s x%d", k, counts[k])
	}
	return b.String()
}

// providerSummary is what t's provider saw: requests by kind and whether
// they carried t's key.
func providerSummary(t *tenants.Tenant) string {
	if !t.HasProvider() {
		return "no provider"
	}
	main, aux, ownKey := 0, 0, 0
	for _, r := range t.Requests() {
		if r.Kind == fakellm.KindMain {
			main++
		} else {
			aux++
		}
		if r.Auth == t.ProviderKey() {
			ownKey++
		}
	}
	return fmt.Sprintf("%s's provider got %d main and %d other request(s), %d with its key", t.Name, main, aux, ownKey)
}

// foreignKeyOwner is the tenant whose provider key a request on t's
// provider (from the from-th on) carried, or nil.
func foreignKeyOwner(ts []*tenants.Tenant, t *tenants.Tenant, from int) *tenants.Tenant {
	if !t.HasProvider() {
		return nil
	}
	for _, r := range since(t.Requests(), from) {
		for _, o := range ts {
			if o != t && r.Auth != "" && r.Auth == o.ProviderKey() {
				return o
			}
		}
	}
	return nil
}

// modelOwner is the tenant whose model m is, or nil.
func modelOwner(ts []*tenants.Tenant, m string) *tenants.Tenant {
	for _, t := range ts {
		if t.Model() == m {
			return t
		}
	}
	return nil
}

// since is rs from the from-th on.
func since(rs []fakellm.Record, from int) []fakellm.Record {
	if from > len(rs) {
		return nil
	}
	return rs[from:]
}

func probeReturned(t *tenants.Tenant, from int) bool {
	for _, r := range since(t.Requests(), from) {
		for _, m := range r.Messages() {
			if role, _ := m["role"].(string); role == "tool" && strings.Contains(fmt.Sprint(m["content"]), tenants.ProbeBegin) {
				return true
			}
		}
	}
	return false
}

func dryToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DryReport writes the steps of a dry pass (DryPass, and a gateway's) to
// W, a line each: "ok" for a step that got through, "warn" for a leak seen
// on the way, "FAIL" with the diagnosis for a step that did not.
type DryReport struct {
	W io.Writer
	// Leaks is how many warn lines were written.
	Leaks int
}

// Step writes the ok line of a step.
func (r *DryReport) Step(name, format string, args ...any) {
	fmt.Fprintf(r.W, "ok    %-18s %s\n", name, fmt.Sprintf(format, args...))
}

// Warn writes the warn line of a leak, and counts it.
func (r *DryReport) Warn(name, format string, args ...any) {
	r.Leaks++
	fmt.Fprintf(r.W, "warn  %-18s %s\n", name, indent(fmt.Sprintf(format, args...)))
}

// Fail writes the FAIL line of a step with its diagnosis, and returns the
// dry pass's error: ErrDryPass, the step and the diagnosis's first line.
func (r *DryReport) Fail(name, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(r.W, "FAIL  %-18s %s\n", name, indent(msg))
	line, _, _ := strings.Cut(msg, "\n")
	return fmt.Errorf("%w: %s: %s", ErrDryPass, name, line)
}

// Close closes c (the pass's sandbox) when the pass ends: an error closing
// it fails step "stop", and is the pass's error, *err, if the pass had got
// through.
func (r *DryReport) Close(c io.Closer, err *error) {
	if cerr := c.Close(); cerr != nil && *err == nil {
		*err = r.Fail("stop", "%v", cerr)
	}
}

func indent(s string) string { return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ") }

// lastLine is the last non-empty line of s (a check's verdict).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
