// Package server is agentd's service: live sessions, turns and the
// JSON-RPC methods of the tenant-server protocol, registered on an
// rpc.Dispatcher that every transport (stdio, websocket) shares.
//
// Each request runs in the scope of the profile it addresses (see package
// scope); a session belongs to the connection that created or resumed it,
// and its events go to that connection only. A connection a tenant
// credential opened (wsserve, `/api/ws?token=<API_SERVER_KEY>`) has that
// credential re-checked at every call and at every step of its turns; the
// first check that finds it lapsed (rotated, removed, profile deleted)
// ends the connection's sessions and refuses its every later call with
// 4030 (see checkCredential).
//
//	srv := server.New(server.Options{Homes: homes, BaseEnv: os.Environ(), Log: log})
//	defer srv.Shutdown(ctx)
//	d := rpc.NewDispatcher()
//	srv.Register(d)
//	conn := rpc.NewLineConn(os.Stdout)
//	srv.Ready(conn)
//	_ = rpc.ServeLines(ctx, d, os.Stdin, conn)
package server
