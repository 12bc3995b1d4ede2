package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/slowproxy"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Cancellations under load (issue 47): every tenant sends the same prompt,
// byte for byte and under the same request id, many times at once over
// several connections, while the server's stores answer slowly (a
// delaying proxy in front of each), and the harness cancels a seed-chosen
// share of the turns at seed-chosen moments: it closes the connection
// mid-turn, or closes the session (the protocol's way to cancel a turn).
// A cancelled request whose store command is still in flight is the
// moment a pooled store client must drop or drain its connection; one
// that hands the connection back with the reply still coming gives the
// next caller, another tenant's request maybe, the previous command's
// answer (redis-py #2624, the March 2023 incident). Every answer carries
// its tenant's reply canary, so an answer served to the wrong tenant is a
// foreign canary in its frames (the rpc invariant), and the control that
// each completed turn carries its own says what was asked was answered.
// The second half runs the same while each store the harness started is
// restarted once, mid-round.

// cancelPrompt is the prompt of every turn of the scenario, byte for byte.
const cancelPrompt = "Colliding input under cancellation: answer in one line."

// cancelID is the request id of every prompt.submit of the scenario, on
// every connection of every tenant: the requests are byte-identical on
// the wire but for the session id.
const cancelID int64 = 4747

// CancelRound is one round of the cancellations scenario, as the report
// and the log give it.
type CancelRound struct {
	Phase string `json:"phase"`
	Round int    `json:"round"`
	Via   string `json:"via"`   // websocket, or gateway
	Turns int    `json:"turns"` // turns submitted
	// Cancelled are the turns the harness cancelled before their end:
	// ByClose by closing the connection, ByRPC by session.close, ByDrop
	// by dropping a gateway request mid-stream.
	Cancelled int `json:"cancelled"`
	ByClose   int `json:"by_close"`
	ByRPC     int `json:"by_rpc"`
	ByDrop    int `json:"by_drop,omitempty"`
	// InFlight are the cancellations made while the server had a store
	// command in flight: a connection through the proxies had sent the
	// store something and not yet been given its reply (any connection
	// of the server's: the proxy cannot tell whose request it serves).
	InFlight int `json:"in_flight"`
	// StoreDrops are the store connections the server closed while their
	// command was in flight, during the round: a client that drops the
	// connection of a cancelled command (the defence) shows here.
	StoreDrops int64 `json:"store_drops"`
	// Overlaps are the commands the server sent on a store connection
	// whose previous reply was still to come, during the round:
	// pipelining, or a connection handed on with a cancelled command's
	// reply still on its way (the bug).
	Overlaps int64 `json:"overlaps"`
	// EndedFirst are the turns drawn for a cancellation that ended before
	// its moment came.
	EndedFirst int `json:"ended_first"`
	Answered   int `json:"answered"` // turns that ended with an answer
	Failed     int `json:"failed"`   // turns (or their session.create) that ended in an error
	// Delay is the proxies' delay each way in the round (plus up to
	// Jitter).
	Delay  time.Duration `json:"delay_ns"`
	Jitter time.Duration `json:"jitter_ns"`
}

// Rate is the share of the round's cancellations that met a store
// command in flight, in percent (0 with none).
func (r CancelRound) Rate() int {
	if r.Cancelled == 0 {
		return 0
	}
	return 100 * r.InFlight / r.Cancelled
}

func (r CancelRound) String() string {
	how := fmt.Sprintf("%d by closing the connection, %d by session.close", r.ByClose, r.ByRPC)
	if r.Via == "gateway" {
		how = fmt.Sprintf("%d gateway requests dropped mid-stream", r.ByDrop)
	}
	return fmt.Sprintf("%s round %d: %d turns, %d cancelled (%s), %d of them while a store command was in flight (%d%%); the server dropped %d store connections with a command in flight and sent %d commands over a reply still to come; %d ended before their moment, %d answered, %d failed; stores delayed %v (+ up to %v) each way",
		r.Phase, r.Round, r.Turns, r.Cancelled, how, r.InFlight, r.Rate(), r.StoreDrops, r.Overlaps, r.EndedFirst, r.Answered, r.Failed, r.Delay, r.Jitter)
}

