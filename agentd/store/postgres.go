package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgMigrations are cluster mode's schema, applied in order under an
// advisory lock (replicas start together). Every table carries the
// profile (the tenant) in its key, and every query filters by it.
var pgMigrations = []string{
	// 1: sessions, messages, cron jobs' runs and cron leases.
	`CREATE TABLE agentd_sessions (
		profile TEXT NOT NULL,
		id TEXT NOT NULL,
		model TEXT NOT NULL,
		title TEXT NOT NULL DEFAULT '',
		source TEXT NOT NULL DEFAULT 'tui',
		created_at TIMESTAMPTZ NOT NULL,
		updated_at TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (profile, id)
	);
	CREATE TABLE agentd_messages (
		seq BIGSERIAL PRIMARY KEY,
		profile TEXT NOT NULL,
		session_id TEXT NOT NULL,
		role TEXT NOT NULL,
		content TEXT NOT NULL DEFAULT '',
		tool_calls TEXT NOT NULL DEFAULT '',
		tool_call_id TEXT NOT NULL DEFAULT '',
		name TEXT NOT NULL DEFAULT '',
		created_at TIMESTAMPTZ NOT NULL,
		FOREIGN KEY (profile, session_id) REFERENCES agentd_sessions(profile, id) ON DELETE CASCADE
	);
	CREATE INDEX agentd_messages_session ON agentd_messages(profile, session_id, seq);
	CREATE TABLE agentd_cron_jobs (
		profile TEXT NOT NULL,
		id TEXT NOT NULL,
		name TEXT NOT NULL DEFAULT '',
		schedule TEXT NOT NULL DEFAULT '',
		last_run TIMESTAMPTZ,
		last_status TEXT NOT NULL DEFAULT '',
		last_replica TEXT NOT NULL DEFAULT '',
		runs BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (profile, id)
	);
	CREATE TABLE agentd_cron_leases (
		profile TEXT NOT NULL,
		job_id TEXT NOT NULL,
		owner TEXT NOT NULL,
		expires_at TIMESTAMPTZ NOT NULL,
		PRIMARY KEY (profile, job_id)
	);`,
}

// migrationLock is the advisory lock key under which replicas migrate.
const migrationLock = 0x6167656e7464 // "agentd"

// Postgres is cluster mode's shared state: one PostgreSQL database for
// every profile of every replica. ForProfile gives one profile's State.
type Postgres struct {
	pool *pgxpool.Pool
	url  string
}

// OpenPostgres connects to url and brings the schema up to date.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	return OpenPostgresIn(ctx, url, "")
}

// OpenPostgresIn is OpenPostgres with agentd's tables in the schema
// agentd_<namespace> (made when missing), apart from another cluster's
// on the same database; namespace "" is the connection's own search
// path (schema public). A namespace is 1-32 of [a-z0-9_].
func OpenPostgresIn(ctx context.Context, url, namespace string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse url: %w", err)
	}
	if namespace != "" {
		if !schemaRE.MatchString(namespace) {
			return nil, fmt.Errorf("postgres: namespace %q: want 1-32 of [a-z0-9_]", namespace)
		}
		schema := "agentd_" + namespace
		if err := createSchema(ctx, cfg, schema); err != nil {
			return nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect to %s: %w", redactURL(cfg), err)
	}
	p := &Postgres{pool: pool, url: redactURL(cfg)}
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

var schemaRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// createSchema makes schema when it is missing.
func createSchema(ctx context.Context, cfg *pgxpool.Config, schema string) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("postgres: connect to %s: %w", redactURL(cfg), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("postgres: create schema %s in %s: %w", schema, redactURL(cfg), err)
	}
	return nil
}

func redactURL(cfg *pgxpool.Config) string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
}

// Close closes the pool.
func (p *Postgres) Close() { p.pool.Close() }

// String names the database (no password).
func (p *Postgres) String() string { return p.url }

func (p *Postgres) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return fmt.Errorf("migrate %s: lock: %w", p.url, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS agentd_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("migrate %s: %w", p.url, err)
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM agentd_schema").Scan(&have); err != nil {
			return fmt.Errorf("migrate %s: %w", p.url, err)
		}
		if have > len(pgMigrations) {
			return fmt.Errorf("migrate %s: schema version %d is newer than this agentd knows (%d)", p.url, have, len(pgMigrations))
		}
		for v := have + 1; v <= len(pgMigrations); v++ {
			if _, err := tx.Exec(ctx, pgMigrations[v-1]); err != nil {
				return fmt.Errorf("migrate %s to version %d: %w", p.url, v, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO agentd_schema(version) VALUES ($1)", v); err != nil {
				return fmt.Errorf("migrate %s to version %d: %w", p.url, v, err)
			}
		}
		return nil
	})
}

// ForProfile is the State of one profile: its rows only.
func (p *Postgres) ForProfile(profile string) *ProfileState {
	return &ProfileState{pg: p, profile: profile}
}

