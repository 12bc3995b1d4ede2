package server

import (
	"context"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/terminal"
)

// launchModel is the launch profile's model (the model-bleed fault).
func (s *Server) launchModel() string {
	sc, err := s.pool.Get(context.Background(), "")
	if err != nil {
		return ""
	}
	snap, err := sc.Load()
	if err != nil {
		return ""
	}
	return snap.Config.Model.Default
}

// seedSessionFaults wires the seeded faults that act on a live session
// (test-only; see package faults).
func (s *Server) seedSessionFaults(sess *Session) {
	if s.opts.Faults.Has(faults.BroadcastEvents) {
		sess.broadcast = func(frame []byte) {
			s.mu.Lock()
			conns := make([]rpc.Conn, 0, len(s.conns))
			for _, c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
			for _, c := range conns {
				_ = c.Send(frame)
			}
		}
	}
	if s.opts.Faults.Has(faults.SharedShell) {
		sess.sharedShell = func(opts terminal.Options) *terminal.Shell {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.shared == nil {
				s.shared = terminal.New(opts)
			}
			return s.shared
		}
	}
	if s.opts.Faults.Has(faults.GlobalCwd) {
		sess.processCwd = true
	}
}
