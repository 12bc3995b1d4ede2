package server

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the state.db driver
)

// A profile's sessions live in its state.db (SQLite, WAL): a row per
// session and a row per message, so a session resumes after a restart.
const schema = `
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, created TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE IF NOT EXISTS messages (session TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL);`

// openStore opens the profile's state.db, refusing one that is a symlink
// (it could point into another profile's home). Its transactions take the
// write lock when they begin (_txlock=immediate), so two turns of one
// profile storing at once wait for each other instead of failing busy.
func (pr profile) openStore() (*sql.DB, error) {
	path := filepath.Join(pr.home, "state.db")
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("state.db of profile %q is a symlink", pr.name)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open state.db of profile %q: %w", pr.name, err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open state.db of profile %q: %w", pr.name, err)
	}
	return db, nil
}

func (pr profile) storeSession(id string) error {
	db, err := pr.openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO sessions (id) VALUES (?)`, id); err != nil {
		return fmt.Errorf("store session of profile %q: %w", pr.name, err)
	}
	return nil
}

// appendMessages stores msgs after the session's stored messages.
func (pr profile) appendMessages(id string, msgs []message) error {
	db, err := pr.openStore()
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		return fmt.Errorf("store messages of profile %q: %w", pr.name, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM messages WHERE session = ?`, id).Scan(&n); err != nil {
		return fmt.Errorf("store messages of profile %q: %w", pr.name, err)
	}
	for i, m := range msgs {
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO messages (session, seq, body) VALUES (?, ?, ?)`, id, n+i, string(body)); err != nil {
			return fmt.Errorf("store messages of profile %q: %w", pr.name, err)
		}
	}
	return tx.Commit()
}

// errNoStoredSession: the profile's state.db has no session of that id.
var errNoStoredSession = errors.New("no stored session")

// loadSession reads a stored session's messages.
func (pr profile) loadSession(id string) ([]message, error) {
	db, err := pr.openStore()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var one int
	if err := db.QueryRow(`SELECT 1 FROM sessions WHERE id = ?`, id).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return nil, errNoStoredSession
	} else if err != nil {
		return nil, fmt.Errorf("load session of profile %q: %w", pr.name, err)
	}
	rows, err := db.Query(`SELECT body FROM messages WHERE session = ? ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("load session of profile %q: %w", pr.name, err)
	}
	defer rows.Close()
	var msgs []message
	for rows.Next() {
		var body string
		var m message
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return nil, fmt.Errorf("load session of profile %q: message: %w", pr.name, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
}