// PurgeProfile deletes every row of a profile (a deleted profile's
// sessions must not come back to a profile made anew under its name).
func (p *Postgres) PurgeProfile(ctx context.Context, profile string) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			"DELETE FROM agentd_messages WHERE profile = $1",
			"DELETE FROM agentd_sessions WHERE profile = $1",
			"DELETE FROM agentd_cron_jobs WHERE profile = $1",
			"DELETE FROM agentd_cron_leases WHERE profile = $1",
		} {
			if _, err := tx.Exec(ctx, q, profile); err != nil {
				return fmt.Errorf("purge profile %q from %s: %w", profile, p.url, err)
			}
		}
		return nil
	})
}

// SessionProfile is the profile a stored session id belongs to, whoever
// asks. Only the resume-wrong-profile fault uses it: a lookup by id alone
// is the bug.
func (p *Postgres) SessionProfile(ctx context.Context, id string) (string, error) {
	var profile string
	err := p.pool.QueryRow(ctx, "SELECT profile FROM agentd_sessions WHERE id = $1 LIMIT 1", id).Scan(&profile)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w %q in %s", ErrUnknownSession, id, p.url)
	}
	if err != nil {
		return "", fmt.Errorf("read session %q from %s: %w", id, p.url, err)
	}
	return profile, nil
}

// ErrLeaseHeld: another replica holds a cron job's lease.
var ErrLeaseHeld = errors.New("cron lease held by another replica")

// AcquireLease takes profile's lease on cron job for owner until ttl from
// now: granted when no lease exists, it expired, or owner holds it
// already. Otherwise ErrLeaseHeld (wrapped, naming the holder).
func (p *Postgres) AcquireLease(ctx context.Context, profile, job, owner string, ttl time.Duration) error {
	var holder string
	err := p.pool.QueryRow(ctx, `
		INSERT INTO agentd_cron_leases(profile, job_id, owner, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 millisecond')
		ON CONFLICT (profile, job_id) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
			WHERE agentd_cron_leases.expires_at < now() OR agentd_cron_leases.owner = EXCLUDED.owner
		RETURNING owner`, profile, job, owner, max(ttl.Milliseconds(), 1)).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		var cur string
		_ = p.pool.QueryRow(ctx, "SELECT owner FROM agentd_cron_leases WHERE profile = $1 AND job_id = $2", profile, job).Scan(&cur)
		return fmt.Errorf("%w: job %q of profile %q is leased by %q", ErrLeaseHeld, job, profile, cur)
	}
	if err != nil {
		return fmt.Errorf("acquire cron lease of job %q of profile %q: %w", job, profile, err)
	}
	return nil
}

// ReleaseLease gives up owner's lease on a cron job (no error when owner
// does not hold it).
func (p *Postgres) ReleaseLease(ctx context.Context, profile, job, owner string) error {
	_, err := p.pool.Exec(ctx, "DELETE FROM agentd_cron_leases WHERE profile = $1 AND job_id = $2 AND owner = $3", profile, job, owner)
	if err != nil {
		return fmt.Errorf("release cron lease of job %q of profile %q: %w", job, profile, err)
	}
	return nil
}

// JobRun is one cron job's record in cluster mode: who ran it last, when,
// how it went, and how many times it ran.
type JobRun struct {
	Profile, ID, Name, Schedule string
	LastRun                     time.Time
	LastStatus, LastReplica     string
	Runs                        int64
}

// RecordJobRun records that replica ran a profile's cron job.
func (p *Postgres) RecordJobRun(ctx context.Context, r JobRun) error {
	_, err := p.pool.Exec(ctx, `
		INSERT INTO agentd_cron_jobs(profile, id, name, schedule, last_run, last_status, last_replica, runs)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 1)
		ON CONFLICT (profile, id) DO UPDATE SET name = EXCLUDED.name, schedule = EXCLUDED.schedule,
			last_run = EXCLUDED.last_run, last_status = EXCLUDED.last_status, last_replica = EXCLUDED.last_replica,
			runs = agentd_cron_jobs.runs + 1`,
		r.Profile, r.ID, r.Name, r.Schedule, r.LastRun.UTC(), r.LastStatus, r.LastReplica)
	if err != nil {
		return fmt.Errorf("record run of cron job %q of profile %q: %w", r.ID, r.Profile, err)
	}
	return nil
}

