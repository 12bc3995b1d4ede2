// Package attack is what a hostile tenant tries, as data: every probe a
// tenant's model (through the terminal tool) or a tenant's plugin (through
// its own code) makes to reach the other tenants of a pooled server, each
// a Row that says what it tries and what a server that isolates its tenants
// does instead. A new attack is a new row; a report names the row that
// broke.
//
// Nothing here judges a result: what an attack brings back travels to the
// attacker's own provider as a tool result, where the request invariant
// sees any foreign canary; what it writes carries the attacker's own
// canary, so a write that lands shows it in a foreign home; what it starts
// carries the attacker's mark, so a process that outlives its session, host
// or server is seen by the process-escape invariant.
//
// A hostile tenant also chains its powers (Chains): it plants something in
// its own space (a home file replaced by a symlink, a setting pointed at
// another tenant's places, an operator-only key in its own config, a job
// id that is a path), then a trigger (a turn, a session, a cron run, a
// restart, the operator's delete and re-create, a neighbour's turn) makes
// the server act on it outside every sandbox. Each Chain names the seeded
// fault of agentd that re-opens it and the invariant that catches it.
//
//	for _, row := range attack.Terminal() {
//		call := row.Call(attack.Canaries{Write: w.Value, Mark: m.Value})
//		conn.Turn(ctx, sid, attack.Prompt(call)) // the tenant's provider runs Responder
//	}
package attack
