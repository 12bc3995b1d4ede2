// Package wsserve is agentd's websocket transport: the protocol's JSON-RPC
// frames, one per text message, at /api/ws?token=T, served by the same
// rpc.Dispatcher as the stdio backend. /api/health is public.
//
// A missing or wrong token gets 401 before any upgrade (compared in
// constant time). Every connection has a bounded send queue drained by one
// writer goroutine; a connection that cannot keep up is closed with a
// reason rather than blocking another tenant's events.
//
//	h := wsserve.New(wsserve.Options{Token: tok, Dispatcher: d, OnOpen: srv.Ready, OnClose: srv.DropConn})
//	httpSrv := &http.Server{Handler: h}
//	go httpSrv.Serve(ln)
//	...
//	h.Close() // closes every connection after flushing what is queued
package wsserve
