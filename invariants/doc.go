// Package invariants holds every leak scan and bleed check of a canary
// run, each a function from what the run left behind (provider records,
// homes on disk, logs, RPC frames) to a list of Findings: which invariant,
// whose place, whose canary of which kind, where, in which encoding, with
// an excerpt. All of them use one scanner (package scan) built from every
// canary of every tenant in every encoding.
//
// Every invariant a finding can name is a row of All (its name, what it
// holds, whether it is a leak, its item of DESIGN.md's list), and Lookup
// finds it; docs/invariants.md is that table, rendered.
//
// The checks: RequestLeaks (1), SnapshotLeaks and SnapshotShortfall (2),
// FileLeaks (3), TextLeaks and FrameLeaks (4), HashTree with
// WriteScopeChanges (5), LaunchBleedOf (6) and the positive controls
// ControlKeys, ControlSnapshots and ControlStateDB (7). Against hostile
// tenants: Escapes (process_escape: nothing carrying a tenant's canary
// outlives the session, profile, host or server that started it, read from
// /proc) and AvailabilityOf (availability: one tenant's flood leaves the
// others' turns complete and within MaxSlowdown of their baseline p99). Assert turns a
// non-empty list into a test failure listing every finding, one a line.
//
//	fs := invariants.RequestLeaks(set.Tenants)
//	fs = append(fs, invariants.SnapshotLeaks(set.Tenants)...)
//	fs = append(fs, invariants.FileLeaks(ctx, set)...)
//	fs = append(fs, invariants.Controls(ctx, set.Tenants)...)
//	invariants.Assert(t, fs)
package invariants