// JobRuns lists a profile's cron job records.
func (p *Postgres) JobRuns(ctx context.Context, profile string) ([]JobRun, error) {
	rows, err := p.pool.Query(ctx, `SELECT profile, id, name, schedule, COALESCE(last_run, 'epoch'), last_status, last_replica, runs
		FROM agentd_cron_jobs WHERE profile = $1 ORDER BY id`, profile)
	if err != nil {
		return nil, fmt.Errorf("list cron jobs of profile %q: %w", profile, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobRun, error) {
		var j JobRun
		err := r.Scan(&j.Profile, &j.ID, &j.Name, &j.Schedule, &j.LastRun, &j.LastStatus, &j.LastReplica, &j.Runs)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("list cron jobs of profile %q: %w", profile, err)
	}
	return out, nil
}

// ProfileState is one profile's sessions and messages in PostgreSQL.
// Every statement filters by its profile.
type ProfileState struct {
	pg      *Postgres
	profile string
}

var _ State = (*ProfileState)(nil)

// Path names the database and the profile.
func (s *ProfileState) Path() string { return s.pg.url + "#profile=" + s.profile }

// Close does nothing: the pool is the cluster's.
func (s *ProfileState) Close() error { return nil }

// CreateSession stores a new session of the profile; an empty ID gets a
// fresh one. s.Profile is the State's profile, whatever the caller set.
func (s *ProfileState) CreateSession(ctx context.Context, sess Session) (Session, error) {
	if sess.ID == "" {
		sess.ID = NewID()
	}
	if sess.Source == "" {
		sess.Source = "tui"
	}
	sess.Profile = s.profile
	ts := time.Now().UTC()
	_, err := s.pg.pool.Exec(ctx,
		"INSERT INTO agentd_sessions(profile, id, model, title, source, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
		s.profile, sess.ID, sess.Model, sess.Title, sess.Source, ts)
	if err != nil {
		return Session{}, fmt.Errorf("create session in %s: %w", s.Path(), err)
	}
	sess.CreatedAt, sess.UpdatedAt = ts, ts
	return sess, nil
}

// Session returns the profile's stored session id.
func (s *ProfileState) Session(ctx context.Context, id string) (Session, error) {
	var out Session
	err := s.pg.pool.QueryRow(ctx,
		"SELECT id, profile, model, title, source, created_at, updated_at FROM agentd_sessions WHERE profile = $1 AND id = $2",
		s.profile, id).Scan(&out.ID, &out.Profile, &out.Model, &out.Title, &out.Source, &out.CreatedAt, &out.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("%w %q in %s", ErrUnknownSession, id, s.Path())
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session %q from %s: %w", id, s.Path(), err)
	}
	return out, nil
}

// Sessions lists the profile's stored sessions, newest first.
func (s *ProfileState) Sessions(ctx context.Context) ([]Session, error) {
	rows, err := s.pg.pool.Query(ctx,
		"SELECT id, profile, model, title, source, created_at, updated_at FROM agentd_sessions WHERE profile = $1 ORDER BY created_at DESC, id",
		s.profile)
	if err != nil {
		return nil, fmt.Errorf("list sessions in %s: %w", s.Path(), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Session, error) {
		var x Session
		err := r.Scan(&x.ID, &x.Profile, &x.Model, &x.Title, &x.Source, &x.CreatedAt, &x.UpdatedAt)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions in %s: %w", s.Path(), err)
	}
	return out, nil
}

// SetTitle sets a session's title.
func (s *ProfileState) SetTitle(ctx context.Context, id, title string) error {
	tag, err := s.pg.pool.Exec(ctx, "UPDATE agentd_sessions SET title = $3, updated_at = now() WHERE profile = $1 AND id = $2", s.profile, id, title)
	if err != nil {
		return fmt.Errorf("set title of session %q in %s: %w", id, s.Path(), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set title: %w %q in %s", ErrUnknownSession, id, s.Path())
	}
	return nil
}

// Append commits one message to a session of the profile.
func (s *ProfileState) Append(ctx context.Context, sessionID string, m Message) error {
	err := pgx.BeginFunc(ctx, s.pg.pool, func(tx pgx.Tx) error {
		ts := time.Now().UTC()
		tag, err := tx.Exec(ctx, "UPDATE agentd_sessions SET updated_at = $3 WHERE profile = $1 AND id = $2", s.profile, sessionID, ts)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w %q", ErrUnknownSession, sessionID)
		}
		_, err = tx.Exec(ctx,
			"INSERT INTO agentd_messages(profile, session_id, role, content, tool_calls, tool_call_id, name, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
			s.profile, sessionID, m.Role, m.Content, m.ToolCalls, m.ToolCallID, m.Name, ts)
		return err
	})
	if err != nil {
		return fmt.Errorf("append message to session %q in %s: %w", sessionID, s.Path(), err)
	}
	return nil
}

// Messages returns a session's messages in the order they were appended.
func (s *ProfileState) Messages(ctx context.Context, sessionID string) ([]Message, error) {
	rows, err := s.pg.pool.Query(ctx,
		"SELECT role, content, tool_calls, tool_call_id, name, created_at FROM agentd_messages WHERE profile = $1 AND session_id = $2 ORDER BY seq",
		s.profile, sessionID)
	if err != nil {
		return nil, fmt.Errorf("read messages of session %q from %s: %w", sessionID, s.Path(), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.Role, &m.Content, &m.ToolCalls, &m.ToolCallID, &m.Name, &m.CreatedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read messages of session %q from %s: %w", sessionID, s.Path(), err)
	}
	return out, nil
}
