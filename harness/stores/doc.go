// Package stores scans a target's shared stores (Redis, PostgreSQL) for
// canaries, owner-aware: every key of every Redis database (its name and
// its value, of every type) and every row of every user table of every
// PostgreSQL database, each value through the project's one scanner
// (invariants/scan: encodings, containers, decodings). A key or row a
// tenant owns (Owner: a Redis key glob with {tenant}, a table's column
// whose value names the tenant) that holds another tenant's canary is a
// `store` finding; a key or row nobody owns that holds a tenant's secret
// is a `shared_place` one; and when the target declares that it keeps
// per-tenant data there, each tenant's own canary must be seen (the
// positive control).
//
// A harness.Sandbox owns a target's stores for its run (Sandbox.Stores),
// and the scenarios scan them after every phase. The same package starts
// the stores of a local run (a real server from
// the machine's packages, internal/storeproc) or reaches the ones a
// staging target gives by URL:
//
//	sts, err := stores.Open(ctx, target.Stores, runDir)
//	defer sts.Close()
//	argv = harness.Expand(argv, sts.Vars()) // {redis_url}, {postgres_url}
//	...
//	for _, st := range sts.Stores() {
//		res := st.Scan(ctx, stores.Scan{Matcher: chk.Matcher(), Tenants: stores.TenantsOf(set.Tenants, nil)})
//		findings = append(findings, res.Findings...)
//	}
package stores
