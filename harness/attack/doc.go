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
//	for _, row := range attack.Terminal() {
//		call := row.Call(attack.Canaries{Write: w.Value, Mark: m.Value})
//		conn.Turn(ctx, sid, attack.Prompt(call)) // the tenant's provider runs Responder
//	}
package attack
