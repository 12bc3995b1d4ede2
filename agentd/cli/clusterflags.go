package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/server"
)

// clusterConfig is `agentd serve`'s cluster mode: given --postgres and
// --redis (or AGENTD_POSTGRES_URL and AGENTD_REDIS_URL), the server keeps
// its state in PostgreSQL and shares routing, events, turn shares and
// caches with the other replicas through Redis. Neither: a single agentd,
// as always.
type clusterConfig struct {
	postgres, redis, replica string
	namespace                string
	authTTL, responseTTL     time.Duration
	profileTurns             int
}

// clusterFlags registers cluster mode's flags on fs.
func clusterFlags(fs *flag.FlagSet) *clusterConfig {
	c := &clusterConfig{}
	fs.StringVar(&c.postgres, "postgres", "", "cluster mode: PostgreSQL URL of the replicas' shared state (also AGENTD_POSTGRES_URL); needs --redis")
	fs.StringVar(&c.redis, "redis", "", "cluster mode: Redis URL of the replicas' routing, events, shares and caches (also AGENTD_REDIS_URL); needs --postgres")
	fs.StringVar(&c.replica, "replica", "", "cluster mode: this replica's name (also AGENTD_REPLICA; default host name and pid)")
	fs.StringVar(&c.namespace, "namespace", "", "cluster mode: keep this cluster apart from others on the same stores (also AGENTD_CLUSTER_NAMESPACE; any text, hashed unless 1-32 of [a-z0-9_])")
	fs.DurationVar(&c.authTTL, "auth-cache-ttl", 0, "cluster mode: keep tenants' credential hashes in Redis this long, trusted without reading .env (0: read .env at every check); revocations through agentd drop them on every replica")
	fs.DurationVar(&c.responseTTL, "response-cache-ttl", 0, "cluster mode: keep providers' answers in a per-tenant response cache this long (0: no cache)")
	fs.IntVar(&c.profileTurns, "cluster-profile-turns", 0, "cluster mode: turns of one profile running at once over every replica; past it a turn waits (0: 4 times --profile-turns)")
	return c
}

// on reports whether cluster mode was asked for, taking the environment's
// URLs and replica name where no flag gave them; a half-given cluster is
// a usage error.
func (c *clusterConfig) on(env *Env) (bool, error) {
	if c.postgres == "" {
		c.postgres = env.Getenv("AGENTD_POSTGRES_URL")
	}
	if c.redis == "" {
		c.redis = env.Getenv("AGENTD_REDIS_URL")
	}
	if c.replica == "" {
		c.replica = env.Getenv("AGENTD_REPLICA")
	}
	if c.namespace == "" {
		c.namespace = env.Getenv("AGENTD_CLUSTER_NAMESPACE")
	}
	switch {
	case c.postgres == "" && c.redis == "":
		return false, nil
	case c.postgres == "" || c.redis == "":
		return false, fmt.Errorf("cluster mode needs both --postgres and --redis (or AGENTD_POSTGRES_URL and AGENTD_REDIS_URL)")
	case c.authTTL < 0 || c.responseTTL < 0 || c.profileTurns < 0:
		return false, fmt.Errorf("--auth-cache-ttl, --response-cache-ttl and --cluster-profile-turns must not be negative")
	}
	return true, nil
}

// open connects this replica to the cluster.
func (c *clusterConfig) open(ctx context.Context, env *Env, lim server.Limits, log *slog.Logger) (*cluster.Cluster, error) {
	fs, err := faults.FromEnv(env.Getenv)
	if err != nil {
		return nil, err
	}
	turns := c.profileTurns
	if turns == 0 {
		per := lim.ProfileTurns
		if per == 0 {
			per = server.DefaultLimits().ProfileTurns
		}
		turns = 4 * per
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := cluster.Open(octx, cluster.Options{Postgres: c.postgres, Redis: c.redis, Replica: c.replica, Namespace: c.namespace,
		AuthTTL: c.authTTL, ResponseTTL: c.responseTTL, ProfileTurns: turns, Faults: fs, Log: log})
	if err != nil {
		return nil, fmt.Errorf("cluster mode: %w", err)
	}
	return cl, nil
}
