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
	for _, db := range dbs {
		o := *opts
		o.DB = db
		if err := r.redisDB(ctx, &o, rules); err != nil {
			return fmt.Errorf("database %d: %w", db, err)
		}
	}
	return nil
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

// redisDB scans one logical database: SCAN in batches, each batch's types
// in one pipeline and its values in another.
func (r *run) redisDB(ctx context.Context, opts *redis.Options, rules []keyRule) error {
	c := redis.NewClient(opts)
	defer c.Close()
	base := fmt.Sprintf("redis://%s/%d", opts.Addr, opts.DB)
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "", scanBatch).Result()
		if err != nil {
			return fmt.Errorf("SCAN %d: %w", cursor, err)
		}
		if err := r.redisKeys(ctx, c, base, keys, rules); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// redisKeys reads and scans one batch of keys. SCAN may return a key
// twice (a rehash between steps): a repeat only repeats its findings,
// which Dedup folds.
func (r *run) redisKeys(ctx context.Context, c *redis.Client, base string, keys []string, rules []keyRule) error {
	if len(keys) == 0 {
		return nil
	}
	types := make([]*redis.StatusCmd, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("TYPE of %d keys: %w", len(keys), err)
	}
	vals := make([]redis.Cmder, len(keys))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			switch types[i].Val() {
			case "string":
				vals[i] = p.Get(ctx, k)
			case "hash":
				vals[i] = p.HGetAll(ctx, k)
			case "list":
				vals[i] = p.LRange(ctx, k, 0, -1)
			case "set":
				vals[i] = p.SMembers(ctx, k)
			case "zset":
				vals[i] = p.ZRange(ctx, k, 0, -1)
			case "stream":
				vals[i] = p.XRange(ctx, k, "-", "+")
			}
		}
		return nil
	}); err != nil && !serverError(err) {
		return fmt.Errorf("values of %d keys: %w", len(keys), err)
	}
	for i, k := range keys {
		r.res.Keys++
		owner, glob := ownerOfKey(rules, k)
		// One finding per key: its fields and elements fold into it.
		place := base + " key " + strconv.Quote(k)
		what := "a key"
		if owner != "" {
			what = fmt.Sprintf("a key (%s)", glob)
		}
		at := func(part string) invariants.Where {
			return invariants.Where{Path: base, Part: "key " + strconv.Quote(k) + part}
		}
		r.value(ctx, []byte(k), owner, at(" (its name)"), place, what)
		typ := types[i].Val()
		if vals[i] == nil {
			if typ != "none" { // gone since SCAN listed it
				r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Tenant: owner, Where: at(""),
					Detail: fmt.Sprintf("not scanned: a value of type %q, which the store scan does not read", typ)})
			}
			continue
		}
		if err := vals[i].Err(); err != nil {
			if errors.Is(err, redis.Nil) {
				continue // gone since SCAN listed it
			}
			r.res.Findings = append(r.res.Findings, invariants.Finding{Invariant: invariants.Harness, Tenant: owner, Where: at(""),
				Detail: fmt.Sprintf("not scanned: read the %s: %v", typ, err)})
			continue
		}
		switch v := vals[i].(type) {
		case *redis.StringCmd:
			r.value(ctx, []byte(v.Val()), owner, at(""), place, what)
		case *redis.MapStringStringCmd:
			for _, f := range sortedKeys(v.Val()) {
				r.value(ctx, []byte(f), owner, at(" hash field "+strconv.Quote(f)+" (its name)"), place, what)
				r.value(ctx, []byte(v.Val()[f]), owner, at(" hash field "+strconv.Quote(f)), place, what)
			}
		case *redis.StringSliceCmd:
			for j, e := range v.Val() {
				r.value(ctx, []byte(e), owner, at(fmt.Sprintf(" %s element %d", typ, j)), place, what)
			}
		case *redis.XMessageSliceCmd:
			for _, m := range v.Val() {
				for _, f := range sortedKeys(m.Values) {
					r.value(ctx, []byte(f), owner, at(" stream entry "+m.ID+" field "+strconv.Quote(f)+" (its name)"), place, what)
					r.value(ctx, []byte(fmt.Sprint(m.Values[f])), owner, at(" stream entry "+m.ID+" field "+strconv.Quote(f)), place, what)
				}
			}
		}
	}
	return nil
}

// serverError reports whether err is the server's answer to one command
// (a key gone or retyped since SCAN listed it), not a broken connection:
// the pipeline's other answers stand.
func serverError(err error) bool {
	var re redis.Error
	return errors.Is(err, redis.Nil) || errors.As(err, &re)
}
