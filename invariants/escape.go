package invariants

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// ProcessEscape: a process that carries a tenant's canary (in its
// environment or command line) outlived the lifecycle event that should have
// ended it: its session's close, its profile's deletion, its plugin host's
// death, or the server's stop.
const ProcessEscape Invariant = "process_escape"

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
// process and owner, naming the pid, the process, the canary that shows
// whose it is, where it was found and the event it outlived.
func EscapesOf(ev Ended, carriers []procgroup.Carrier) []Finding {
	byValue := map[string]tenants.Canary{}
	for _, c := range ev.Canaries {
		byValue[c.Value] = c
	}
	at := map[string]int{} // pid/owner -> index in out
	var out []Finding
	for _, p := range carriers {
		c, ok := byValue[p.Needle]
		if !ok {
			continue
		}
		f := Finding{
			Invariant: ProcessEscape, Tenant: c.Owner, Owner: c.Owner, Kind: c.Kind,
			Where:  Where{Label: fmt.Sprintf("pid %d (%s)", p.Pid, p.Comm), Part: p.In},
			Detail: fmt.Sprintf("the process outlived %s: %s", ev.Event, truncate(p.Cmdline, 160)),
		}
		// One finding per process and owner; its command line, which names
		// what it runs, before its environment.
		key := strconv.Itoa(p.Pid) + "/" + c.Owner
		if i, ok := at[key]; ok {
			if out[i].Where.Part != "command line" && p.In == "command line" {
				out[i] = f
			}
			continue
		}
		at[key] = len(out)
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