// cancelTuning is how hard the scenario pushes: measured against agentd's
// store-cancel-reply fault (docs/cancellations.md).
type cancelTuning struct {
	Conns  int           // connections per tenant, each a turn at a time
	Rounds int           // rounds per phase
	Share  float64       // share of the turns cancelled
	Delay  time.Duration // the proxies' delay each way
	Jitter time.Duration // plus up to this much
	// Window: a cancelled turn's moment is drawn from [0, Window) after
	// its submit is sent.
	Window time.Duration
}

var cancelTune = cancelTuning{Conns: 3, Rounds: 4, Share: 0.5, Delay: 40 * time.Millisecond, Jitter: 20 * time.Millisecond,
	Window: 800 * time.Millisecond}

// cancelResponder answers every turn with one line of text, no tool: a
// turn is one provider request (or one cache read), and its answer
// carries the tenant's reply canary (the provider stamps it).
func cancelResponder(t *tenants.Tenant) fakellm.Responder {
	return func(fakellm.Record) fakellm.Response {
		return fakellm.Text("the answer to the cancelled and colliding prompt, for " + t.Name)
	}
}

// cancelSlot is one connection of a tenant; conn is nil once the harness
// closed it, and the next round dials a new one. A slot with gw set
// posts its prompt to the gateway instead.
type cancelSlot struct {
	t    *tenants.Tenant
	conn *harness.Conn
	gw   *Gateway
}

// cancelPlan is one turn's draw: cancelled or not, how, and when.
type cancelPlan struct {
	cancel, byClose bool
	at              time.Duration
}

// cancelOutcome is how one turn went.
type cancelOutcome struct {
	cancelled, byClose, byDrop, inFlight, endedFirst, answered bool
	err                                                        error
}

// cancelState is the scenario's connections, made in its first phase,
// and the proxies' delay now.
type cancelState struct {
	slots         []*cancelSlot
	delay, jitter time.Duration
}

var cancelKey = &stateKey[cancelState]{"cancellations"}

func (e *Env) cancelState() *cancelState { return stateOf(e, cancelKey) }

