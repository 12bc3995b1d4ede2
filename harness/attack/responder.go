package attack

import (
	"encoding/json"
	"strings"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// PromptPrefix starts a user turn that makes the hostile model make one
// call: the rest of the text is the call as JSON.
const PromptPrefix = "ATTACK "

// Prompt is the user text that makes Responder make call.
func Prompt(c Call) string {
	b, _ := json.Marshal(c) // a Call of plain data always marshals
	return PromptPrefix + string(b)
}

// Done is the hostile model's answer to the result of its call.
const Done = "attack done"

// FloodPrompt starts a user turn the hostile model answers at once with
// text (no tool): the cheapest turn, for a flood of them.
const FloodPrompt = "FLOOD"

// Responder is a tenant's hostile model: a user turn made by Prompt gets
// its call, the call's result gets Done, and every other turn is the
// default responder's (the environment probe), so the scenario's positive
// controls still see the tenant's own snapshots.
func Responder(t *tenants.Tenant) fakellm.Responder {
	def := tenants.DefaultResponder(t)
	return func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if n := len(msgs); n > 0 {
			role, _ := msgs[n-1]["role"].(string)
			switch role {
			case "user":
				text, _ := msgs[n-1]["content"].(string)
				if strings.HasPrefix(text, FloodPrompt) {
					return fakellm.Text("flooded")
				}
				if raw, ok := strings.CutPrefix(text, PromptPrefix); ok {
					var c Call
					if json.Unmarshal([]byte(raw), &c) == nil && c.Tool != "" {
						return fakellm.ToolCall(c.Tool, c.Args)
					}
					return fakellm.Text("attack prompt not understood: " + raw)
				}
			case "tool":
				if attacking(msgs) {
					return fakellm.Text(Done)
				}
			}
		}
		return def(r)
	}
}

// attacking reports whether the conversation's last user turn is an
// attack prompt.
func attacking(msgs []map[string]any) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if role, _ := msgs[i]["role"].(string); role == "user" {
			text, _ := msgs[i]["content"].(string)
			return strings.HasPrefix(text, PromptPrefix)
		}
	}
	return false
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
