// Package fakellm is a per-tenant fake LLM provider: one real HTTP server on
// loopback per tenant, in the spirit of net/http/httptest, speaking the
// OpenAI Chat Completions wire format (JSON and SSE, streamed tool calls by
// index, reasoning_content deltas, GET <base>/models) and the Anthropic
// Messages format (JSON and SSE), so real clients parse it unchanged.
//
// Every request is recorded before its key is checked: a request carrying
// another tenant's key is exactly the leak the harness hunts, so it is on the
// record even though it was refused with 401. Main requests (the body offers
// tools) are answered from the script, then by the Responder; aux requests
// (titles, summaries) by the AuxResponder and never consume the script.
// Responses can be text, tool calls, HTTP errors with Retry-After, hangs,
// drops and stalls mid-stream, or raw bodies. Close ends every hang and
// stream at once and returns only when every goroutine is gone.
//
// A test starts one server per tenant and points the tenant at BaseURL:
//
//	srv, err := fakellm.New(fakellm.Options{
//		Keys:   []string{"sk-prov-alice-0a1b2c3d4e"},
//		Script: []fakellm.Response{fakellm.ToolCall("terminal", map[string]string{"command": "env"})},
//		Responder: func(r fakellm.Record) fakellm.Response {
//			return fakellm.Text("probe done for alice")
//		},
//	})
//	if err != nil {
//		return err
//	}
//	defer srv.Close()
//	// ... configure the tenant with srv.BaseURL, drive a turn ...
//	recs, err := srv.WaitRequests(ctx, fakellm.KindMain, 2)
//	for _, r := range recs {
//		if r.Auth != "sk-prov-alice-0a1b2c3d4e" {
//			// a foreign key reached alice's provider
//		}
//	}
//
// Journal (or Options.Journal) writes every record as a JSON line, so another
// process can read a provider's traffic back with ReadJournal.
//
// Record.Turn reads the latest user turn the way a target may shape it
// (prompts wrapped in text of its own or split into content parts, user
// messages appended after a tool result) and finds tool results by call id
// anywhere in it. Options.TurnBound ends a turn that loops past it with
// LoopedText; Options.ReplyCanary stamps every answer (its text, its
// tool-call ids) with the tenant's reply canary; Call.ID lets a responder
// choose a call's id, so it can find that call's result again.
package fakellm
