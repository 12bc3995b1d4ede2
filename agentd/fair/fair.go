package fair

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Limits bound a Scheduler. A zero field means no bound.
type Limits struct {
	Slots     int // slots held at once in all
	PerGroup  int // slots one group holds at once
	PerMember int // slots one member holds at once

	MemberQueue int // tickets one member may have waiting
	GroupQueue  int // tickets one group may have waiting
	Queue       int // tickets waiting in all
}

var (
	// ErrQueueFull: a queue bound was reached; the caller should retry later.
	ErrQueueFull = errors.New("queue full")
	// ErrClosed: the scheduler was closed (the server stops).
	ErrClosed = errors.New("scheduler closed")
)

// QueueFullError says which bound refused a ticket. It matches ErrQueueFull.
type QueueFullError struct {
	Bound string // "member", "group" or "all"
	Name  string // the member or group name ("" for all)
	Limit int
}

func (e *QueueFullError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("queue full: %d waiting in all", e.Limit)
	}
	return fmt.Sprintf("queue full: %d waiting for %s %q", e.Limit, e.Bound, e.Name)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// Scheduler hands out slots. It starts no goroutine.
type Scheduler struct {
	lim Limits

	mu      sync.Mutex
	closed  bool
	running int
	waiting int
	groups  map[string]*group
	order   []*group // groups in round-robin order
	next    int      // index in order of the group served next
}

type group struct {
	name             string
	running, waiting int
	members          map[string]*member
	order            []*member
	next             int
}

type member struct {
	name    string
	running int
	queue   []*Ticket
}

type state int

const (
	waiting state = iota
	granted
	done // released, or abandoned while waiting
)

// Ticket is one unit of work's claim on a slot.
type Ticket struct {
	s     *Scheduler
	g     *group
	m     *member
	ready chan struct{} // closed when granted or the scheduler closes
	state state
}

// New returns a Scheduler with the given limits.
func New(lim Limits) *Scheduler {
	return &Scheduler{lim: lim, groups: map[string]*group{}}
}

// Limits returns the scheduler's limits.
func (s *Scheduler) Limits() Limits {
	if s == nil {
		return Limits{}
	}
	return s.lim
}

