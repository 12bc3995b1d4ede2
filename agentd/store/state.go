package store

import "context"

// State is what a profile's runtime keeps of its sessions: the SQLite
// database of its home (DB, the default) or, in cluster mode, its rows in
// a shared PostgreSQL database (Postgres.ForProfile). Every operation acts
// on the one profile the State was opened for.
type State interface {
	CreateSession(ctx context.Context, s Session) (Session, error)
	Session(ctx context.Context, id string) (Session, error)
	Sessions(ctx context.Context) ([]Session, error)
	SetTitle(ctx context.Context, id, title string) error
	Append(ctx context.Context, sessionID string, m Message) error
	Messages(ctx context.Context, sessionID string) ([]Message, error)
	// Path names where the state lives, for messages.
	Path() string
	Close() error
}

var _ State = (*DB)(nil)
