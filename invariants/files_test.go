package invariants

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/base32"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// stateDB creates a WAL-mode state.db with the given rows in home; with
// walOnly the rows stay in the -wal file (the connection is kept open).
func stateDB(t *testing.T, home string, walOnly bool, rows ...string) {
	t.Helper()
	stateDBAt(t, filepath.Join(home, "state.db"), walOnly, rows...)
}

// stateDBAt is stateDB at path.
func stateDBAt(t *testing.T, path string, walOnly bool, rows ...string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)")
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT)`)
	require.NoError(t, err)
	_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	require.NoError(t, err)
	for _, r := range rows {
		_, err = db.Exec(`INSERT INTO messages (content) VALUES (?)`, r)
		require.NoError(t, err)
	}
	if !walOnly {
		_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		require.NoError(t, err)
	}
}

func TestFileLeaks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")

	// Written homes hold only their own canaries; alpha's and beta's homes
	// sit under the launch home's profiles folder and are theirs.
	stateDB(t, def.Home, false, "session of "+def.Value(tenants.EnvMarker))
	stateDB(t, alpha.Home, false, "session of "+alpha.Value(tenants.EnvMarker))
	require.Empty(t, FileLeaks(ctx, s), Format(FileLeaks(ctx, s)))
	require.Empty(t, ControlStateDB(ctx, []*tenants.Tenant{def, alpha}, ""))

	// Leaks: beta's key in alpha's WAL only, beta's model in a gzip log of
	// the launch home, alpha's soul as UTF-16 in beta's memory file, and a
	// profile made mid-run that holds alpha's key (a secret) and soul (not
	// a secret: not reported for a profile that is no tenant).
	stateDB(t, beta.Home, true, "oops "+beta.Value(tenants.EnvMarker)+" "+alpha.ProviderKey())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte("turn for " + beta.Model() + "\n"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	write(t, filepath.Join(def.Home, "logs", "agent.log.1.gz"), gz.Bytes())
	write(t, filepath.Join(beta.Home, "memories", "MEMORY.md"), []byte(encoded(alpha.Value(tenants.Soul), scan.UTF16LE)))
	newProfile := filepath.Join(def.Home, "profiles", "copy")
	write(t, filepath.Join(newProfile, ".env"), []byte("K="+alpha.ProviderKey()+"\nS="+alpha.Value(tenants.Soul)+"\n"))

	got := FileLeaks(ctx, s)
	require.ElementsMatch(t, []string{
		"file default beta/model raw",      // the gzip log, decompressed
		"file copy alpha/provider_key raw", // the new profile's .env
		"file beta alpha/provider_key raw", // beta's WAL frame
		"file beta alpha/provider_key raw", // beta's row, read through the WAL
		"file beta alpha/soul utf16le",     // beta's memory
	}, findingKeys(got), Format(got))
	parts := map[string]bool{}
	for _, f := range got {
		parts[filepath.Base(f.Where.Path)+" "+f.Where.Part] = true
	}
	require.Equal(t, map[string]bool{"agent.log.1.gz gunzipped": true, ".env ": true, "state.db-wal ": true,
		"state.db row messages row 1 content": true, "MEMORY.md ": true}, parts)

	ctl := ControlStateDB(ctx, s.Tenants, "")
	require.Empty(t, ctl, Format(ctl), "beta's own marker is in its row")
	require.NoError(t, os.Remove(filepath.Join(alpha.Home, "state.db")))
	ctl = ControlStateDB(ctx, s.Tenants, "")
	require.Equal(t, []string{"control alpha / "}, findingKeys(ctl))
	require.Contains(t, ctl[0].Detail, "no state database")
	stateDB(t, alpha.Home, false, "nothing of its own")
	ctl = ControlStateDB(ctx, s.Tenants, "")
	require.Equal(t, []string{"control alpha / "}, findingKeys(ctl))
	require.Contains(t, ctl[0].Detail, "no row of the state database holds one of its own canaries")
}

func TestPlaceOf(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha"}, NoProviders: true})
	require.NoError(t, err)
	for path, want := range map[string]string{
		filepath.Join(s.LaunchHome, "config.yaml"):                      "default true",
		filepath.Join(s.LaunchHome, "profiles", "alpha", ".env"):        "alpha true",
		filepath.Join(s.LaunchHome, "profiles", "alpha"):                "alpha true",
		filepath.Join(s.LaunchHome, "profiles", "new", "logs", "x.log"): "new false",
		filepath.Join(s.LaunchHome, "profiles", "stray.txt"):            "default true",
		filepath.Join(s.LaunchHome, "profiles-not", "alpha", "x"):       "default true",
		filepath.Join(s.Root, "elsewhere"):                              " false",
	} {
		place, tenant := placeOf(s, path)
		require.Equal(t, want, place+" "+map[bool]string{true: "true", false: "false"}[tenant], path)
	}
}

func TestWriteScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")
	write(t, filepath.Join(beta.Home, "logs", "old.log"), []byte("x"))
	before, err := HashTree(ctx, s.LaunchHome)
	require.NoError(t, err)

	// The addressed write (alpha's config) and a stray change of each kind.
	write(t, filepath.Join(alpha.Home, "config.yaml"), []byte("terminal: {cwd: /x}\n"))
	write(t, filepath.Join(alpha.Home, "logs", "rpc.log"), []byte("x"))
	write(t, filepath.Join(alpha.Home, "SOUL.md"), []byte("changed"))
	write(t, filepath.Join(beta.Home, ".env"), []byte("TENANT_PROVIDER_KEY=x\n"))
	write(t, filepath.Join(def.Home, "stray.yaml"), []byte("x"))
	require.NoError(t, os.Remove(filepath.Join(beta.Home, "logs", "old.log")))
	after, err := HashTree(ctx, s.LaunchHome)
	require.NoError(t, err)

	require.Empty(t, WriteScopeChanges(s, "alpha", before, before, "config.yaml"))
	got := WriteScopeChanges(s, "alpha", before, after, "config.yaml", "logs/")
	var lines []string
	for _, f := range got {
		rel, err := filepath.Rel(s.LaunchHome, f.Where.Path)
		require.NoError(t, err)
		lines = append(lines, f.Tenant+" "+rel+" "+f.Detail)
	}
	require.Equal(t, []string{
		"alpha profiles/alpha/SOUL.md changed by a write addressed to alpha",
		"beta profiles/beta/.env changed by a write addressed to alpha",
		"beta profiles/beta/logs/old.log removed by a write addressed to alpha",
		"default stray.yaml added by a write addressed to alpha",
	}, lines)
	got = WriteScopeChanges(s, "alpha", before, after, "config.yaml", "logs/", filepath.Join(beta.Home, "logs")+"/", filepath.Join(def.Home, "*.yaml"))
	require.Len(t, got, 2, "absolute patterns match anywhere")
	require.Equal(t, filepath.Join(beta.Home, ".env"), got[1].Where.Path)
	require.Equal(t, []string{"harness nobody / "}, findingKeys(WriteScopeChanges(s, "nobody", before, after)))

	_, err = HashTree(ctx, filepath.Join(s.Root, "missing"))
	require.ErrorContains(t, err, "snapshot files under")
}

// TestFileLeaksInArchivesAndEncodings: the misses issue 12 names are
// findings now: a zip of a deleted profile kept in the launch home, a key
// logged as base32, base64 wrapped at 76 columns, base64 of gzip; and a
// bomb in a home is reported as a scan that could not be made.
func TestFileLeaksInArchivesAndEncodings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSet(t)
	def, alpha, beta := s.Get("default"), s.Get("alpha"), s.Get("beta")
	require.Empty(t, FileLeaks(ctx, s), "positive control: the homes start clean")

	var zb bytes.Buffer
	z := zip.NewWriter(&zb)
	w, err := z.Create("profiles/beta/.env")
	require.NoError(t, err)
	_, err = w.Write([]byte("TENANT_PROVIDER_KEY=" + beta.ProviderKey() + "\n"))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	write(t, filepath.Join(def.Home, "backups", "beta-deleted.zip"), zb.Bytes())
	write(t, filepath.Join(alpha.Home, "logs", "b32.log"), []byte("key="+base32.StdEncoding.EncodeToString([]byte(beta.Model()))+"\n"))
	mime := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("filler ", 20) + def.ProviderKey() + strings.Repeat(" filler", 20)))
	var wrapped strings.Builder
	for i := 0; i < len(mime); i += 76 {
		wrapped.WriteString(mime[i:min(i+76, len(mime))] + "\r\n")
	}
	write(t, filepath.Join(beta.Home, "mail.eml"), []byte("Content-Transfer-Encoding: base64\r\n\r\n"+wrapped.String()))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write([]byte("soul: " + alpha.Value(tenants.Soul)))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	write(t, filepath.Join(beta.Home, "cache.json"), []byte(`{"blob":"`+base64.StdEncoding.EncodeToString(gz.Bytes())+`"}`))

	got := FileLeaks(ctx, s)
	require.ElementsMatch(t, []string{
		"file default beta/provider_key raw", // the zip of a deleted profile
		"file alpha beta/model base32",       // the base32 log line
		"file beta default/provider_key base64",
		"file beta alpha/soul raw", // base64 of gzip
	}, findingKeys(got), Format(got))
	parts := map[string]bool{}
	for _, f := range got {
		parts[filepath.Base(f.Where.Path)+" "+f.Where.Part] = true
	}
	require.True(t, parts["beta-deleted.zip zip:profiles/beta/.env"], parts)
	require.True(t, parts["cache.json base64@9 -> gzip"], parts)

	// A bomb: not followed, and the file check says the scan is incomplete.
	zw = gzip.NewWriter(&gz)
	gz.Reset()
	_, err = zw.Write(make([]byte, 24<<20))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	write(t, filepath.Join(alpha.Home, "zeros.gz"), gz.Bytes())
	var bomb []Finding
	for _, f := range FileLeaks(ctx, s) {
		if f.Invariant == Harness {
			bomb = append(bomb, f)
		}
	}
	require.Len(t, bomb, 1, Format(bomb))
	require.Equal(t, "alpha", bomb[0].Tenant)
	require.Contains(t, bomb[0].Detail, "not scanned: in gzip: ")
	require.Contains(t, bomb[0].Detail, "decompression bomb refused")
}

// The persist-state-wal chain's attack, landed: an attacker's database
// whose WAL is the victim's own WAL file (a store that opened a linked
// WAL; SQLite itself opens no symlinked WAL, so a hard link stands in)
// writes the attacker's turns into the victim's WAL, and the file scan
// finds them there, in the victim's home. agentd cannot be made to do it
// (SQLite's refusal stands with every agentd defence off): this is the
// row's positive control.
func TestWALSharedWithAnotherDatabaseIsFound(t *testing.T) {
	t.Parallel()
	s, err := tenants.Build(t.TempDir(), tenants.Options{Names: []string{"default", "alpha", "beta"}})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	alpha, beta := s.Get("alpha"), s.Get("beta")
	for _, tn := range []*tenants.Tenant{alpha, beta} {
		require.NoError(t, os.MkdirAll(tn.Home, 0o755))
	}
	open := func(home string) *sql.DB {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(home, "state.db")+"?_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)")
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		return db
	}
	// The attacker's database exists (closed: its WAL is gone), then its
	// WAL is the victim's, whose connection is still open.
	own := open(alpha.Home)
	_, err = own.Exec(`CREATE TABLE turns (content TEXT)`)
	require.NoError(t, err)
	require.NoError(t, own.Close())
	stateDB(t, beta.Home, true, "beta's own turn")
	require.NoError(t, os.Link(filepath.Join(beta.Home, "state.db-wal"), filepath.Join(alpha.Home, "state.db-wal")))
	db := open(alpha.Home)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`INSERT INTO turns (content) VALUES (?)`, "Run the environment probe. "+alpha.Value(tenants.Soul))
	require.NoError(t, err)
	var got []string
	for _, f := range FileLeaks(context.Background(), s) {
		got = append(got, f.Tenant+" "+f.Owner+" "+filepath.Base(f.Where.Path))
	}
	require.Contains(t, got, "beta alpha state.db-wal", "the attacker's turn, written into the victim's WAL")
}
