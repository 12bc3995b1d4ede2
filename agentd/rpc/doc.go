// Package rpc is agentd's JSON-RPC 2.0 dispatcher, independent of
// transport: the stdio backend (one JSON object per line) and the websocket
// backend (one per message) hand it frames and a Conn to answer on.
//
// Requests are served concurrently; a Conn serialises what is written to
// it. Errors use the codes of the tenant-server protocol: -32700 (bad JSON,
// id null), -32600, -32601, -32602, -32603, and the application codes
// below (4064 unknown profile, ...).
//
//	d := rpc.NewDispatcher()
//	d.Handle("ping", func(ctx context.Context, c *rpc.Call) (any, error) {
//		var p struct{ Echo string `json:"echo"` }
//		if err := c.Bind(&p); err != nil {
//			return nil, err // -32602 naming what was wrong
//		}
//		return map[string]string{"echo": p.Echo}, nil
//	})
//	err := rpc.ServeLines(ctx, d, os.Stdin, rpc.NewLineConn(os.Stdout))
package rpc
