package stores

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// scanBatch is how many keys one SCAN step asks for, and how many keys'
// types and values go in one pipeline.
const scanBatch = 1000

// redis scans every key of every logical database the server reports
// keys in: its name and its value, of every type.
func (r *run) redis(ctx context.Context) error {
	opts, err := redis.ParseURL(r.store.URL)
	if err != nil {
		return fmt.Errorf("parse the store's URL: %w", err)
	}
	// A store that does not answer is reported, not waited for.
	opts.DialerRetries, opts.MaxRetries = 1, 1
	rules, err := keyOwners(r.store.Spec.Owners, r.sc.Tenants)
	if err != nil {
		return err
	}
	dbs, err := redisDBs(ctx, opts)
	if err != nil {
		return err
	}
	// A database that cannot be read is reported; the others are still
	// scanned.
	var errs []error
	for _, db := range dbs {
		o := *opts
		o.DB = db
		if err := r.redisDB(ctx, &o, rules); err != nil {
			errs = append(errs, fmt.Errorf("database %d: %w", db, err))
		}
	}
	return errors.Join(errs...)
}

// redisDBs lists the logical databases that hold keys (INFO keyspace).
func redisDBs(ctx context.Context, opts *redis.Options) ([]int, error) {
	c := redis.NewClient(opts)
	defer c.Close()
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		return nil, fmt.Errorf("list the databases (INFO keyspace): %w", err)
	}
	var dbs []int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, _, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "db") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(name, "db")); err == nil {
			dbs = append(dbs, n)
		}
	}
	return dbs, nil
}

// redisDB scans one logical database. A reader goroutine lists the keys
// (SCAN) and fetches each batch's types and values while the batch before
// is scanned, so the round trips and the matching overlap.
func (r *run) redisDB(ctx context.Context, opts *redis.Options, rules []keyRule) error {
	c := redis.NewClient(opts)
	defer c.Close()
	base := fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan keyBatch, 1)
	done := make(chan struct{})
	var readErr error
	go func() {
		defer close(done)
		defer close(batches)
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, "", scanBatch).Result()
			if err != nil {
				readErr = fmt.Errorf("SCAN %d: %w", cursor, err)
				return
			}
			if len(keys) > 0 {
				b, err := fetchKeys(ctx, c, keys)
				if err != nil {
					readErr = err
					return
				}
				select {
				case batches <- b:
				case <-ctx.Done():
					return
				}
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	}()
	for b := range batches {
		r.redisKeys(ctx, base, b, rules)
	}
	<-done
	return readErr
}

// keyBatch is one SCAN step's keys, their types and values (nil for a
// type the scan does not read or a key gone since SCAN listed it), and
// the server's error for each key it could not read.
type keyBatch struct {
	keys  []string
	types []string
	vals  []redis.Cmder
}

// fetchKeys reads a batch of keys in one round trip (each key's TYPE and
// GET, the GET failing on what is no string) and, for the keys of other
// types, a second.
func fetchKeys(ctx context.Context, c *redis.Client, keys []string) (keyBatch, error) {
	b := keyBatch{keys: keys, types: make([]string, len(keys)), vals: make([]redis.Cmder, len(keys))}
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
			b.vals[i] = p.Get(ctx, k)
		}
		return nil
	}); err != nil && !serverError(err) {
		return b, fmt.Errorf("read %d keys: %w", len(keys), err)
	}
	var others []int
	for i, t := range types {
		b.types[i] = t.Val()
		if b.types[i] != "string" {
			b.vals[i] = nil
			others = append(others, i)
		}
	}
	if len(others) == 0 {
		return b, nil
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range others {
			k := keys[i]
			switch b.types[i] {
			case "hash":
				b.vals[i] = p.HGetAll(ctx, k)
			case "list":
				b.vals[i] = p.LRange(ctx, k, 0, -1)
			case "set":
				b.vals[i] = p.SMembers(ctx, k)
			case "zset":
				b.vals[i] = p.ZRange(ctx, k, 0, -1)
			case "stream":
				b.vals[i] = p.XRange(ctx, k, "-", "+")
			}
		}
		return nil
	}); err != nil && !serverError(err) {
		return b, fmt.Errorf("read %d keys: %w", len(others), err)
	}
	return b, nil
}

// redisKeys scans one batch of keys. SCAN may return a key twice (a
// rehash between steps): a repeat only repeats its findings, which Dedup
// folds.
func (r *run) redisKeys(ctx context.Context, base string, b keyBatch, rules []keyRule) {
	for i, k := range b.keys {
		r.res.Keys++
		owner, glob := ownerOfKey(rules, k)
		what := "a key"
		if owner != "" {
			what = fmt.Sprintf("a key (%s)", glob)
		}
		// Where a value sits is spelled out only for a finding: most
		// values hold none.
		at := func(part func() string) func() (invariants.Where, string) {
			return func() (invariants.Where, string) {
				// One finding per key: its fields and elements fold into it.
				q := strconv.Quote(k)
				return invariants.Where{Path: base, Part: "key " + q + part()}, base + " key " + q
			}
		}
		r.value(ctx, []byte(k), owner, at(func() string { return " (its name)" }), what)
		typ := b.types[i]
		if b.vals[i] == nil {
			if typ != "none" { // none: gone since SCAN listed it
				w, _ := at(func() string { return "" })()
				r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Tenant: owner, Where: w,
					Detail: fmt.Sprintf("not scanned: a value of type %q, which the store scan does not read", typ)})
			}
			continue
		}
		if err := b.vals[i].Err(); err != nil {
			if errors.Is(err, redis.Nil) {
				continue // gone since SCAN listed it
			}
			w, _ := at(func() string { return "" })()
			r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Tenant: owner, Where: w,
				Detail: fmt.Sprintf("not scanned: read the %s: %v", typ, err)})
			continue
		}
		switch v := b.vals[i].(type) {
		case *redis.StringCmd:
			r.value(ctx, []byte(v.Val()), owner, at(func() string { return "" }), what)
		case *redis.MapStringStringCmd:
			for _, f := range sortedKeys(v.Val()) {
				r.value(ctx, []byte(f), owner, at(func() string { return " hash field " + strconv.Quote(f) + " (its name)" }), what)
				r.value(ctx, []byte(v.Val()[f]), owner, at(func() string { return " hash field " + strconv.Quote(f) }), what)
			}
		case *redis.StringSliceCmd:
			for j, e := range v.Val() {
				r.value(ctx, []byte(e), owner, at(func() string { return fmt.Sprintf(" %s element %d", typ, j) }), what)
			}
		case *redis.XMessageSliceCmd:
			for _, m := range v.Val() {
				for _, f := range sortedKeys(m.Values) {
					r.value(ctx, []byte(f), owner, at(func() string { return " stream entry " + m.ID + " field " + strconv.Quote(f) + " (its name)" }), what)
					r.value(ctx, []byte(fmt.Sprint(m.Values[f])), owner, at(func() string { return " stream entry " + m.ID + " field " + strconv.Quote(f) }), what)
				}
			}
		}
	}
}

// serverError reports whether err is the server's answer to one command
// (a key gone or retyped since SCAN listed it), not a broken connection:
// the pipeline's other answers stand.
func serverError(err error) bool {
	var re redis.Error
	return errors.Is(err, redis.Nil) || errors.As(err, &re)
}
