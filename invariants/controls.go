package invariants

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// StateDB is the name of a home's state database.
const StateDB = "state.db"

// ControlKeys is a positive control: every tenant's provider saw at least
// one request carrying that tenant's own key, so the request check had
// something to judge.
func ControlKeys(ts []*tenants.Tenant) []Finding {
	var out []Finding
	for _, t := range ts {
		if !t.HasProvider() {
			continue
		}
		recs := t.Requests()
		ok := false
		for _, r := range recs {
			ok = ok || r.Auth == t.ProviderKey()
		}
		if !ok {
			out = append(out, Finding{Invariant: Control, Tenant: t.Name,
				Detail: fmt.Sprintf("its provider saw no request with its own key (%d request(s) in all)", len(recs))})
		}
	}
	return out
}

// ControlSnapshots is a positive control: each env snapshot a tenant's
// provider received shows the tenant's own env marker, so a snapshot that
// shows no foreign canary really is an environment dump.
func ControlSnapshots(ts []*tenants.Tenant) []Finding {
	var out []Finding
	for _, t := range ts {
		if !t.HasProvider() {
			continue
		}
		for _, s := range EnvSnapshots(t, t.Requests()) {
			if !strings.Contains(s.Text, t.Value(tenants.EnvMarker)) {
				out = append(out, Finding{Invariant: Control, Tenant: t.Name,
					Where:  Where{Request: intp(s.Request), Origin: s.Origin, ToolCall: s.ToolCall},
					Detail: "the env snapshot does not show its own env marker"})
			}
		}
	}
	return out
}

// ControlStateDB is a positive control: each tenant's state database (name
// under its home, StateDB by default) holds, read row by row from a copy,
// at least one of the tenant's own canaries: its own session text is
// there, so a file scan that finds nothing foreign has read real data.
// ControlStateDBIn finds each tenant's database where its layout says.
func ControlStateDB(ctx context.Context, ts []*tenants.Tenant, name string) []Finding {
	if name == "" {
		name = StateDB
	}
	m, err := compile(ts)
	if err != nil {
		return harnessFinding("", err)
	}
	return controlStateDB(ctx, m, ts, func(t *tenants.Tenant) string { return filepath.Join(t.Home, name) })
}

// ControlStateDBIn is ControlStateDB with each tenant's database where
// layout puts it (tenants.Tenant.StateDB): its state folder when the
// target keeps one apart from the home, the layout's state_db or
// home_files.state. A layout that names no state database is a Harness
// finding: the caller should not have asked.
func ControlStateDBIn(ctx context.Context, ts []*tenants.Tenant, layout tenants.Layout) []Finding {
	if layout.StateDBName() == "" {
		return stateDBUnnamed()
	}
	m, err := compile(ts)
	if err != nil {
		return harnessFinding("", err)
	}
	return controlStateDB(ctx, m, ts, func(t *tenants.Tenant) string { return t.StateDB(layout) })
}

// ControlStateDBIn is the package's ControlStateDBIn through c. A tenant
// whose own canary c's FileLeaks already saw in a row of its database
// holds: the scan that found nothing foreign read its rows (so use a
// Checker for one pass of checks, as its canaries already say). Any other
// is read again, with c's matcher (every tenant c was made for: a hit of
// another owner does not count) and its file cache. ts are among c's
// tenants.
func (c *Checker) ControlStateDBIn(ctx context.Context, ts []*tenants.Tenant, layout tenants.Layout) []Finding {
	if layout.StateDBName() == "" {
		return stateDBUnnamed()
	}
	var rest []*tenants.Tenant
	for _, t := range ts {
		if !c.rowOf(t.StateDB(layout), t.Name) {
			rest = append(rest, t)
		}
	}
	return controlStateDB(ctx, c.m, rest, func(t *tenants.Tenant) string { return t.StateDB(layout) })
}

// stateDBUnnamed is the state database control's answer to a layout that
// names no database: the caller's error, said so.
func stateDBUnnamed() []Finding {
	return harnessFinding("", errors.New("state database control: the layout names no state database (layout.state_db, layout.home_files.state)"))
}

// controlStateDB looks, with m, for one of each tenant's own canaries in
// a row of its state database.
func controlStateDB(ctx context.Context, m matcher, ts []*tenants.Tenant, pathOf func(*tenants.Tenant) string) []Finding {
	var out []Finding
	for _, t := range ts {
		path := pathOf(t)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			out = append(out, Finding{Invariant: Control, Tenant: t.Name, Where: Where{Path: path}, Detail: "there is no state database"})
			continue
		}
		r := m.m.File(ctx, path)
		own := false
		for _, h := range r.Hits {
			own = own || (h.Container == "sqlite-row" && h.Pattern.Owner == t.Name)
		}
		if !own {
			detail := "no row of the state database holds one of its own canaries"
			if len(r.Skipped) > 0 {
				detail += fmt.Sprintf(" (%d part(s) could not be read: %s)", len(r.Skipped), r.Skipped[0].Reason)
			}
			out = append(out, Finding{Invariant: Control, Tenant: t.Name, Where: Where{Path: path}, Detail: detail})
		}
	}
	return out
}

// Controls runs every positive control.
func Controls(ctx context.Context, ts []*tenants.Tenant) []Finding {
	out := ControlKeys(ts)
	out = append(out, ControlSnapshots(ts)...)
	out = append(out, ControlStateDB(ctx, ts, StateDB)...)
	return out
}
