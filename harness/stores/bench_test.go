package stores

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The benchmarks' data: benchKeys Redis keys (strings and hashes) and
// benchRows PostgreSQL rows (text, bytea, jsonb), a few holding a
// tenant's own canary, scanned by the store scan and, side by side on the
// same server, read by the baseline tools (which match nothing).
const (
	benchKeys = 50000
	benchRows = 50000
)

// BenchmarkRedisScan: keys/s of the store scan against
// `redis-cli --scan | xargs redis-cli mget` over the same keys.
//
//	go test -run '^$' -bench 'RedisScan|PostgresScan' -benchtime 5x ./harness/stores
func BenchmarkRedisScan(b *testing.B) {
	ts := newTenants(b)
	st := startStore(b, Spec{Kind: Redis, TenantData: true, Owners: []Owner{{Keys: "sess:{tenant}:*"}}})
	ctx := context.Background()
	o, err := redis.ParseURL(st.URL)
	require.NoError(b, err)
	c := redis.NewClient(o)
	defer c.Close()
	strs := 0
	for i := 0; i < benchKeys; i += 1000 {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < i+1000 && j < benchKeys; j++ {
				t := ts[j%len(ts)]
				val := fmt.Sprintf(`{"turn":%d,"text":"%s","model":"%s"}`, j, strings.Repeat("lorem ipsum ", 16), t.Model())
				if j%10 == 9 {
					p.HSet(ctx, fmt.Sprintf("sess:%s:%d", t.Name, j), "msg", val, "n", j)
				} else {
					p.Set(ctx, fmt.Sprintf("sess:%s:%d", t.Name, j), val, 0)
					strs++
				}
			}
			return nil
		})
		require.NoError(b, err)
	}
	sc := scanOf(b, ts)
	b.Run("tenantcanary", func(b *testing.B) {
		n := 0
		for b.Loop() {
			res := st.Scan(ctx, sc)
			if res.Keys != benchKeys || len(res.Findings) > 0 {
				b.Fatalf("scanned %d keys (want %d), findings: %v", res.Keys, benchKeys, res.Findings)
			}
			n++
		}
		b.ReportMetric(float64(n*benchKeys)/b.Elapsed().Seconds(), "keys/s")
	})
	// The baseline reads the string keys' values only (MGET of a hash is
	// nil); it lists every key.
	b.Run("redis-cli-scan-mget", func(b *testing.B) {
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			b.Skipf("redis-cli not installed: %v", err)
		}
		n := 0
		for b.Loop() {
			out, err := exec.Command("sh", "-c", cli+` -u "$1" --scan | xargs `+cli+` -u "$1" mget | grep -c turn`, "sh", st.URL).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(strs) {
				b.Fatalf("redis-cli: %v: %s (want %d values)", err, out, strs)
			}
			n++
		}
		b.ReportMetric(float64(n*benchKeys)/b.Elapsed().Seconds(), "keys/s")
	})
}

// BenchmarkPostgresScan: rows/s of the store scan against
// `pg_dump --data-only` of the same database.
func BenchmarkPostgresScan(b *testing.B) {
	ts := newTenants(b)
	st := startStore(b, Spec{Kind: Postgres, TenantData: true, Owners: []Owner{{Table: "sessions", Column: "profile"}}})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, st.URL)
	require.NoError(b, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE sessions (id serial PRIMARY KEY, profile text, data bytea, meta jsonb, note text)`)
	require.NoError(b, err)
	_, err = conn.Exec(ctx, `INSERT INTO sessions (profile, data, meta, note)
		SELECT (ARRAY[$1, $2, $3])[1 + i % 3], convert_to(repeat('lorem ipsum ', 8) || i, 'UTF8'),
			jsonb_build_object('turn', i, 'text', repeat('dolor sit ', 8), 'model', (ARRAY[$4, $5, $6])[1 + i % 3]), md5(i::text)
		FROM generate_series(1, $7::int) i`,
		ts[0].Name, ts[1].Name, ts[2].Name, ts[0].Model(), ts[1].Model(), ts[2].Model(), benchRows)
	require.NoError(b, err)
	sc := scanOf(b, ts)
	b.Run("tenantcanary", func(b *testing.B) {
		n := 0
		for b.Loop() {
			res := st.Scan(ctx, sc)
			if res.Rows != benchRows || len(res.Findings) > 0 {
				b.Fatalf("scanned %d rows (want %d), findings: %v", res.Rows, benchRows, res.Findings)
			}
			n++
		}
		b.ReportMetric(float64(n*benchRows)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pg_dump-data-only", func(b *testing.B) {
		dump, err := exec.LookPath("pg_dump")
		if err != nil {
			b.Skipf("pg_dump not installed: %v", err)
		}
		n := 0
		for b.Loop() {
			out, err := exec.Command("sh", "-c", dump+` --data-only -d "$1" | wc -l`, "sh", st.URL).CombinedOutput()
			if lines, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || lines < benchRows {
				b.Fatalf("pg_dump: %v: %s (want at least %d lines)", err, out, benchRows)
			}
			n++
		}
		b.ReportMetric(float64(n*benchRows)/b.Elapsed().Seconds(), "rows/s")
	})
}
