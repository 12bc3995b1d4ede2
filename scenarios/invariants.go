package scenarios

import "github.com/tenantcanary/tenantcanary/invariants"

// Invariant is invariants.Invariant: one name per invariant, registered
// once in invariants.All.
type Invariant = invariants.Invariant

// The scenarios' names of the registered invariants, kept for
// compatibility: each is the invariants package's constant.
const (
	// Deprecated: use invariants.Request.
	Requests = invariants.Request
	// Deprecated: use invariants.Snapshot.
	EnvSnapshots = invariants.Snapshot
	// Deprecated: use invariants.File.
	Files = invariants.File
	// Deprecated: use invariants.Text.
	Text = invariants.Text
	// Deprecated: use invariants.WriteScope.
	WriteScope = invariants.WriteScope
	// Deprecated: use invariants.LaunchBleed.
	LaunchBleed = invariants.LaunchBleed
	// PositiveControl was "positive_control", a second name for the
	// positive controls' invariant; findings and skipped checks now
	// name it "control" alike.
	//
	// Deprecated: use invariants.Control.
	PositiveControl = invariants.Control
	// Deprecated: use invariants.ProcessEscape.
	ProcessEscape = invariants.ProcessEscape
	// Deprecated: use invariants.Availability.
	Availability = invariants.Availability
	// Deprecated: use invariants.Authz.
	Authz = invariants.Authz
	// Deprecated: use invariants.OperatorSecret.
	OperatorSecret = invariants.OperatorSecret
	// Deprecated: use invariants.SharedPlace.
	SharedPlace = invariants.SharedPlace
	// Deprecated: use invariants.Routing.
	Routing = invariants.Routing
	// Deprecated: use invariants.SharedStore.
	SharedStore = invariants.SharedStore
)

// AllInvariants are the invariants a scenario may focus on: every row of
// invariants.All but harness, in its order.
// It is derived from that table; add an invariant there, never here.
//
// Deprecated: use invariants.All.
var AllInvariants = focusable()

func focusable() []Invariant {
	var out []Invariant
	for _, r := range invariants.All {
		if isFocusable(r.Name) {
			out = append(out, r.Name)
		}
	}
	return out
}

// isFocusable reports whether a spec may name inv in its Focus.
func isFocusable(inv Invariant) bool {
	_, ok := invariants.Lookup(inv)
	return ok && inv != invariants.Harness
}
