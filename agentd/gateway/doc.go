// Package gateway is agentd's OpenAI-compatible HTTP gateway: POST
// /v1/chat/completions drives a turn in the launch profile and
// /p/<name>/v1/chat/completions one in profile <name>, each behind that
// profile's own API_SERVER_KEY (from its .env, compared in constant time).
// A missing or foreign key gets 401 and drives nothing. Answers are plain
// chat completions or, with "stream": true, SSE chunks ending in [DONE].
// GET /health is public.
//
// One gateway serves a profile at a time: the gateway holds a lock file in
// each home it serves, and a second one is refused with the holder's pid.
//
//	g, err := gateway.New(gateway.Options{Homes: homes, Server: srv})
//	if err != nil { ... }                    // ErrAlreadyServed: another gateway holds a profile
//	defer g.Close()
//	http.Serve(ln, g)
package gateway
