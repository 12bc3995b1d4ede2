// Package store keeps one profile's sessions and messages in its state.db:
// SQLite (modernc.org/sqlite, no cgo) in WAL mode, schema migrations
// versioned in a table of their own. Every message is committed as it is
// appended, so a crash loses at most the message in flight.
//
//	db, err := store.Open(ctx, filepath.Join(home, "state.db"))
//	defer db.Close()
//	s, err := db.CreateSession(ctx, store.Session{Profile: "work", Model: "m"})
//	err = db.Append(ctx, s.ID, store.Message{Role: "user", Content: "hi"})
//	msgs, err := db.Messages(ctx, s.ID)
package store
