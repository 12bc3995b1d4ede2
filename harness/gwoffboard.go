package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenantcanary/tenantcanary/internal/dotpath"
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
				errs = append(errs, fmt.Errorf("llm_gateway.routes[%d] (%s): url_fields %q: want a body field (a.b, a[].b) or ?name for a query parameter", i, r.Name, f))
				continue
			}
			if err := checkURLField(r.Body, f); err != nil {
				errs = append(errs, fmt.Errorf("llm_gateway.routes[%d] (%s): url_fields %q: %w", i, r.Name, f, err))
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

// checkURLField tries a body url field on the route's body template: a
// path that indexes what the body does not have (an array it names as a
// mapping, a missing array), or that reaches no place, is refused when
// the file loads. A body that is no JSON object as written (a placeholder
// standing for a number) is left to the run.
func checkURLField(body, field string) error {
	if strings.HasPrefix(field, "?") {
		return nil
	}
	doc := map[string]any{}
	if strings.TrimSpace(body) != "" && json.Unmarshal([]byte(body), &doc) != nil {
		return nil
	}
	n, err := dotpath.SetAll(doc, field, "http://127.0.0.1/check")
	if err == nil && n == 0 {
		err = errors.New("it reaches no place in the route's body (an array it indexes is empty)")
	}
	return err
}
