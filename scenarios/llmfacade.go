package scenarios

import (
	"fmt"
	"strings"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// checkLLMFacade checks the plugin's LLM facade call of one probe (prompt
// llmFacadePrompt+tag): it reached t's own provider, with t's key and
// model. A facade that used another
// profile's provider shows as a Request finding (tag, t's canary, on a
// foreign provider, found by the request scan) and as the checks here.
func (e *Env) checkLLMFacade(t *tenants.Tenant, tag string, where invariants.Where) {
	prompt := llmFacadePrompt + tag
	var found bool
	for _, r := range t.Requests() {
		if !strings.Contains(string(r.RawBody), prompt) {
			continue
		}
		found = true
		seq := r.Seq
		w := where
		w.Request = &seq
		if r.Auth != t.ProviderKey() {
			e.Find(invariants.Finding{Invariant: invariants.Request, Tenant: t.Name, Where: w,
				Detail: "the plugin's LLM facade call reached its provider without its own key"})
		}
		if m := r.Model(); m != t.Model() {
			e.Find(invariants.Finding{Invariant: invariants.Request, Tenant: t.Name, Where: w,
				Detail: fmt.Sprintf("the plugin's LLM facade call asked for model %q, not its own %q", m, t.Model())})
		}
	}
	if !found {
		e.Find(invariants.Finding{Invariant: invariants.Request, Tenant: t.Name, Where: where,
			Detail: "the plugin's LLM facade call never reached its own provider"})
	}
}
