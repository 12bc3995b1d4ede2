// Package server is agentd's service: live sessions, turns and the
// JSON-RPC methods of the tenant-server protocol, registered on an
// rpc.Dispatcher that every transport (stdio, websocket) shares.
//
// Each request runs in the scope of the profile it addresses (see package
// scope); a session belongs to the connection that created or resumed it,
// and its events go to that connection only.
//
//	srv := server.New(server.Options{Homes: homes, BaseEnv: os.Environ(), Log: log})
//	defer srv.Shutdown(ctx)
//	d := rpc.NewDispatcher()
//	srv.Register(d)
//	conn := rpc.NewLineConn(os.Stdout)
//	srv.Ready(conn)
//	_ = rpc.ServeLines(ctx, d, os.Stdin, conn)
package server
