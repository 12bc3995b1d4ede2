package cluster_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/llm"
	"github.com/tenantcanary/tenantcanary/agentd/store"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// stores are one Redis and one PostgreSQL of a test's own.
type stores struct{ redis, postgres *storeproc.Server }

func startStores(t *testing.T) stores {
	t.Helper()
	for _, k := range storeproc.Kinds {
		if err := storeproc.Available(k); err != nil {
			t.Skipf("%v (.ci/run installs it)", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var s stores
	var err error
	s.redis, err = storeproc.Start(ctx, storeproc.Redis, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.redis.Stop() })
	s.postgres, err = storeproc.Start(ctx, storeproc.Postgres, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.postgres.Stop() })
	return s
}

// replica opens one replica's cluster over s.
func (s stores) replica(t *testing.T, name string, set func(*cluster.Options)) *cluster.Cluster {
	t.Helper()
	o := cluster.Options{Postgres: s.postgres.URL, Redis: s.redis.URL, Replica: name}
	if set != nil {
		set(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := cluster.Open(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func seeded(f faults.Name, on bool) faults.Set {
	if !on {
		return nil
	}
	return faults.Set{f: true}
}

// forEach runs body as "defended" and as the fault's positive control.
func forEach(t *testing.T, f faults.Name, body func(t *testing.T, on bool)) {
	for _, on := range []bool{false, true} {
		name := "defended"
		if on {
			name = string(f)
		}
		t.Run(name, func(t *testing.T) { body(t, on) })
	}
}

// TestRevocationReachesEveryReplica: a credential both replicas cached
// is refused by both the moment Revoke returns on one; with
// revocation-local-only the other still accepts the old key.
func TestRevocationReachesEveryReplica(t *testing.T) {
	t.Parallel()
	forEach(t, faults.RevocationLocalOnly, func(t *testing.T, on bool) {
		s := startStores(t)
		set := func(o *cluster.Options) { o.AuthTTL = time.Minute; o.Faults = seeded(faults.RevocationLocalOnly, on) }
		r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
		ctx := context.Background()
		var mu sync.Mutex
		current := sha256.Sum256([]byte("old-key"))
		load := func() ([sha256.Size]byte, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return current, true, nil
		}
		for _, r := range []*cluster.Cluster{r1, r2} {
			sum, found, err := r.TenantKey(ctx, "beta", load)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, sha256.Sum256([]byte("old-key")), sum)
		}
		mu.Lock()
		current = sha256.Sum256([]byte("new-key")) // the .env is rewritten...
		mu.Unlock()
		require.NoError(t, r1.Revoke(ctx, "beta")) // ...and r1 revokes the old key
		sum1, _, err := r1.TenantKey(ctx, "beta", load)
		require.NoError(t, err)
		require.Equal(t, sha256.Sum256([]byte("new-key")), sum1, "the revoking replica reads the new key")
		sum2, _, err := r2.TenantKey(ctx, "beta", load)
		require.NoError(t, err)
		if on {
			require.Equal(t, sha256.Sum256([]byte("old-key")), sum2, "the seeded fault: the other replica still holds the old key")
			return
		}
		require.Equal(t, sha256.Sum256([]byte("new-key")), sum2, "the other replica dropped the old key before Revoke returned")
	})
}

// TestEventsStayOnTheirTenantsChannel: an event of alpha published on r1
// reaches r2 on alpha's channel, never on beta's; with events-unscoped
// both tenants' channels are one.
func TestEventsStayOnTheirTenantsChannel(t *testing.T) {
	t.Parallel()
	forEach(t, faults.EventsUnscoped, func(t *testing.T, on bool) {
		s := startStores(t)
		set := func(o *cluster.Options) { o.Faults = seeded(faults.EventsUnscoped, on) }
		r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
		got := make(chan string, 4)
		r2.OnEvent(func(channel string, ev cluster.Event) { got <- channel + " " + ev.Profile + " " + ev.Type })
		ctx := context.Background()
		for _, p := range []string{"alpha", "beta"} {
			stop, err := r2.Follow(ctx, p)
			require.NoError(t, err)
			t.Cleanup(stop)
		}
		require.NoError(t, r1.Publish(ctx, cluster.Event{Type: cluster.EventConfigChanged, Profile: "alpha", Payload: map[string]any{"value": "secret-of-alpha"}}))
		select {
		case m := <-got:
			require.Equal(t, r2.EventsChannel("alpha")+" alpha config.changed", m)
		case <-time.After(30 * time.Second):
			t.Fatal("alpha's event never reached r2")
		}
		if on {
			require.Equal(t, r2.EventsChannel("alpha"), r2.EventsChannel("beta"), "the seeded fault: one channel for every tenant")
			return
		}
		require.NotEqual(t, r2.EventsChannel("alpha"), r2.EventsChannel("beta"))
		require.Equal(t, "agentd:alpha:events", r2.EventsChannel("alpha"))
	})
}

// TestCancelledCommandLeavesNoReply: alpha's response-cache read is
// cancelled while Redis holds its reply back; beta's read on the next
// pooled connection gets beta's own answer. With store-cancel-reply the
// undrained connection hands beta alpha's cached answer (redis-py #2624).
func TestCancelledCommandLeavesNoReply(t *testing.T) {
	t.Parallel()
	forEach(t, faults.StoreCancelReply, func(t *testing.T, on bool) {
		s := startStores(t)
		r := s.replica(t, "r1", func(o *cluster.Options) {
			o.ResponseTTL = time.Minute
			o.Faults = seeded(faults.StoreCancelReply, on)
		})
		ctx := context.Background()
		alpha, beta := r.ResponseCache("alpha"), r.ResponseCache("beta")
		alphaBody, betaBody := []byte(`{"q":"alpha"}`), []byte(`{"q":"beta"}`)
		alpha.Put(ctx, alphaBody, llm.Response{Message: llm.Message{Role: "assistant", Content: "answer-of-alpha"}})
		beta.Put(ctx, betaBody, llm.Response{Message: llm.Message{Role: "assistant", Content: "answer-of-beta"}})

		opt, err := redis.ParseURL(s.redis.URL)
		require.NoError(t, err)
		admin := redis.NewClient(opt)
		defer admin.Close()
		// Redis answers no client for 500ms: alpha's read gives up first.
		require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err())
		actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, hit := alpha.Get(actx, alphaBody)
		cancel()
		require.False(t, hit, "alpha's read was cancelled")
		require.ErrorIs(t, actx.Err(), context.DeadlineExceeded)

		got, hit := beta.Get(ctx, betaBody)
		require.True(t, hit)
		if on {
			require.Equal(t, "answer-of-alpha", got.Message.Content, "the seeded fault: beta reads the reply to alpha's cancelled command")
			return
		}
		require.Equal(t, "answer-of-beta", got.Message.Content)
	})
}

// TestResponseCacheIsPerTenant: the same request body from two tenants is
// two entries; with cache-key-no-tenant the second tenant gets the
// first's answer.
func TestResponseCacheIsPerTenant(t *testing.T) {
	t.Parallel()
	forEach(t, faults.CacheKeyNoTenant, func(t *testing.T, on bool) {
		s := startStores(t)
		set := func(o *cluster.Options) { o.ResponseTTL = time.Minute; o.Faults = seeded(faults.CacheKeyNoTenant, on) }
		r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
		require.Nil(t, s.replica(t, "off", nil).ResponseCache("alpha"), "no response cache unless asked for")
		ctx := context.Background()
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"same"}]}`)
		r1.ResponseCache("alpha").Put(ctx, body, llm.Response{Message: llm.Message{Content: "answer-of-alpha"}})
		got, hit := r2.ResponseCache("beta").Get(ctx, body)
		if on {
			require.True(t, hit)
			require.Equal(t, "answer-of-alpha", got.Message.Content, "the seeded fault: beta gets alpha's answer")
			return
		}
		require.False(t, hit, "beta's cache holds nothing of alpha's")
		got, hit = r2.ResponseCache("alpha").Get(ctx, body)
		require.True(t, hit, "alpha's answer is alpha's on every replica")
		require.Equal(t, "answer-of-alpha", got.Message.Content)
	})
}

// TestRoutingAndResumeProfile: a session claimed on r1 then on r2 names
// r1 as its previous holder; a resume is always under the caller's
// profile, and under resume-wrong-profile under the session's.
func TestRoutingAndResumeProfile(t *testing.T) {
	t.Parallel()
	forEach(t, faults.ResumeWrongProfile, func(t *testing.T, on bool) {
		s := startStores(t)
		set := func(o *cluster.Options) { o.Faults = seeded(faults.ResumeWrongProfile, on) }
		r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
		ctx := context.Background()
		prev, err := r1.Claim(ctx, "alpha", "stored-1")
		require.NoError(t, err)
		require.Empty(t, prev)
		prev, err = r2.Claim(ctx, "alpha", "stored-1")
		require.NoError(t, err)
		require.Equal(t, "r1", prev)
		require.Equal(t, "alpha", r2.ResumeProfile(ctx, "alpha", "stored-1"))
		if on {
			require.Equal(t, "alpha", r2.ResumeProfile(ctx, "beta", "stored-1"), "the seeded fault: beta's resume opens alpha's session")
			return
		}
		require.Equal(t, "beta", r2.ResumeProfile(ctx, "beta", "stored-1"))
	})
}

// TestTurnSharesSpanReplicas: a tenant's turns in flight are counted over
// every replica; another tenant's share is its own.
func TestTurnSharesSpanReplicas(t *testing.T) {
	t.Parallel()
	s := startStores(t)
	set := func(o *cluster.Options) { o.ProfileTurns = 2 }
	r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
	ctx := context.Background()
	rel1, err := r1.Acquire(ctx, "alpha")
	require.NoError(t, err)
	rel2, err := r2.Acquire(ctx, "alpha")
	require.NoError(t, err)
	_, err = r1.Acquire(ctx, "alpha")
	require.True(t, errors.Is(err, cluster.ErrShareFull), "a third turn of alpha over both replicas: %v", err)
	relB, err := r2.Acquire(ctx, "beta")
	require.NoError(t, err, "beta's share is its own")
	rel1()
	rel1() // twice is once
	n, err := r2.InFlight(ctx, "alpha")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rel3, err := r1.Acquire(ctx, "alpha")
	require.NoError(t, err)
	rel2()
	rel3()
	relB()
}

// TestNamespacesKeepClustersApart: two clusters on the same stores under
// different namespaces share no state, no events and no cache.
func TestNamespacesKeepClustersApart(t *testing.T) {
	t.Parallel()
	s := startStores(t)
	a := s.replica(t, "r1", func(o *cluster.Options) { o.Namespace = "/tmp/sandbox-a"; o.ResponseTTL = time.Minute })
	b := s.replica(t, "r1", func(o *cluster.Options) { o.Namespace = "/tmp/sandbox-b"; o.ResponseTTL = time.Minute })
	require.NotEqual(t, a.EventsChannel("alpha"), b.EventsChannel("alpha"))
	ctx := context.Background()
	sa, err := a.Postgres().ForProfile("alpha").CreateSession(ctx, store.Session{Model: "m"})
	require.NoError(t, err)
	_, err = b.Postgres().ForProfile("alpha").Session(ctx, sa.ID)
	require.ErrorIs(t, err, store.ErrUnknownSession)
	a.ResponseCache("alpha").Put(ctx, []byte("q"), llm.Response{Message: llm.Message{Content: "x"}})
	_, hit := b.ResponseCache("alpha").Get(ctx, []byte("q"))
	require.False(t, hit)
	_, hit = a.ResponseCache("alpha").Get(ctx, []byte("q"))
	require.True(t, hit)
}

// TestAcquireWaitGetsTheNextFreeShare: a turn past the tenant's bound
// waits for a share, and gets it once another replica gives one back.
func TestAcquireWaitGetsTheNextFreeShare(t *testing.T) {
	t.Parallel()
	s := startStores(t)
	set := func(o *cluster.Options) { o.ProfileTurns = 1 }
	r1, r2 := s.replica(t, "r1", set), s.replica(t, "r2", set)
	ctx := context.Background()
	rel1, err := r1.Acquire(ctx, "alpha")
	require.NoError(t, err)
	got := make(chan func(), 1)
	go func() { // ends when it got the share or the test ended
		rel, err := r2.AcquireWait(t.Context(), "alpha")
		if err == nil {
			got <- rel
		}
	}()
	select {
	case <-got:
		t.Fatal("a second turn of alpha got a share while the first held the only one")
	default:
	}
	rel1()
	select {
	case rel := <-got:
		rel()
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting turn never got the freed share")
	}
	cctx, cancel := context.WithCancel(ctx)
	rel, err := r1.Acquire(ctx, "alpha")
	require.NoError(t, err)
	cancel()
	_, err = r2.AcquireWait(cctx, "alpha")
	require.ErrorIs(t, err, context.Canceled, "a turn cancelled while it waits stops waiting")
	rel()
}
