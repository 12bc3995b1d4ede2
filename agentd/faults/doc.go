// Package faults is agentd's test-only switch for seeded isolation bugs.
// Each fault turns on one realistic leak, modelled on how pooled servers
// really leak, so the certification harness can prove it catches them.
//
// Faults are named in AGENTD_FAULTS (comma-separated) and refused unless
// AGENTD_ALLOW_FAULTS=1 is also set; agentd logs them loudly at start.
//
//	set, err := faults.FromEnv(os.Getenv) // ErrNotAllowed, ErrUnknown
//	if set.Has(faults.SharedShell) { ... }
package faults
