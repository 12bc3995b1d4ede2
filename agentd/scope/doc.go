// Package scope holds everything agentd keeps for one profile while it
// serves it: its home, its state database, its log, its HTTP client, and
// the way its configuration, environment and provider key are read. A
// Scope is a value handed to what runs for that profile; nothing of it
// lives in process-global state, so one profile's scope can never be
// reached through another's.
//
//	pool := scope.NewPool(homes, os.Environ(), nil)
//	defer pool.Close()
//	sc, err := pool.Get(ctx, "work")     // profile.ErrUnknownProfile if absent
//	snap, err := sc.Load()               // config.yaml (under the managed scope) and .env, now
//	client := sc.Client(snap)            // the profile's own base URL, key and retries
package scope
