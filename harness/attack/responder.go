package attack

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// PromptPrefix starts the attack instruction Prompt writes; the nonce, the
// call as JSON and PromptEnd follow. A server may wrap the instruction in
// text of its own (a timestamp before, a runtime line after): Responder
// finds it anywhere in the latest user turn.
const (
	PromptPrefix = "ATTACK "
	PromptEnd    = "END-ATTACK"
)

// instruction matches one attack instruction: its nonce and its call.
var instruction = regexp.MustCompile(`(?s)ATTACK ([0-9a-f]{10}) (\{.*?\}) END-ATTACK`)

// Prompt is the user text that makes Responder make call, under a fresh
// nonce (NonceOf reads it back): the tool call carries it in its id
// (CallID), so its result is told apart from every other.
func Prompt(c Call) string {
	b, _ := json.Marshal(c) // a Call of plain data always marshals
	nonce, err := tenants.NewTag()
	if err != nil {
		// crypto/rand does not fail on the systems the harness runs on; a
		// fixed nonce still runs the attack, and its ran-control still holds.
		nonce = "0000000000"
	}
	return PromptPrefix + nonce + " " + string(b) + " " + PromptEnd
}

// Same reports whether a call a server sent back is c: the same tool with
// the same arguments (as JSON values: key order and spacing aside).
func (c Call) Same(seen fakellm.CallSeen) bool {
	if seen.Name != c.Tool {
		return false
	}
	var got map[string]any
	if json.Unmarshal([]byte(seen.Args), &got) != nil {
		return false
	}
	want, err := json.Marshal(c.Args)
	if err != nil {
		return false
	}
	var norm map[string]any
	if json.Unmarshal(want, &norm) != nil {
		return false
	}
	return reflect.DeepEqual(got, norm)
}

// instructionCall is the call of the instruction with nonce in text.
func instructionCall(text, nonce string) (Call, bool) {
	for _, m := range instruction.FindAllStringSubmatch(text, -1) {
		var c Call
		if m[1] == nonce && json.Unmarshal([]byte(m[2]), &c) == nil && c.Tool != "" {
			return c, true
		}
	}
	return Call{}, false
}

// NonceOf is the nonce of the (last) attack instruction in text, or "".
func NonceOf(text string) string {
	all := instruction.FindAllStringSubmatch(text, -1)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1][1]
}

// CallID is the id (before the provider's reply canary) of the tool call
// the hostile model makes for the instruction with nonce.
func CallID(nonce string) string { return "atk-" + nonce }

// Done is the hostile model's answer to the result of its call (the nonce
// follows).
const Done = "attack done"

// FloodPrompt in a user turn makes the hostile model answer at once with
// text (no tool): the cheapest turn, for a flood of them.
const FloodPrompt = "FLOOD"

// Responder is a tenant's hostile model: a user turn holding a Prompt
// instruction (anywhere in it) gets its call, under CallID; the turn
// holding that call's result (anywhere in it, not only last) gets Done; a
// FLOOD turn gets text; every other turn is the default responder's (the
// environment probe), so the scenario's positive controls still see the
// tenant's own snapshots.
func Responder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		turn := r.Turn()
		if all := instruction.FindAllStringSubmatch(turn.Text, -1); len(all) > 0 {
			m := all[len(all)-1]
			nonce, id := m[1], CallID(m[1])
			var c Call
			if json.Unmarshal([]byte(m[2]), &c) != nil || c.Tool == "" {
				return fakellm.Text("attack prompt not understood: " + m[2])
			}
			// The result, even under an id the server rewrote: the turn is
			// over once it came back.
			if _, how := turn.ResultFor(id, c.Same); how != "" {
				return fakellm.Text(Done + " " + nonce)
			}
			return fakellm.ToolCalls(fakellm.Call{Name: c.Tool, Args: c.Args, ID: id})
		}
		if strings.Contains(turn.Text, FloodPrompt) {
			return fakellm.Text("flooded")
		}
		return def(r)
	}
}

// LastResult is the newest tool result in t's provider's records: what
// the tenant's last call brought back.
func LastResult(t *tenants.Tenant) (string, bool) {
	recs := t.Requests()
	for i := len(recs) - 1; i >= 0; i-- {
		msgs := recs[i].Messages()
		for j := len(msgs) - 1; j >= 0; j-- {
			if role, _ := msgs[j]["role"].(string); role == "tool" {
				s, _ := msgs[j]["content"].(string)
				return s, true
			}
		}
	}
	return "", false
}
