// Package cluster is agentd's cluster mode: several `agentd serve`
// replicas over one set of homes, their state in PostgreSQL and their
// coordination in Redis.
//
//   - state: every profile's sessions and messages, cron job runs and cron
//     leases in PostgreSQL (store.Postgres), each row keyed by its profile;
//
//   - session routing: which replica holds a stored session live
//     (agentd:<profile>:route:<stored>); a session resumed on another
//     replica moves there, and the one that held it ends its live copy;
//
//   - events between replicas: one channel per tenant
//     (agentd:<profile>:events), handed to the sessions of that tenant only;
//
//   - fair shares: a tenant's turns in flight over every replica
//     (agentd:<profile>:inflight, a sorted set of leases that expire, so
//     a replica that dies gives its shares back);
//
//   - auth cache: a tenant's credential hash (agentd:<profile>:auth) with a
//     short TTL, dropped on every replica at once when one revokes it
//     (channel agentd:revocations);
//
//   - response cache: a provider's answer keyed by the tenant and the
//     request (agentd:<profile>:llm:<sha256>), when switched on.
//
//     c, err := cluster.Open(ctx, cluster.Options{Postgres: pgURL, Redis: redisURL, Replica: "r1"})
//     defer c.Close()
//     state, err := c.State(ctx, profile) // a store.State of that profile's rows
//
// A single agentd with no stores stays the default: nothing here runs
// unless `agentd serve` is given --postgres and --redis.
package cluster
