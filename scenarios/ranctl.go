package scenarios

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ranState is what the ran-controls of one run have seen since the last
// check: an attack or probe that did not run is a check that was not made,
// so it must never look like a pass.
type ranState struct {
	ran    map[string]int      // tenant -> steps proven to have run
	missed map[string][]string // tenant -> why each step that did not run did not
}

// proved records whether one step of t (an attack row, a probe turn) ran:
// missing "" means it did; otherwise it is a failed control named
// "<what> of <tenant> did not run: <missing>".
func (e *Env) proved(t *tenants.Tenant, what, missing string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ranSt.ran == nil {
		e.ranSt = ranState{ran: map[string]int{}, missed: map[string][]string{}}
	}
	if missing == "" {
		e.ranSt.ran[t.Name]++
		return
	}
	detail := fmt.Sprintf("%s of %s did not run: %s", what, t.Name, missing)
	e.ranSt.missed[t.Name] = append(e.ranSt.missed[t.Name], detail)
	e.pending = append(e.pending, invariants.Finding{Invariant: invariants.Control, Tenant: t.Name,
		Where: invariants.Where{Label: what}, Detail: detail})
}

// ranControls drains the ran-controls since the last check: one control
// per tenant that ran (or tried to run) anything.
func (e *Env) ranControls() []Control {
	e.mu.Lock()
	st := e.ranSt
	e.ranSt = ranState{}
	e.mu.Unlock()
	names := map[string]bool{}
	for n := range st.ran {
		names[n] = true
	}
	for n := range st.missed {
		names[n] = true
	}
	var out []Control
	for n := range names {
		c := Control{Tenant: n, Passed: len(st.missed[n]) == 0,
			Name: fmt.Sprintf("every attack and probe proven to have run (%d of %d)", st.ran[n], st.ran[n]+len(st.missed[n]))}
		if !c.Passed {
			c.Detail = strings.Join(st.missed[n], "; ")
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// probePrompt is a probe turn's prompt with a nonce of its own, so its
// ran-control finds this turn's tool call and result among all others.
func probePrompt(t *tenants.Tenant) (prompt, nonce string) {
	nonce, err := tenants.NewTag()
	if err != nil {
		nonce = "0000000000"
	}
	return "Run the environment probe for " + t.Name + " (turn " + nonce + ").", nonce
}

// proveProbe says which step of the probe turn with nonce is missing from
// t's provider's records ("" when the probe ran): the provider was asked
// with the nonce, answered with a tool call, and that call's result (an
// environment snapshot) came back.
func proveProbe(t *tenants.Tenant, nonce string) string {
	asked, called := false, false
	for _, r := range t.Requests() {
		if r.Kind != fakellm.KindMain {
			continue
		}
		turn := r.Turn()
		if !strings.Contains(turn.Text, "(turn "+nonce+")") {
			continue
		}
		asked = true
		called = called || len(r.Calls) > 0 || len(turn.Calls) > 0
		for _, id := range turn.Calls {
			if res, ok := turn.Results[id]; ok && strings.Contains(res, tenants.ProbeEnd) {
				return ""
			}
		}
	}
	switch {
	case !asked:
		return "its provider was never asked with the turn's nonce " + nonce
	case !called:
		return "its provider never answered with the probe's tool call"
	}
	return "no environment snapshot came back as the probe call's result"
}

// loopFindings names every tenant whose provider ended a turn that looped
// past its bound: the target never took the tool result as an answer.
func loopFindings(ts []*tenants.Tenant) []invariants.Finding {
	var out []invariants.Finding
	for _, t := range ts {
		if !t.HasProvider() {
			continue
		}
		n := 0
		for _, r := range t.Requests() {
			if r.Looped(fakellm.LoopBound) {
				n++
			}
		}
		if n > 0 {
			out = append(out, invariants.Finding{Invariant: invariants.Harness, Tenant: t.Name,
				Where:  invariants.Where{Label: "provider of " + t.Name},
				Detail: fmt.Sprintf("a turn of %s looped past %d model requests (the fake provider ended it): the target kept asking after its tool results", t.Name, fakellm.LoopBound)})
		}
	}
	return out
}

// attackProof is the ran-control of the attack t ran with prompt.
func attackProof(t *tenants.Tenant, prompt string) attack.Proof {
	return attack.Prove(t.Requests(), t.ProviderKey(), attack.NonceOf(prompt))
}
