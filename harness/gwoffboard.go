package harness

import (
	"errors"
	"fmt"
	"strings"
)

// Deprovision steps: a provisioner's `deprovision` command is run once per
// step, the step named on its stdin (DeprovisionRequest).
const (
	StepDisable = "disable" // the tenant is disabled: every credential refused, its data kept
	StepDelete  = "delete"  // the tenant is deleted: nothing of it may remain reachable
)

// DeprovisionRequest is the JSON document a `deprovision` command reads on
// its stdin: which tenant, which step, and the access it was provisioned
// with (its key, headers and ids, as the provisioner printed them).
//
//	{"step": "disable", "tenant": "alpha", "access": {"key": "sk-...", "ids": {"user": "3"}}}
//
// Its environment is the provisioner's (the target's env, GATEWAY_URL,
// ROOT) plus STEP and TENANT. Exit status 0 means the step is done; its
// stdout is not read.
type DeprovisionRequest struct {
	Step   string        `json:"step"`
	Tenant string        `json:"tenant"`
	Access GatewayAccess `json:"access"`
}

// validateRound2 checks the fields of issue 24 part B: url_fields,
// owner-only and id-giving store places, deprovision.
func (g *LLMGateway) validateRound2() []error {
	var errs []error
	if len(g.Deprovision) > 0 && len(g.Provision) == 0 {
		errs = append(errs, errors.New("llm_gateway.deprovision needs provision: a tenant that was never provisioned cannot be offboarded"))
	}
	for i, r := range g.Routes {
		for _, f := range r.URLFields {
			name := strings.TrimPrefix(f, "?")
			if name == "" || strings.ContainsAny(name, " {}") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
				errs = append(errs, fmt.Errorf("llm_gateway.routes[%d] (%s): url_fields %q: want a body field (a.b) or ?name for a query parameter", i, r.Name, f))
			}
		}
	}
	if s := g.Store; s != nil {
		for i, p := range s.Places {
			if (p.IDColumn == "") != (p.ID == "") {
				errs = append(errs, fmt.Errorf("llm_gateway.store.places[%d]: give id_column and id together (the row's identifier and the ids key it becomes)", i))
			}
			if p.ID != "" && strings.HasSuffix(p.ID, "_id") {
				errs = append(errs, fmt.Errorf("llm_gateway.store.places[%d]: id %q: name the ids key without _id (log gives {log_id})", i, p.ID))
			}
		}
	}
	return errs
}

// OwnerOnly reports whether p declares owner-only rows: no column of
// them may hold a secret.
func (p StorePlace) OwnerOnly() bool { return p.Column == "" }
