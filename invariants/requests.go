package invariants

import (
	"fmt"
	"sort"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// RequestLeaks checks every request every tenant's provider recorded: it
// carries the tenant's own key, a main request names the tenant's own
// model, and no header or body holds another tenant's canary in any
// encoding. Tenants without a provider are skipped.
func RequestLeaks(ts []*tenants.Tenant) []Finding {
	return withChecker(ts, "", (*Checker).RequestLeaks)
}

// RequestLeaks is the package's RequestLeaks over c's tenants.
func (c *Checker) RequestLeaks() []Finding {
	var out []Finding
	var state [32]byte
	if c.requests != nil {
		state = canaryState(c.m.ts)
	}
	for _, t := range c.m.ts {
		if !t.HasProvider() {
			continue
		}
		if c.requests != nil {
			out = append(out, c.m.requestLeaksCached(c.requests, state, t, t.Requests())...)
		} else {
			out = append(out, c.m.requestLeaks(c.m.ts, t, t.Requests())...)
		}
	}
	return Dedup(out)
}

// RequestLeaksOf checks the records of t's provider (read from a journal, say)
// against the canaries of every tenant in ts.
func RequestLeaksOf(ts []*tenants.Tenant, t *tenants.Tenant, recs []fakellm.Record) []Finding {
	m, err := compile(ts)
	if err != nil {
		return harnessFinding(t.Name, err)
	}
	return Dedup(m.requestLeaks(ts, t, recs))
}

// metadataProbe reports whether r is a keyless GET or HEAD (a client probing
// its provider: /api/v1/models, /api/tags, /v1/props, /version): recorded
// and scanned like any request, but without a key it is no key violation.
// A request presenting a key that is not the tenant's still is.
func metadataProbe(r fakellm.Record) bool {
	return r.Auth == "" && r.Kind != fakellm.KindMain && (r.Method == "GET" || r.Method == "HEAD")
}

func (m matcher) requestLeaks(ts []*tenants.Tenant, t *tenants.Tenant, recs []fakellm.Record) []Finding {
	var out []Finding
	for _, r := range recs {
		where := Where{Request: intp(r.Seq), Path: r.Path}
		if r.Auth != t.ProviderKey() && !metadataProbe(r) {
			f := Finding{Invariant: Request, Tenant: t.Name, Where: where}
			f.Where.Part = "auth"
			switch owner := ownerOf(ts, tenants.ProviderKey, r.Auth); {
			case owner != "":
				f.Owner, f.Kind = owner, tenants.ProviderKey
				f.Detail = "the key presented is not " + t.Name + "'s"
			case r.Auth == "":
				f.Detail = "no key presented"
			default:
				f.Detail = fmt.Sprintf("an unknown key was presented (%d bytes)", len(r.Auth))
			}
			out = append(out, f)
		}
		if r.Kind == fakellm.KindMain && !t.Declares(r.Model()) {
			f := Finding{Invariant: Request, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("main request names model %q, want %q", r.Model(), t.Model())}
			f.Where.Part = "model"
			if owner := ownerOf(ts, tenants.Model, r.Model()); owner != "" {
				f.Owner, f.Kind = owner, tenants.Model
			}
			out = append(out, f)
		}
		names := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			w := where
			w.Part = "header " + k
			out = append(out, m.find(Request, t.Name, []byte(r.Headers[k]), w, false, false)...)
		}
		w := where
		w.Part = "body"
		out = append(out, m.findJSONDoc(Request, t.Name, r.RawBody, r.Body, w, false)...)
	}
	return out
}