// proxies are the delaying proxies in front of the target's stores.
func (e *Env) proxies() []*slowproxy.Proxy {
	var out []*slowproxy.Proxy
	for _, st := range e.Box.Stores() {
		if p := st.Proxy(); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// slowStores sets every proxy's delay each way.
func (e *Env) slowStores(delay, jitter time.Duration) {
	st := e.cancelState()
	st.delay, st.jitter = delay, jitter
	for _, p := range e.proxies() {
		p.SetDelay(slowproxy.Both, delay, jitter)
	}
}

// proxyTotals are the counters of every proxy, summed.
func (e *Env) proxyTotals() slowproxy.Stats {
	var sum slowproxy.Stats
	for _, p := range e.proxies() {
		st := p.Stats()
		sum.Abandoned += st.Abandoned
		sum.Overlapped += st.Overlapped
	}
	return sum
}

// storeInFlight reports whether any proxy has a connection awaiting its
// store's reply.
func (e *Env) storeInFlight() bool {
	for _, p := range e.proxies() {
		if p.Stats().Awaiting > 0 {
			return true
		}
	}
	return false
}

// cancelConnect starts the server, dials every tenant's connections and
// runs one turn per tenant to its end at no delay: each tenant's answer
// to the prompt is then what any cache of the server holds.
func (e *Env) cancelConnect() {
	e.T.Helper()
	if len(e.proxies()) == 0 {
		e.T.Fatalf("cancellations: no delaying proxy in front of the target's stores (Spec.StoreProxies)")
	}
	srv := e.StartServe()
	st := e.cancelState()
	for _, t := range e.Tenants {
		for range cancelTune.Conns {
			st.slots = append(st.slots, &cancelSlot{t: t, conn: e.Dial(srv, t)})
		}
	}
	first := firstSlots(st.slots)
	r := e.cancelRound("warm-up", 0, first, 0, false)
	if r.Answered != len(first) {
		e.T.Fatalf("cancellations: warm-up: every tenant's first turn must be answered: %s", r)
	}
}

// cancelRounds runs rounds of the scenario over every connection, with
// the stores delayed. With restart, every store the harness started is
// first restarted once, at a seed-chosen moment of the first round:
// rounds go on while the stores restart (maxRestartRounds at most), their
// failed turns counted, not failed; then the phase's rounds run, every
// turn of them to succeed.
func (e *Env) cancelRounds(phase string, restart bool) {
	e.T.Helper()
	e.slowStores(cancelTune.Delay, cancelTune.Jitter)
	defer e.slowStores(0, 0)
	st := e.cancelState()
	if restart {
		at := time.Duration(e.Rand.Int64N(int64(cancelTune.Window)))
		done := make(chan error, 1)
		go func() { done <- e.restartStores(at) }() // ends once every store is back
		var err error
		for n, restarting := 1, true; restarting; n++ {
			if n > maxRestartRounds {
				err = <-done
				break
			}
			e.cancelRedial(st.slots)
			e.cancelRound(phase+", stores restarting", n, st.slots, cancelTune.Share, true)
			select {
			case err = <-done:
				restarting = false
			default:
			}
		}
		if err != nil {
			e.T.Fatalf("cancellations: %s: %v", phase, err)
		}
		e.Logf("cancellations: %s: the stores were restarted", phase)
	}
	for round := 1; round <= cancelTune.Rounds; round++ {
		e.cancelRedial(st.slots)
		e.cancelRound(phase, round, st.slots, cancelTune.Share, false)
	}
	// Every tenant is served again, the stores slow still: one turn each,
	// to its end, with its own answer.
	first := firstSlots(st.slots)
	e.cancelRedial(first)
	r := e.cancelRound(phase+", after", 0, first, 0, false)
	if r.Answered != len(first) {
		e.T.Fatalf("cancellations: %s: every tenant must be answered once its rounds are over: %s", phase, r)
	}
}

// maxRestartRounds bounds the rounds played while the stores restart.
const maxRestartRounds = 20

// firstSlots is each tenant's first slot.
func firstSlots(slots []*cancelSlot) []*cancelSlot {
	var first []*cancelSlot
	seen := map[string]bool{}
	for _, s := range slots {
		if !seen[s.t.Name] {
			seen[s.t.Name] = true
			first = append(first, s)
		}
	}
	return first
}

// cancelRedial dials a new connection for every slot whose connection a
// cancellation closed.
func (e *Env) cancelRedial(slots []*cancelSlot) {
	e.T.Helper()
	for _, s := range slots {
		if s.conn == nil {
			s.conn = e.Dial(e.Server, s.t)
		}
	}
}

// restartStores waits until at, then restarts every store the harness
// started, one after the other.
func (e *Env) restartStores(at time.Duration) error {
	t := time.NewTimer(at) // the moment of the restart: a condition of the run, drawn from the seed
	select {
	case <-t.C:
	case <-e.Ctx.Done():
		t.Stop()
		return e.Ctx.Err()
	}
	restarted := 0
	for _, st := range e.Box.Stores() {
		if !st.Started() {
			continue
		}
		ctx, cancel := e.ctx(time.Minute)
		err := st.Restart(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("restart the %s store mid-round: %w", st.Spec.Kind, err)
		}
		restarted++
	}
	if restarted == 0 {
		e.skipRow(string(invariants.RPC), "no store restarted mid-round: the harness started none of the target's stores")
	}
	return nil
}

// cancelRound runs one turn on every slot at once, cancelling a share of
// them at seed-drawn moments, and reports and logs how it went. Errors of
// turns fail the scenario unless tolerate (a round in which the stores
// restart).
func (e *Env) cancelRound(phase string, round int, slots []*cancelSlot, share float64, tolerate bool) CancelRound {
	e.T.Helper()
	plans := make([]cancelPlan, len(slots))
	for i := range plans { // drawn in slot order, before any goroutine: the seed replays them
		plans[i].cancel = share > 0 && e.Rand.Float64() < share
		plans[i].byClose = e.Rand.IntN(2) == 0
		plans[i].at = time.Duration(e.Rand.Int64N(int64(cancelTune.Window)))
	}
	before := e.proxyTotals()
	outs := make([]cancelOutcome, len(slots))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range slots {
		wg.Add(1)
		go func() { // ends with its turn (bounded by the turn timeout)
			defer wg.Done()
			<-start
			outs[i] = e.cancelTurn(s, plans[i])
		}()
	}
	close(start)
	wg.Wait()
	st := e.cancelState()
	var firstErr error
	after := e.proxyTotals()
	via := "websocket"
	if len(slots) > 0 && slots[0].gw != nil {
		via = "gateway"
	}
	r := CancelRound{Phase: phase, Round: round, Via: via, Turns: len(slots), Delay: st.delay, Jitter: st.jitter,
		StoreDrops: after.Abandoned - before.Abandoned, Overlaps: after.Overlapped - before.Overlapped}
	for i, o := range outs {
		switch {
		case o.cancelled:
			r.Cancelled++
			switch {
			case o.byDrop:
				r.ByDrop++
			case o.byClose:
				r.ByClose++
			default:
				r.ByRPC++
			}
			if o.inFlight {
				r.InFlight++
			}
		case o.answered:
			r.Answered++
		}
		if o.endedFirst {
			r.EndedFirst++
		}
		if o.err != nil {
			r.Failed++
			if firstErr == nil {
				firstErr = o.err
			}
			if !tolerate {
				e.T.Errorf("cancellations: %s round %d: turn of %s: %v", phase, round, slots[i].t.Name, o.err)
			}
		}
	}
	e.mu.Lock()
	e.Report.Cancellations = append(e.Report.Cancellations, r)
	e.mu.Unlock()
	e.Logf("cancellations: %s", r)
	if tolerate && firstErr != nil {
		e.Logf("cancellations: %s round %d: the first of its failed turns (the stores restarting): %v", phase, round, firstErr)
	}
	return r
}

// cancelTurn opens a session on s and plays (or cancels) one turn of
// cancelPrompt on it. A turn that ends is judged: its end must carry its
// tenant's own reply canary.
func (e *Env) cancelTurn(s *cancelSlot, p cancelPlan) (o cancelOutcome) {
	if s.gw != nil {
		return e.cancelChat(s, p)
	}
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	c := s.conn
	sess, err := c.CreateSession(ctx, profileParam(s.t))
	if err != nil {
		o.err = fmt.Errorf("session.create: %w", err)
		return o
	}
	e.mu.Lock()
	e.sessions = append(e.sessions, session{tenant: s.t, info: sess})
	e.mu.Unlock()
	sid := sess.SessionID
	turnCtx := ctx
	if p.cancel {
		var stop context.CancelFunc
		turnCtx, stop = context.WithTimeout(ctx, p.at)
		defer stop()
	}
	ev, err := c.TurnWithID(turnCtx, cancelID, sid, cancelPrompt)
	switch {
	case p.cancel && err != nil && turnCtx.Err() != nil && ctx.Err() == nil:
		// The moment came first: cancel the turn now.
		o.cancelled, o.byClose, o.inFlight = true, p.byClose, e.storeInFlight()
		if p.byClose {
			c.Close()
			s.conn = nil
			return o
		}
		cctx, ccancel := e.ctx(e.Times.Call)
		defer ccancel()
		if err := c.Call(cctx, "session.close", map[string]any{"session_id": sid}, nil); err != nil {
			o.err = fmt.Errorf("session.close of the turn being cancelled: %w", err)
		}
		return o
	case err != nil:
		o.err = e.attributed(s.t, sid, err)
		return o
	}
	o.endedFirst = p.cancel
	o.answered = true
	if !bytes.Contains(ev.Raw, []byte(s.t.Value(tenants.Reply))) {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: s.t.Name, Where: invariants.Where{Label: "cancellations"},
			Detail: fmt.Sprintf("the answer to %s's prompt does not carry its own reply canary: no provider of %s gave it (%s)", s.t.Name, s.t.Name, truncateText(string(ev.Raw), 300))})
	}
	cctx, ccancel := e.ctx(e.Times.Call)
	defer ccancel()
	if err := c.Call(cctx, "session.close", map[string]any{"session_id": sid}, nil); err != nil && !errors.Is(err, harness.ErrClosed) {
		o.err = fmt.Errorf("session.close after the turn: %w", err)
	}
	return o
}

