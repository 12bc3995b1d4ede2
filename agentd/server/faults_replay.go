package server

import (
	"context"
	"sync"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
)

// replayCache is the request-replay-cache fault's one cache of replies
// (test-only; see package faults): keyed by method, id and params, never
// by the connection or its tenant.
type replayCache struct {
	mu      sync.Mutex
	replies map[string]any
}

// replayKey is what the fault keys a reply by: the request alone.
func replayKey(c *rpc.Call) string {
	return c.Method + "\x00" + string(c.ID) + "\x00" + string(c.Params)
}

// replayed wraps h with the request-replay-cache fault when it is on: a
// request whose method, id and params match one answered before gets that
// answer, whoever sends it. Only successes are kept; a cached Then answers
// without its follow-up (the first request's turn ran already).
func (s *Server) replayed(h rpc.Handler) rpc.Handler {
	if !s.opts.Faults.Has(faults.RequestReplayCache) {
		return h
	}
	return func(ctx context.Context, c *rpc.Call) (any, error) {
		if c.ID == nil {
			return h(ctx, c) // a notification has no reply to keep
		}
		key := replayKey(c)
		s.replay.mu.Lock()
		res, ok := s.replay.replies[key]
		s.replay.mu.Unlock()
		if ok {
			return res, nil
		}
		res, err := h(ctx, c)
		if err != nil {
			return res, err
		}
		kept := res
		if t, isThen := res.(rpc.Then); isThen {
			kept = t.Result
		}
		s.replay.mu.Lock()
		if s.replay.replies == nil {
			s.replay.replies = map[string]any{}
		}
		if _, had := s.replay.replies[key]; !had {
			s.replay.replies[key] = kept
		}
		s.replay.mu.Unlock()
		return res, nil
	}
}
