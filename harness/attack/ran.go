package attack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// Proof is what a tenant's provider records show of one attack
// instruction: an attack that did not run is a check that was not made,
// so a row counts only when all three steps are on the record.
type Proof struct {
	Nonce  string
	Asked  bool   // the provider was asked, with the tenant's key, with the nonce in the latest user turn
	Called bool   // the provider answered with the tool call CallID(nonce)
	Back   bool   // a tool result for that call came back to the provider
	Result string // that result
	// How says how the result was tied to the call: by its "id", a
	// "normalised id" (the server rewrote it) or its "content" (the call
	// the server sent back with the same tool and arguments).
	How string
	// Untied is a tool result that came back in the attack's turn but
	// that nothing ties to the call (an id the server rewrote past
	// recognition, arguments it changed): the control cannot tell whether
	// it is the attack's, and says so (Unsure) rather than claim the
	// attack did not run.
	Untied string
}

// Prove reads recs (one tenant's provider's records, key the tenant's
// provider key) for the instruction with nonce.
func Prove(recs []fakellm.Record, key, nonce string) Proof {
	p := Proof{Nonce: nonce}
	id := CallID(nonce)
	for _, r := range recs {
		if r.Kind != fakellm.KindMain {
			continue
		}
		turn := r.Turn()
		if !strings.Contains(turn.Text, PromptPrefix+nonce+" ") {
			continue
		}
		if r.Auth == key {
			p.Asked = true
		}
		if slices.ContainsFunc(r.Calls, func(c string) bool { return strings.Contains(c, id) }) {
			p.Called = true
		}
		call, _ := instructionCall(turn.Text, nonce)
		if res, how := turn.ResultFor(id, call.Same); how != "" {
			p.Back, p.Result, p.How = true, res, how
			continue
		}
		for _, res := range turn.Results {
			p.Untied = res
		}
	}
	return p
}

// Unsure says why the control cannot tell whether the attack ran (a
// result came back that nothing ties to its call), or "".
func (p Proof) Unsure() string {
	if !p.Asked || !p.Called || p.Back || p.Untied == "" {
		return ""
	}
	return fmt.Sprintf("a tool result came back in the turn of call %s that neither its id (as sent, or normalised) nor its tool and arguments tie to the call: the server rewrote both, and the ran-control cannot tell whether the attack ran", CallID(p.Nonce))
}

// Missing says which step of the attack is not on the record ("" when the
// attack ran): needDone asks that the result end with RowDone.
func (p Proof) Missing(needDone bool) string {
	id := CallID(p.Nonce)
	switch {
	case !p.Asked:
		return fmt.Sprintf("its provider was never asked with the attack's nonce %s in the latest user turn (the server lost or rewrote the instruction)", p.Nonce)
	case !p.Called:
		return fmt.Sprintf("its provider never answered with the tool call %s", id)
	case !p.Back:
		return fmt.Sprintf("no tool result for call %s came back to its provider (the tool did not run, or its result was lost)", id)
	case needDone && !strings.Contains(p.Result, RowDone):
		return fmt.Sprintf("the result of call %s came back without the row's end marker %q (the command did not run to its end)", id, RowDone)
	}
	return ""
}
