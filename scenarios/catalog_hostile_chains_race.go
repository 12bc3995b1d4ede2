package scenarios

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// chainRaceRounds is how many delete + re-create rounds a race chain runs;
// the variable CANARY_CHAIN_ROUNDS overrides it (a longer hunt for a
// rarer race).
const chainRaceRounds = 12

// raceLoopers is how many connections of the racing profile loop its
// requests at once.
const raceLoopers = 4

// ChainGeneration is the kind of the canary each round of a race plants in
// the profile before it is deleted: the profile made again must not hold
// it.
const ChainGeneration tenants.Kind = "chain_generation"

func raceRounds() int {
	if n, err := strconv.Atoi(os.Getenv("CANARY_CHAIN_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return chainRaceRounds
}

// raceChain runs ch against a profile made for it: each round plants a
// generation canary in its home, loops ch's steps on the profile's own
// connection while the operator deletes and re-creates it under the same
// name, then scans the new home for that generation. The rate of rounds
// whose new profile held the deleted one's data is logged and reported.
func (e *Env) raceChain(ch attack.Chain) {
	e.T.Helper()
	name := "chains-race"
	if e.Box.Set.Get(name) != nil {
		name = "chains-race-2"
	}
	g, err := e.Box.Set.AddTenant(name)
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	e.Tenants = e.Box.Set.Tenants
	st := stateOf(e, chainsKey)
	run := &chainRun{ch: ch, a: g, v: g, phase: st.phase}
	st.runs = append(st.runs, run)
	win := e.openWindow(run)
	defer win.close()
	admin := e.DialOperator(e.Server)
	e.Call(admin, "profiles.create", map[string]any{"name": name}, nil)
	rounds := raceRounds()
	inherited, deleteFailed, createFailed, loops := 0, 0, 0, 0
	for i := 0; i < rounds; i++ {
		gen := e.mint(g, ChainGeneration)
		if err := e.Box.WriteHome(g, tenants.HomeExtras{Env: map[string]string{"CHAIN_GENERATION": gen.Value}}); err != nil {
			e.T.Fatalf("write home of %s: %v", name, err)
		}
		// The positive control: the scan sees the generation where it was
		// planted.
		if i == 0 && len(invariants.Inherits(e.Ctx, name, g.Home, []tenants.Canary{gen})) == 0 {
			e.Find(invariants.Finding{Invariant: invariants.Control, Tenant: name, Where: invariants.Where{Path: g.Home},
				Detail: "the re-created-profile scan did not see the generation canary planted in the home: it would see nothing"})
		}
		// Several connections of the profile loop at once: the race is
		// the requests in flight when the operator acts.
		var stops []func()
		n := &atomic.Int64{}
		for range raceLoopers {
			c := e.Dial(e.Server, g)
			stop := e.loopSteps(c, g, ch, gen.Value, n)
			stops = append(stops, func() { stop(); c.Close() })
		}
		e.Eventually("a first round of "+name+"'s own requests", 30*time.Second, func() (bool, string) {
			return n.Load() >= raceLoopers, fmt.Sprintf("%d loop(s) begun", n.Load())
		})
		// An operator whose delete failed tries again, while the requests
		// go on racing.
		var derr error
		for try := 0; try < 5; try++ {
			if derr = e.operatorCall(admin, "profiles.delete", name); derr == nil {
				break
			}
			deleteFailed++
			if deleteFailed == 1 {
				e.Logf("%s round %d: profiles.delete failed: %v", ch.ID, i+1, derr)
			}
		}
		// A target without tenant credentials takes the profile a request
		// names: after the create, a loop's request by name is the new
		// profile's own, so its loops stop before the create, and what is
		// checked is what was in flight at the delete (profile-recreate
		// checks that a deleted profile's session serves nothing after).
		// With credentials the loops race the create too: the deleted
		// profile's connections must reach nothing of the new one.
		stopLoops := sync.OnceFunc(func() {
			for _, stop := range stops {
				stop()
			}
		})
		if !e.Box.Target.TenantCredentials {
			stopLoops()
		}
		cerr := e.operatorCall(admin, "profiles.create", name)
		stopLoops()
		loops += int(n.Load())
		switch {
		case derr != nil && cerr != nil:
			continue // the profile is the old one: nothing was made again
		case cerr != nil:
			createFailed++
			e.Logf("%s round %d: profiles.create failed: %v", ch.ID, i+1, cerr)
			continue
		}
		if fs := invariants.Inherits(e.Ctx, name, g.Home, []tenants.Canary{gen}); len(fs) > 0 {
			inherited++
			for _, f := range fs {
				f.Detail += fmt.Sprintf(" (round %d of %d)", i+1, rounds)
				e.chainFind(run, f)
			}
		}
	}
	rate := fmt.Sprintf("the profile made again held the deleted one's data in %d/%d rounds (%.0f%%); %d failed deletes (retried), %d failed creates; %d racing loops",
		inherited, rounds, 100*float64(inherited)/float64(rounds), deleteFailed, createFailed, loops)
	e.Logf("%s by %s: %s", ch.ID, name, rate)
	run.outcome = rate
	e.mu.Lock()
	e.Report.Attacks = append(e.Report.Attacks, AttackHit{Tenant: name, Row: ch.ID, Reached: []string{rate}})
	e.mu.Unlock()
}

// operatorCall is one operator RPC on a profile, its failure returned.
func (e *Env) operatorCall(c *harness.Conn, method, name string) error {
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	return c.Call(ctx, method, map[string]any{"name": name}, nil)
}

// loopSteps runs ch's RPC steps as t on c over and over (errors are the
// race's: ignored) until stop is called; n counts the loops begun.
func (e *Env) loopSteps(c *harness.Conn, t *tenants.Tenant, ch attack.Chain, write string, n *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		vars := map[string]string{"write": write}
		sid := ""
		for {
			select {
			case <-done:
				return
			default:
			}
			n.Add(1)
			for _, s := range ch.Steps {
				p := attack.FillParams(s.Params, vars)
				if s.Op == "session.create" {
					if name := profileParam(t); name != "" {
						p["profile"] = name
					}
				} else if sid == "" {
					// No session yet (the create was refused): a call with
					// neither a session nor a profile addresses the launch
					// profile where a request names its profile, which is
					// not this tenant's request.
					break
				} else {
					p["session_id"] = sid
				}
				ctx, cancel := e.ctx(10 * time.Second)
				var res struct {
					SessionID string `json:"session_id"`
				}
				err := c.Call(ctx, s.Op, p, &res)
				cancel()
				if err != nil && !isRefusal(err) {
					return // the connection is gone: the race is over for it
				}
				if err == nil && res.SessionID != "" {
					sid = res.SessionID
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