// Enqueue queues a ticket for a member of a group, granting it at once
// when a slot is free for it. It refuses (a *QueueFullError) when a queue
// bound is reached, and ErrClosed after Close. It never blocks.
func (s *Scheduler) Enqueue(groupName, memberName string) (*Ticket, error) {
	if s == nil {
		t := &Ticket{ready: make(chan struct{}), state: granted}
		close(t.ready)
		return t, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	g := s.groups[groupName]
	var m *member
	if g != nil {
		m = g.members[memberName]
	}
	switch {
	case s.lim.MemberQueue > 0 && m != nil && len(m.queue) >= s.lim.MemberQueue:
		return nil, &QueueFullError{Bound: "member", Name: memberName, Limit: s.lim.MemberQueue}
	case s.lim.GroupQueue > 0 && g != nil && g.waiting >= s.lim.GroupQueue:
		return nil, &QueueFullError{Bound: "group", Name: groupName, Limit: s.lim.GroupQueue}
	case s.lim.Queue > 0 && s.waiting >= s.lim.Queue:
		return nil, &QueueFullError{Bound: "all", Limit: s.lim.Queue}
	}
	if g == nil {
		g = &group{name: groupName, members: map[string]*member{}}
		s.groups[groupName] = g
		s.order = append(s.order, g)
	}
	if m == nil {
		m = &member{name: memberName}
		g.members[memberName] = m
		g.order = append(g.order, m)
	}
	t := &Ticket{s: s, g: g, m: m, ready: make(chan struct{})}
	m.queue = append(m.queue, t)
	g.waiting++
	s.waiting++
	s.dispatch()
	return t, nil
}

// Wait blocks until the ticket holds a slot (nil), ctx ends (ctx's error;
// the ticket is withdrawn) or the scheduler closes (ErrClosed).
func (t *Ticket) Wait(ctx context.Context) error {
	if t.s == nil {
		return nil
	}
	select {
	case <-t.ready:
	case <-ctx.Done():
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t.state {
	case granted:
		return nil
	case done:
		return ErrClosed
	}
	// Still waiting: ctx ended first.
	t.withdraw()
	s.dispatch()
	return ctx.Err()
}

// Release gives the slot back (or withdraws a ticket still waiting). It is
// safe to call more than once.
func (t *Ticket) Release() {
	if t == nil || t.s == nil {
		return
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t.state {
	case granted:
		t.state = done
		t.m.running--
		t.g.running--
		s.running--
		s.tidy(t.g, t.m)
	case waiting:
		t.withdraw()
	}
	s.dispatch()
}

// withdraw takes a waiting ticket out of its queue. s.mu is held.
func (t *Ticket) withdraw() {
	q := t.m.queue
	for i, x := range q {
		if x == t {
			t.m.queue = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	t.state = done
	t.g.waiting--
	t.s.waiting--
	t.s.tidy(t.g, t.m)
}

// Close refuses new tickets and wakes every waiting one with ErrClosed.
// Tickets holding a slot keep it until released.
func (s *Scheduler) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, g := range s.order {
		for _, m := range g.order {
			for _, t := range m.queue {
				t.state = done
				g.waiting--
				s.waiting--
				close(t.ready)
			}
			m.queue = nil
		}
	}
	for _, g := range append([]*group(nil), s.order...) {
		for _, m := range append([]*member(nil), g.order...) {
			s.tidy(g, m)
		}
	}
}

// dispatch grants slots while one is free and someone may take it: the
// groups take turns from s.next, and the members of a group from g.next.
// s.mu is held.
func (s *Scheduler) dispatch() {
	for s.lim.Slots <= 0 || s.running < s.lim.Slots {
		if !s.grantOne() {
			return
		}
	}
}

func (s *Scheduler) grantOne() bool {
	n := len(s.order)
	for i := 0; i < n; i++ {
		gi := (s.next + i) % n
		g := s.order[gi]
		if g.waiting == 0 || (s.lim.PerGroup > 0 && g.running >= s.lim.PerGroup) {
			continue
		}
		mn := len(g.order)
		for j := 0; j < mn; j++ {
			mi := (g.next + j) % mn
			m := g.order[mi]
			if len(m.queue) == 0 || (s.lim.PerMember > 0 && m.running >= s.lim.PerMember) {
				continue
			}
			t := m.queue[0]
			m.queue = m.queue[1:]
			t.state = granted
			m.running++
			g.running++
			g.waiting--
			s.running++
			s.waiting--
			g.next = mi + 1 // taken modulo the list's length when used
			s.next = gi + 1
			close(t.ready)
			return true
		}
	}
	return false
}

// tidy forgets a member, and then its group, once it holds and awaits
// nothing, keeping the round-robin cursors on the same next entry.
// s.mu is held.
func (s *Scheduler) tidy(g *group, m *member) {
	if m.running == 0 && len(m.queue) == 0 && g.members[m.name] == m {
		delete(g.members, m.name)
		g.order, g.next = remove(g.order, m, g.next)
	}
	if g.running == 0 && g.waiting == 0 && s.groups[g.name] == g {
		delete(s.groups, g.name)
		s.order, s.next = remove(s.order, g, s.next)
	}
}

func remove[T comparable](list []T, x T, next int) ([]T, int) {
	for i, y := range list {
		if y != x {
			continue
		}
		list = append(list[:i:i], list[i+1:]...)
		if i < next {
			next--
		}
		return list, next
	}
	return list, next
}

// Stats is a snapshot of a scheduler's load.
type Stats struct {
	Running, Waiting int
	Groups           map[string]GroupStats
}

// GroupStats is one group's load.
type GroupStats struct {
	Running, Waiting, Members int
}

// Stats returns the current load.
func (s *Scheduler) Stats() Stats {
	if s == nil {
		return Stats{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Running: s.running, Waiting: s.waiting, Groups: map[string]GroupStats{}}
	for name, g := range s.groups {
		st.Groups[name] = GroupStats{Running: g.running, Waiting: g.waiting, Members: len(g.members)}
	}
	return st
}
