// Package harness drives a target server the way a tenant's client would:
// it runs the target's processes (own process group, hermetic environment,
// logs kept, every pid reaped), speaks the tenant-server protocol over
// stdio and websocket (calls matched by id, events waited on with a
// predicate and a deadline, every frame kept for the RPC-frame scan) and
// over the HTTP gateway. It never imports the target: everything crosses
// the wire.
//
//	p, err := harness.StartProc(ctx, harness.ProcSpec{Name: "agentd tui", Argv: argv, Env: env, Stdin: true, LogPath: log})
//	conn, err := harness.DialStdio(ctx, p)
//	s, err := conn.CreateSession(ctx, "alpha")
//	_, err = conn.Turn(ctx, s.SessionID, "run the probe")
package harness
