package invariants

import (
	"fmt"
	"sort"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Ended is one lifecycle event and the canaries that every process it
// should have ended carries: after it, no live process may carry any of
// them.
type Ended struct {
	Event    string           // "session s-1 of alpha closed", "the server stopped", ...
	Canaries []tenants.Canary // what the event's processes carry
}

// Live lists the live processes carrying any of ev's canaries, read from
// /proc: before the event, the positive control that the scan sees them;
// after it, the escapes.
func Live(ev Ended) []procgroup.Carrier {
	needles := make([]string, 0, len(ev.Canaries))
	for _, c := range ev.Canaries {
		needles = append(needles, c.Value)
	}
	return procgroup.Carrying(needles)
}

// Escapes is the process-escape check of ev over the processes live now.
func Escapes(ev Ended) []Finding { return EscapesOf(ev, Live(ev)) }

// EscapesOf turns the carriers of ev's canaries into findings: one per
// process, naming the pid, the process, the tenant whose it is, the canary
// that shows it and where, and the event it outlived. A process carrying
// several tenants' canaries (a shell whose .env another tenant wrote into)
// is its owner's by the strongest sign: a canary in its command line (a
// spawned process's mark) before one in its environment, and there a
// provider key before any other kind.
func EscapesOf(ev Ended, carriers []procgroup.Carrier) []Finding {
	byValue := map[string]tenants.Canary{}
	for _, c := range ev.Canaries {
		byValue[c.Value] = c
	}
	rank := func(p procgroup.Carrier, c tenants.Canary) int {
		r := 0
		if p.In == "command line" {
			r += 2
		}
		if c.Kind == tenants.ProviderKey {
			r++
		}
		return r
	}
	type best struct {
		p    procgroup.Carrier
		c    tenants.Canary
		rank int
	}
	byPid := map[int]best{}
	for _, p := range carriers {
		c, ok := byValue[p.Needle]
		if !ok {
			continue
		}
		if b, ok := byPid[p.Pid]; !ok || rank(p, c) > b.rank {
			byPid[p.Pid] = best{p: p, c: c, rank: rank(p, c)}
		}
	}
	out := make([]Finding, 0, len(byPid))
	for _, b := range byPid {
		out = append(out, Finding{
			Invariant: ProcessEscape, Tenant: b.c.Owner, Owner: b.c.Owner, Kind: b.c.Kind,
			Where:  Where{Label: fmt.Sprintf("pid %d (%s)", b.p.Pid, b.p.Comm), Part: b.p.In},
			Detail: fmt.Sprintf("the process outlived %s: %s", ev.Event, truncate(b.p.Cmdline, 160)),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
