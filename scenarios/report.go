package scenarios

import (
	"github.com/tenantcanary/tenantcanary/harness/surface"
	"time"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// Result is a scenario's verdict.
type Result string

const (
	Pass    Result = "pass"    // every invariant held and every positive control passed
	Leak    Result = "leak"    // at least one leak finding
	Failed  Result = "failed"  // the harness or target failed: not ready, crashed, a control or liveness check failed
	Skipped Result = "skipped" // not run (with a reason)
)

// Counts are what a phase (or a scenario, summed) produced.
type Counts struct {
	Requests  int   `json:"requests"`  // provider requests recorded, all tenants
	Snapshots int   `json:"snapshots"` // env snapshots received, all tenants
	Frames    int   `json:"frames"`    // RPC frames received and scanned
	Files     int   `json:"files"`     // files scanned
	Bytes     int64 `json:"bytes"`     // bytes scanned in files
	// StoreKeys and StoreRows are the shared stores' Redis keys and
	// PostgreSQL rows scanned (stores:).
	StoreKeys int64 `json:"store_keys,omitempty"`
	StoreRows int64 `json:"store_rows,omitempty"`
	Findings  int   `json:"findings"` // findings of every kind
}

// Control is one positive control and whether it held.
type Control struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"` // e.g. "own key on own provider"
	Passed bool   `json:"passed"`
	Detail string `json:"detail,omitempty"`
}

// SkippedCheck is a check the harness could not make on this target, with
// the reason: never reported as passed.
type SkippedCheck struct {
	Invariant string `json:"invariant"`
	Reason    string `json:"reason"`
}

// PhaseReport is one phase's outcome.
type PhaseReport struct {
	Name     string               `json:"name"`
	Duration time.Duration        `json:"duration_ns"`
	Counts   Counts               `json:"counts"`
	Controls []Control            `json:"controls"`
	Findings []invariants.Finding `json:"findings"`
	Error    string               `json:"error,omitempty"` // the harness or target failure that ended the phase
}

// TenantInfo names one tenant of a scenario's run and its random tag.
type TenantInfo struct {
	Name   string `json:"name"`
	Tag    string `json:"tag"`
	Launch bool   `json:"launch"`
}

// Report is one scenario's outcome.
type Report struct {
	ID      string       `json:"id"`
	Purpose string       `json:"purpose"`
	Focus   []Invariant  `json:"focus"`
	Tenants int          `json:"tenants"`
	Seed    uint64       `json:"seed"`             // the run's seed: --seed replays its orders
	Roster  []TenantInfo `json:"roster,omitempty"` // the tenants and their tags (a profile made mid-run included)
	Result  Result       `json:"result"`
	Reason  string       `json:"reason,omitempty"` // for skipped or failed
	// NotRun says why the scenario did not run (or stopped as it began):
	// a backend of the target it needs could not start. Every other
	// scenario runs; the verdict line counts these.
	NotRun   string         `json:"not_run,omitempty"`
	Duration time.Duration  `json:"duration_ns"`
	Phases   []PhaseReport  `json:"phases"`
	Skipped  []SkippedCheck `json:"skipped_checks,omitempty"`
	Log      []string       `json:"log,omitempty"` // the scenario's log when it did not pass
	// Attacks are the hostile rows whose result carried a foreign canary:
	// which tenant ran which row, and whose canaries came back.
	Attacks []AttackHit `json:"attacks,omitempty"`
	// Availability is each neighbour's turn times while another tenant
	// floods or hogs (noisy-neighbour, hostile-plugin).
	Availability []AvailabilityRow `json:"availability,omitempty"`
	// Chains are the multi-step attacks (hostile-chains), row by row: who
	// ran each against whom, how it ended, and the invariants of the
	// findings its evidence holds.
	Chains []ChainRow `json:"chains,omitempty"`
	// Surface is what the surface scenario learned of the target: per
	// action, the paths of each home the server touched and the processes
	// it ran, and the attacks aimed at each.
	Surface *surface.Map `json:"surface,omitempty"`
	// Cancellations are the cancellations scenario's rounds: how many
	// turns it cancelled, how, and how many of those met a store command
	// in flight.
	Cancellations []CancelRound `json:"cancellations,omitempty"`
}

// ChainRow is one multi-step attack as it ran. Found lists the invariants
// of the findings whose evidence lies in what the row produced: the
// provider requests, frames and files of the time it ran that the row
// caused itself (the write canary minted for it, or another tenant's
// canary new to the attacker's places).
type ChainRow struct {
	Row      string                 `json:"row"`
	Attacker string                 `json:"attacker,omitempty"`
	Victim   string                 `json:"victim,omitempty"`
	Outcome  string                 `json:"outcome"`
	Found    []invariants.Invariant `json:"found,omitempty"`    // sorted
	Findings int                    `json:"findings"`           // findings attributed to the row
	Evidence []string               `json:"evidence,omitempty"` // the first few of them
	Duration time.Duration          `json:"duration_ns"`
	// Stopped: the attacker's own shell could not make the plant (its
	// sandbox kept it from it), so the server was never attacked; the row
	// runs again with the next attacker, as another ChainRow of the same
	// Row.
	Stopped bool `json:"stopped,omitempty"`
}

// AvailabilityRow is one tenant's p99 alone and under another's load.
type AvailabilityRow struct {
	Tenant   string        `json:"tenant"`
	Flooder  string        `json:"flooder"`
	Baseline time.Duration `json:"baseline_p99_ns"`
	Loaded   time.Duration `json:"loaded_p99_ns"`
	Ratio    float64       `json:"ratio"`
	Failed   int           `json:"failed"`
	// Machine is how much slower the machine control ran under the load
	// (invariants.RoundP99.Machine: 1 without a control, 0 for too few
	// probes); Inconclusive, that the check could not be judged.
	Machine      float64 `json:"machine_ratio,omitempty"`
	Inconclusive bool    `json:"inconclusive,omitempty"`
	// Rounds is how many rounds the check was judged on, and Unjudged
	// how many of them the control slowed too much to judge (each such
	// round can cost the scenario another).
	Rounds   int `json:"rounds,omitempty"`
	Unjudged int `json:"unjudged_rounds,omitempty"`
}

// AttackHit is one attack row that reached another tenant.
type AttackHit struct {
	Tenant  string   `json:"tenant"`  // the attacker
	Row     string   `json:"row"`     // the attack row's ID
	Reached []string `json:"reached"` // "<owner>'s <kind>", sorted
}

// Totals sums the phases' counts.
func (r *Report) Totals() Counts {
	var c Counts
	for _, p := range r.Phases {
		c.Requests = max(c.Requests, p.Counts.Requests) // cumulative per phase: take the last
		c.Snapshots = max(c.Snapshots, p.Counts.Snapshots)
		c.Frames = max(c.Frames, p.Counts.Frames)
		c.Files += p.Counts.Files
		c.Bytes += p.Counts.Bytes
		c.StoreKeys += p.Counts.StoreKeys
		c.StoreRows += p.Counts.StoreRows
		c.Findings += p.Counts.Findings
	}
	return c
}

// Findings lists every phase's findings in order.
func (r *Report) Findings() []invariants.Finding {
	var out []invariants.Finding
	for _, p := range r.Phases {
		out = append(out, p.Findings...)
	}
	return out
}

// FindingLine is how a finding of a scenario's phase reads on the console,
// in a report's log and in a test's failure: "scenario/phase: invariant:
// tenant where: carries owner's kind (encoding)".
func FindingLine(scenario, phase string, f invariants.Finding) string {
	return scenario + "/" + phase + ": " + f.String()
}