// cancelChat posts cancelPrompt to s's tenant's route on the gateway,
// streamed, and drops the request at p's moment when p cancels it. What
// came back, whole or cut, is the tenant's text, scanned; a whole reply
// must carry the tenant's own reply canary.
func (e *Env) cancelChat(s *cancelSlot, p cancelPlan) (o cancelOutcome) {
	ctx, cancel := e.ctx(e.Times.Turn)
	defer cancel()
	reqCtx := ctx
	if p.cancel {
		var stop context.CancelFunc
		reqCtx, stop = context.WithTimeout(ctx, p.at)
		defer stop()
	}
	r, err := s.gw.Client.Chat(reqCtx, harness.RoutePath(s.t.Name, s.t.Launch), s.t.APIServerKey(), cancelPrompt, true)
	// The raw stream, and its text joined (a stream may split a canary
	// over two chunks; a cut one gives the text of its whole chunks).
	if len(r.Body) > 0 {
		e.KeepText(s.t, "gateway reply to "+s.t.Name+"'s cancelled or colliding chat", r.Body)
	}
	if r.Text != "" {
		e.KeepText(s.t, "gateway reply to "+s.t.Name+"'s cancelled or colliding chat, its text", []byte(r.Text))
	}
	switch {
	case p.cancel && err != nil && reqCtx.Err() != nil && ctx.Err() == nil:
		o.cancelled, o.byDrop, o.inFlight = true, true, e.storeInFlight()
		return o
	case err != nil:
		o.err = err
		return o
	case r.Status != 200:
		o.err = fmt.Errorf("gateway chat: HTTP %d: %s", r.Status, truncateText(string(r.Body), 300))
		return o
	}
	o.endedFirst = p.cancel
	o.answered = true
	if !strings.Contains(r.Text, s.t.Value(tenants.Reply)) {
		e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: s.t.Name, Where: invariants.Where{Label: "cancellations: gateway chat"},
			Detail: fmt.Sprintf("the gateway's reply to %s's chat does not carry its own reply canary: no provider of %s gave it (%s)", s.t.Name, s.t.Name, truncateText(string(r.Body), 300))})
	}
	return o
}

