package invariants

import (
	"fmt"
	"sort"
	"time"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// Availability: one tenant's load (a flood of connections and requests)
// took another tenant's service away: its turns failed, or their p99 grew
// past the allowed multiple of its own baseline from the same run.
const Availability Invariant = "availability"

// MaxSlowdown is how many times its own baseline p99 a tenant's p99 may
// grow while another tenant floods the server.
const MaxSlowdown = 3.0

// MinSlack is the least a tenant's p99 may grow by under a flood,
// whatever its baseline: a turn of a few milliseconds tripled is still
// within the noise of a shared machine (a fair agentd under the
// noisy-neighbour flood measured 30-170 ms from 15-40 ms baselines, up to
// 12x), while an agentd with no limits measured 1.3-2.2 s.
const MinSlack = 500 * time.Millisecond

// Latencies are one tenant's turn times in one run: alone (Baseline) and
// while another tenant floods the server (Loaded), and the turns under the
// flood that did not complete, with the first error.
type Latencies struct {
	Tenant   string
	Flooder  string
	Baseline []time.Duration
	Loaded   []time.Duration
	Failed   int
	FirstErr string
}

// P99 is the 99th percentile of ds (nearest rank), or 0 for none.
func P99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := (99*len(s) + 99) / 100 // ceil(0.99 n)
	return s[max(rank, 1)-1]
}

// Limit is the p99 a tenant with baseline p99 b may reach under a flood:
// MaxSlowdown times b, and never less than b plus MinSlack.
func Limit(b time.Duration) time.Duration {
	return max(time.Duration(float64(b)*MaxSlowdown), b+MinSlack)
}

// AvailabilityOf checks l: every turn under the flood completed, and their
// p99 stayed within Limit of the baseline p99. A tenant with no baseline is
// a harness finding: there is nothing to compare with.
func AvailabilityOf(l Latencies) []Finding {
	where := Where{Label: "turns of " + l.Tenant + " while " + l.Flooder + " floods"}
	const flood = tenants.Kind("flood") // the finding reads "carries <flooder>'s flood"
	var out []Finding
	if len(l.Baseline) == 0 {
		return []Finding{{Invariant: Harness, Tenant: l.Tenant, Where: where, Detail: "no baseline turn to compare with"}}
	}
	if l.Failed > 0 {
		out = append(out, Finding{Invariant: Availability, Tenant: l.Tenant, Owner: l.Flooder, Kind: flood, Where: where,
			Detail: fmt.Sprintf("%d of %d turn(s) did not complete: %s", l.Failed, l.Failed+len(l.Loaded), truncate(l.FirstErr, 300))})
	}
	base, loaded := P99(l.Baseline), P99(l.Loaded)
	if limit := Limit(base); len(l.Loaded) > 0 && loaded > limit {
		out = append(out, Finding{Invariant: Availability, Tenant: l.Tenant, Owner: l.Flooder, Kind: flood, Where: where,
			Detail: fmt.Sprintf("p99 %v under the flood is %.1fx its baseline p99 %v (limit %v: %.0fx, at least +%v)",
				loaded.Round(time.Millisecond), float64(loaded)/float64(base), base.Round(time.Millisecond),
				limit.Round(time.Millisecond), MaxSlowdown, MinSlack)})
	}
	return out
}
