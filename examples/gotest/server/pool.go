package server

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// pool is what one server process shares between its connections: the
// profiles on disk, the live sessions and the provider keys.
type pool struct {
	launch string // the launch profile's home
	keys   *keys
	cron   sync.Mutex // one writer of a jobs.json at a time
	// life orders writes against profiles being deleted and made again:
	// profiles.create and profiles.delete hold it whole; a call that
	// resolves a profile and writes in it (a setting, a turn) holds it
	// shared from one to the other, so its write never lands in the next
	// profile of the same name.
	life sync.RWMutex

	mu       sync.Mutex
	sessions map[string]*session
}

// session is a live session: its profile, the connection that owns it and
// the conversation so far.
type session struct {
	id     string // live id, random
	stored string // id in the profile's state.db
	prof   profile
	owner  *conn

	mu      sync.Mutex
	busy    bool
	history []message
}

func newPool() (*pool, error) {
	home, err := launchHome()
	if err != nil {
		return nil, err
	}
	p := &pool{launch: home, sessions: map[string]*session{}}
	p.keys = newKeys(p)
	return p, nil
}

// newID is a random id: a session id must not be guessable.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + hex.EncodeToString(b[:])
}

func (p *pool) addSession(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sessions[s.id] = s
}

// session returns c's live session id: 4044 when there is none, 4030 when
// it is another connection's.
func (p *pool) session(c *conn, id string) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[id]
	switch {
	case s == nil:
		return nil, errorf(codeUnknownSession, "unknown session %q", id)
	case s.owner != c:
		return nil, errorf(codeNotYours, "session %q is not this connection's", id)
	}
	return s, nil
}

// live reports whether s is still open.
func (p *pool) live(s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[s.id] == s
}

func (p *pool) closeSession(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sessions, id)
}

func (p *pool) dropSessionsOf(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, s := range p.sessions {
		if s.owner == c {
			delete(p.sessions, id)
		}
	}
}

func (p *pool) dropSessionsIn(prof profile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, s := range p.sessions {
		if s.prof.home == prof.home {
			delete(p.sessions, id)
		}
	}
}
