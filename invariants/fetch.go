package invariants

import (
	"bytes"
	"fmt"
)

// FetchProbe is one URL a tenant gave a gateway, and what came of it.
type FetchProbe struct {
	Tenant string // who gave the URL
	Where  Where  // the route and field that carried it
	URL    string // the harness listener's URL
	Hits   int    // requests the listener received on the URL's path
	Body   string // what the listener answers there (a canary of the tenant)
	Reply  []byte // the gateway's answer to the tenant
}

// FetchLeaks reports, as Fetch findings, a probe whose URL the gateway
// fetched, and a probe whose listener answer came back in the reply.
func FetchLeaks(p FetchProbe) []Finding {
	var out []Finding
	if p.Hits > 0 {
		out = append(out, Finding{Invariant: Fetch, Tenant: p.Tenant, Where: p.Where,
			Detail: fmt.Sprintf("the gateway fetched the loopback URL %s that %s gave it (%d request(s) on the harness's listener)", p.URL, p.Tenant, p.Hits)})
	}
	if p.Body != "" && bytes.Contains(p.Reply, []byte(p.Body)) {
		out = append(out, Finding{Invariant: Fetch, Tenant: p.Tenant, Where: p.Where,
			Detail:  fmt.Sprintf("the body the harness's listener answered at %s came back to %s in the gateway's reply", p.URL, p.Tenant),
			Excerpt: p.Body})
	}
	return out
}
