package scenarios

import (
	"strings"
)

// What the file checks say of a gateway target: it keeps no tenant homes,
// so the file invariant does not apply and its store (with the data
// folder) is what the shared-store check reads; with files: true the
// sandbox around it is scanned as shared places, the declared store
// excluded.

// filesSkipReason is why the file invariant (tenant homes) was not
// checked.
func (e *Env) filesSkipReason() string {
	if !e.Box.Target.IsGateway() {
		return "the target's files are not reachable from the harness"
	}
	if g := e.Box.Target.LLMGateway; g != nil && g.Store != nil {
		return "a gateway keeps no tenant homes: its store and data folder are read by the shared_store check"
	}
	return "a gateway keeps no tenant homes, and this one declares no store (llm_gateway.store) to read"
}

// sharedPlacesSkipReason is why the shared places were not scanned.
func (e *Env) sharedPlacesSkipReason() string {
	if e.Box.Target.IsGateway() && !e.Box.Target.Remote() && e.Box.Target.GatewayURL == "" {
		return "files: false: the sandbox around the gateway is not scanned (files: true scans it, the declared store excluded)"
	}
	return "the target's files are not reachable from the harness"
}

// gatewayStoreFiles are the declared store's database files: not a
// shared place (the shared-store check reads them row by row, each
// tenant's secrets allowed in its own rows).
func (e *Env) gatewayStoreFiles() []string {
	g := e.Box.Target.LLMGateway
	if !e.Box.Target.IsGateway() || g == nil || g.Store == nil || g.Store.SQLite == "" {
		return nil
	}
	db := strings.ReplaceAll(g.Store.SQLite, "{root}", e.Box.Root)
	return []string{db, db + "-wal", db + "-shm", db + "-journal"}
}
