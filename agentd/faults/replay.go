package faults

// Faults of the caches keyed by the request (issue 46: colliding inputs).
const (
	// RequestReplayCache: the server keeps the replies it gave, keyed by
	// the request's method, JSON-RPC id and params, and answers a request
	// that matches one from the cache, as an idempotency (replay) cache
	// would, with no connection or tenant in the key: two tenants that
	// send the same request with the same id get one reply, the first's.
	RequestReplayCache Name = "request-replay-cache"
)

// replayFaults lists the faults of this file.
func replayFaults() []Name { return []Name{RequestReplayCache} }
