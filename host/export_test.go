package host

// BreakWriteSide closes the manager's end of its live host's stdin without
// marking the connection broken: the state between a host dying and the
// server noticing, which a caller can reach by picking the host as live a
// moment before its death is seen.
func BreakWriteSide(m *Manager) {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h != nil && h.conn.closeW != nil {
		_ = h.conn.closeW()
	}
}
