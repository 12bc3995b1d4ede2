package stores

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// TestPostgresScanIsOwnerAware plants canaries in a real PostgreSQL: in a
// row alpha owns, beta's canary in a bytea column (raw and gzipped) and
// in a jsonb one is a store finding naming the table, column and primary
// key (one finding per table and column, however many rows); alpha's own
// canary there is none; beta's secret in a table nobody
// owns (no primary key: named by ctid), and in another database, is
// shared_place; the owner column may hold an id captured at provisioning.
func TestPostgresScanIsOwnerAware(t *testing.T) {
	t.Parallel()
	ts := newTenants(t)
	alpha, beta := ts[0], ts[1]
	st := startStore(t, Spec{Kind: Postgres, TenantData: true, Owners: []Owner{
		{Table: "app.sessions", Column: "profile"},
		{Table: "users", Column: "uid", Value: "{user_id}"},
	}})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, st.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	meta, err := json.Marshal(map[string]any{"history": []string{"hi", "ask " + beta.Value(tenants.Memory)}})
	require.NoError(t, err)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{sql: `CREATE SCHEMA app`},
		{sql: `CREATE TABLE app.sessions (id serial PRIMARY KEY, profile text, data bytea, meta jsonb, note text, blob bytea)`},
		{sql: `CREATE TABLE cache (k text, v text)`},
		{sql: `CREATE TABLE users (uid int PRIMARY KEY, token text)`},
		{sql: `INSERT INTO app.sessions (profile, data, meta, note) VALUES ($1, $2, $3, $4)`, args: []any{"alpha", []byte("\x00\x01" + beta.ProviderKey()), meta, alpha.ProviderKey()}},
		{sql: `INSERT INTO app.sessions (profile, blob) VALUES ($1, $2)`, args: []any{"alpha", gzipBytes(t, beta.Value(tenants.Soul))}},
		{sql: `INSERT INTO app.sessions (profile, note) VALUES ($1, $2)`, args: []any{"beta", beta.APIServerKey()}},
		{sql: `INSERT INTO cache (k, v) VALUES ('x', $1), ('y', $2)`, args: []any{beta.ProviderKey(), beta.Model()}},
		{sql: `INSERT INTO users (uid, token) VALUES (7, $1), (8, $2)`, args: []any{beta.Value(tenants.Workdir), alpha.Value(tenants.Workdir)}},
		{sql: `CREATE DATABASE other`},
	} {
		_, err := conn.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	cfg, err := pgx.ParseConfig(st.URL)
	require.NoError(t, err)
	cfg.Database = "other"
	other, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, `CREATE TABLE kv (id int PRIMARY KEY, v text); INSERT INTO kv VALUES (1, '`+alpha.APIServerKey()+`')`)
	require.NoError(t, err)

	sc := scanOf(t, ts)
	sc.Tenants = TenantsOf(ts, map[string]map[string]string{"alpha": {"user_id": "7"}})
	res := st.Scan(ctx, sc)
	t.Log(invariants.Format(res.Findings))
	store := findingsOf(res.Findings, invariants.TenantStore)
	for _, want := range [][]string{
		{"store: alpha", "/postgres app.sessions (data, id=1)", "beta's provider_key"},
		{"store: alpha", "/postgres app.sessions (meta, id=1)", "beta's memory"},
		{"store: alpha", "/postgres app.sessions (blob, id=2) -> gzip", "beta's soul"},
		{"store: alpha", "/postgres public.users (token, uid=7)", "beta's workdir"},
	} {
		assert.True(t, anyHas(store, want...), "no store finding with %q in:\n%s", want, invariants.Format(res.Findings))
	}
	assert.False(t, anyHas(store, "note"), "the owners' own canaries in their rows are no findings")
	assert.False(t, anyHas(store, "uid=8"), "a row no id owns is no tenant's")
	shared := findingsOf(res.Findings, invariants.SharedPlace)
	assert.True(t, anyHas(shared, "/postgres public.cache (v, ctid (0,1))", "beta's provider_key"), invariants.Format(res.Findings))
	assert.True(t, anyHas(shared, "/other public.kv (v, id=1)", "alpha's api_server_key"), invariants.Format(res.Findings))
	assert.False(t, anyHas(shared, "ctid (0,2)"), "a non-secret canary in a shared row is no finding")
	assert.False(t, anyHas(shared, "public.users"), "a non-secret canary in a row nobody owns is no finding")
	assert.Empty(t, findingsOf(res.Findings, invariants.Harness))
	assert.EqualValues(t, 8, res.Rows)
	for _, c := range res.Controls {
		assert.Equal(t, c.Tenant != "gamma", c.Passed, "%+v", c)
	}
}

func gzipBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(gzipB64(t, s))
	require.NoError(t, err)
	return b
}

// TestATableThatCannotBeReadIsReportedAndTheRestScanned: a table the
// URL's user may not read is a harness finding naming it, the controls do
// not run, and the other tables are still scanned.
func TestATableThatCannotBeReadIsReportedAndTheRestScanned(t *testing.T) {
	t.Parallel()
	ts := newTenants(t)
	st := startStore(t, Spec{Kind: Postgres})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, st.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE a_secret (v text); INSERT INTO a_secret VALUES ('x');
		CREATE TABLE b_open (v text); INSERT INTO b_open VALUES ('`+ts[1].ProviderKey()+`');
		CREATE ROLE reader LOGIN; GRANT SELECT ON b_open TO reader`)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(st.URL)
	require.NoError(t, err)
	reader := &Store{Spec: Spec{Kind: Postgres, TenantData: true}, URL: "postgres://reader@" + cfg.Host + ":" + fmt.Sprint(cfg.Port) + "/postgres?sslmode=disable"}
	res := reader.Scan(ctx, scanOf(t, ts))
	harness := findingsOf(res.Findings, invariants.Harness)
	require.Len(t, harness, 1, invariants.Format(res.Findings))
	assert.Contains(t, harness[0], "table public.a_secret")
	assert.Contains(t, harness[0], "permission denied")
	assert.True(t, anyHas(findingsOf(res.Findings, invariants.SharedPlace), "public.b_open (v, ctid (0,1))"), "the readable table is still scanned")
	for _, c := range res.Controls {
		assert.False(t, c.Ran, "a partial scan runs no control: %+v", c)
	}
}
