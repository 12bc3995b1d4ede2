// Package fair shares a bounded number of slots fairly between groups (a
// server's profiles) and, inside a group, between members (its
// connections): when a slot frees, the groups with waiters take turns
// (round-robin), and inside the chosen group its members take turns, so a
// tenant that opens fifty connections still holds one group's share.
// Waiting is bounded: a member, a group and the whole scheduler each have
// a queue bound past which Enqueue refuses at once (ErrQueueFull).
//
//	s := fair.New(fair.Limits{Slots: 16, PerGroup: 4, PerMember: 2, MemberQueue: 64, GroupQueue: 256, Queue: 1024})
//	t, err := s.Enqueue("alpha", connID) // refused now, or queued
//	if err != nil { return tooBusy(err) }
//	if err := t.Wait(ctx); err != nil { return err } // a slot, or ctx ended
//	defer t.Release()
//
// A nil *Scheduler grants every ticket at once (no limits).
package fair
