package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/store"
)

// Options configure a replica's cluster mode.
type Options struct {
	Postgres string // postgres://... (required)
	Redis    string // redis://... (required)
	Replica  string // this replica's name; DefaultReplica() when empty
	// AuthTTL is how long a tenant's credential hash is kept in the shared
	// auth cache (Redis) and trusted without reading its .env; 0 (the
	// default) reads the .env at every check, as a single agentd does.
	AuthTTL time.Duration
	// ResponseTTL keeps providers' answers in the response cache that long;
	// 0 (the default) caches none.
	ResponseTTL time.Duration
	// ProfileTurns bounds one tenant's turns in flight over every replica
	// (0: no cluster-wide bound).
	ProfileTurns int
	// RouteTTL is how long a session's routing entry lives after it was
	// last opened; a day when zero.
	RouteTTL time.Duration
	// Namespace keeps this cluster's Redis keys and channels
	// (agentd@<ns>:...) and PostgreSQL tables (schema agentd_<ns>) apart
	// from other clusters' on the same stores; "" is none (agentd:...,
	// schema public). Any text: one that is not 1-32 of [a-z0-9_] is
	// replaced by a hash of it (a folder's path, say).
	Namespace string
	Faults    faults.Set   // seeded faults (test-only)
	Log       *slog.Logger // the server's own log
}

// DefaultReplica is the host name and the process id.
func DefaultReplica() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "agentd"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}

// Cluster is one replica's view of the cluster. Close stops everything
// it started.
type Cluster struct {
	opts   Options
	prefix string // of every Redis key and channel: agentd: or agentd@<ns>:
	pg     *store.Postgres
	rdb    *redis.Client
	kv     kv

	ps      *redis.PubSub
	stop    context.CancelFunc
	done    chan struct{} // closed when the receive loop returned
	closeMu sync.Mutex
	closed  bool

	subMu    sync.Mutex // held across a follow count's change and its (un)subscription
	mu       sync.Mutex
	follows  map[string]int           // channels followed, by how many sessions
	ready    map[string]chan struct{} // subscription confirmations awaited
	onEvent  func(channel string, ev Event)
	onRevoke func(profile string)
	auth     map[string]authEntry // this replica's memory of the auth cache, by profile
}

// Open connects to both stores, migrates PostgreSQL and starts the
// replica's subscription (revocations, then each tenant's events as its
// sessions open here).
func Open(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Postgres == "" || opts.Redis == "" {
		return nil, errors.New("cluster mode needs both --postgres and --redis")
	}
	if opts.Replica == "" {
		opts.Replica = DefaultReplica()
	}
	if opts.RouteTTL <= 0 {
		opts.RouteTTL = 24 * time.Hour
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	ropt, err := redis.ParseURL(opts.Redis)
	if err != nil {
		return nil, fmt.Errorf("cluster: redis url: %w", err)
	}
	// A command ends with its caller's context (a cancelled request does
	// not wait on Redis); go-redis then closes the connection it used.
	ropt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(ropt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cluster: reach redis at %s: %w", ropt.Addr, err)
	}
	ns := namespace(opts.Namespace)
	pg, err := store.OpenPostgresIn(ctx, opts.Postgres, ns)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{opts: opts, prefix: "agentd:", pg: pg, rdb: rdb, kv: goRedis{rdb}, follows: map[string]int{}, ready: map[string]chan struct{}{},
		auth: map[string]authEntry{}, done: make(chan struct{})}
	if ns != "" {
		c.prefix = "agentd@" + ns + ":"
	}
	if opts.Faults.Has(faults.StoreCancelReply) {
		host, port, _ := net.SplitHostPort(ropt.Addr)
		c.kv = newRespPool(net.JoinHostPort(host, port), ropt.DB) // the bug's client
	}
	c.ps = rdb.Subscribe(ctx)
	loopCtx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.receive(loopCtx) // ends when Close stops it
	if err := c.subscribe(ctx, c.prefix+"revocations"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Replica is this replica's name.
func (c *Cluster) Replica() string { return c.opts.Replica }

// Postgres is the shared state database.
func (c *Cluster) Postgres() *store.Postgres { return c.pg }

// Options are the options the cluster was opened with (defaults filled).
func (c *Cluster) Options() Options { return c.opts }

// State is the store.State of p: its rows in the shared database.
func (c *Cluster) State(_ context.Context, p profile.Profile) (store.State, error) {
	return c.pg.ForProfile(p.Name), nil
}

// Close stops the subscription and closes both stores' clients. Safe to
// call twice.
func (c *Cluster) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.stop()
	err := c.ps.Close() // ends a Receive under way
	<-c.done
	err = errors.Join(err, c.kv.Close(), c.rdb.Close())
	c.pg.Close()
	if err != nil {
		return fmt.Errorf("close cluster: %w", err)
	}
	return nil
}

// key is a Redis key (or channel) of profile: agentd:<profile>:parts...,
// or agentd@<namespace>:<profile>:parts... (a profile name holds no ':',
// see profile.ValidName).
func (c *Cluster) key(profile string, parts ...string) string {
	k := c.prefix + profile
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

var nsRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// namespace is the name a Namespace option stands for ("" for none).
func namespace(text string) string {
	if text == "" || nsRE.MatchString(text) {
		return text
	}
	sum := sha256.Sum256([]byte(text))
	return "h" + hex.EncodeToString(sum[:8])
}