// cancelGateway drops a seed-chosen share of every tenant's streamed
// gateway chats mid-stream, the stores slow, where the target has a
// gateway backend.
func (e *Env) cancelGateway() {
	e.T.Helper()
	if ok, why := e.Box.Target.Supports(harness.BackendGateway); !ok {
		e.skipRow(string(Text), "gateway requests dropped mid-stream not tried: "+why)
		return
	}
	e.slowStores(cancelTune.Delay, cancelTune.Jitter)
	defer e.slowStores(0, 0)
	g := e.StartGateway()
	var slots []*cancelSlot
	for _, t := range e.Tenants {
		for range cancelTune.Conns {
			slots = append(slots, &cancelSlot{t: t, gw: g})
		}
	}
	for round := 1; round <= cancelTune.Rounds/2; round++ {
		e.cancelRound("gateway", round, slots, cancelTune.Share, false)
	}
	r := e.cancelRound("gateway, after", 0, firstSlots(slots), 0, false)
	if r.Answered != len(e.Tenants) {
		e.T.Fatalf("cancellations: gateway: every tenant's chat must be answered once its rounds are over: %s", r)
	}
}

func cancellations() Spec {
	return Spec{
		ID:           "cancellations",
		Purpose:      "every tenant sends byte-identical prompts at once over several connections while its stores answer slowly (and restart once), and a seed-chosen share is cancelled mid-turn (connection closed, session closed, gateway request dropped): no reply carries another tenant's answer",
		Backends:     []harness.Backend{harness.BackendServe},
		Needs:        []Need{NeedStores},
		Focus:        []Invariant{invariants.RPC, Text, Requests, invariants.TenantStore, PositiveControl},
		Snapshots:    perTenant(0),
		Timeout:      6 * time.Minute,
		Responder:    cancelResponder,
		StoreProxies: true,
		Phases: []Phase{
			{Name: "connect", Run: func(e *Env) { e.cancelConnect() }},
			{Name: "slow-stores", Run: func(e *Env) { e.cancelRounds("slow-stores", false) }},
			{Name: "store-restart", Run: func(e *Env) { e.cancelRounds("store-restart", true) }},
			{Name: "gateway-drops", Run: func(e *Env) { e.cancelGateway() }},
		},
	}
}
