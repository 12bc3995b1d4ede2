package tenants

import "github.com/tenantcanary/tenantcanary/fakellm"

// probeResponder follows the conversation: a turn whose own tool call has
// its result anywhere in the turn (not only as the last message: a server
// may append a "runtime facts" user message after it) gets the final
// answer; any other turn gets the probe. The provider stamps both with the
// tenant's reply canary and bounds a turn that loops (fakellm.TurnBound).
func probeResponder(t *Tenant, tool, arg string) fakellm.Responder {
	return func(r fakellm.Record) fakellm.Response {
		if r.EndsWithToolResult() || r.Turn().Answered() {
			return fakellm.Text("probe done for " + t.Name)
		}
		return fakellm.ToolCall(tool, map[string]string{arg: t.ProbeCommand()})
	}
}
