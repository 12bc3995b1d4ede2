package certificate

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Shard names one slice of a sharded run (canary-run --shard K/N): the
// scenarios at positions K-1, K-1+N, ... of the catalog's selection Run.
type Shard struct {
	K   int    `json:"k"`
	N   int    `json:"n"`
	Run string `json:"run,omitempty"` // the --run selection every shard shares ("" = all)
}

// ErrShards: certificates that are not the complete set of shards of one
// run, from one build and one target.
var ErrShards = errors.New("not the shards of one run")

// severity orders verdicts, worst last.
func severity(v Verdict) int {
	switch v {
	case Certified:
		return 0
	case Failed:
		return 1
	}
	return 2 // Leaks
}

// Merge joins the certificates of the N shards of one run into the
// certificate of the whole run. It refuses (ErrShards) a set that misses a
// shard, repeats one, mixes runs (N or selection), targets or harness
// builds. The scenarios come back in catalog order; the verdict is the
// worst shard's (a leak anywhere is a leak, a failure anywhere fails the
// whole); the detection power is the one the shard that measured it
// reported (shard 1, unless told otherwise); the duration is the longest
// shard's (they run side by side); the date the latest.
func Merge(certs []*Certificate) (*Certificate, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("merge: no certificates: %w", ErrShards)
	}
	first := certs[0]
	if first.Shard == nil {
		return nil, fmt.Errorf("merge: certificate 1 is not a shard (run with --shard K/N): %w", ErrShards)
	}
	n := first.Shard.N
	byK := make([]*Certificate, n+1)
	for i, c := range certs {
		switch {
		case c.Shard == nil:
			return nil, fmt.Errorf("merge: certificate %d is not a shard (run with --shard K/N): %w", i+1, ErrShards)
		case c.Shard.N != n || c.Shard.Run != first.Shard.Run:
			return nil, fmt.Errorf("merge: certificate %d is shard %d/%d of --run %q, certificate 1 of %d shards of --run %q: %w",
				i+1, c.Shard.K, c.Shard.N, c.Shard.Run, n, first.Shard.Run, ErrShards)
		case c.Shard.K < 1 || c.Shard.K > n:
			return nil, fmt.Errorf("merge: certificate %d is shard %d/%d: %w", i+1, c.Shard.K, n, ErrShards)
		case byK[c.Shard.K] != nil:
			return nil, fmt.Errorf("merge: shard %d/%d given twice: %w", c.Shard.K, n, ErrShards)
		case !reflect.DeepEqual(c.Target, first.Target):
			return nil, fmt.Errorf("merge: shard %d/%d certified %s %s, shard %d/%d %s %s: %w",
				c.Shard.K, n, c.Target.Name, c.Target.Version, first.Shard.K, n, first.Target.Name, first.Target.Version, ErrShards)
		case c.Tool.Version != first.Tool.Version || c.Tool.Commit != first.Tool.Commit:
			return nil, fmt.Errorf("merge: shard %d/%d ran harness %s, shard %d/%d %s: %w",
				c.Shard.K, n, c.Tool, first.Shard.K, n, first.Tool, ErrShards)
		}
		byK[c.Shard.K] = c
	}
	var missing []string
	for k := 1; k <= n; k++ {
		if byK[k] == nil {
			missing = append(missing, fmt.Sprintf("%d/%d", k, n))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge: shard %s missing: %w", strings.Join(missing, ", "), ErrShards)
	}

	out := &Certificate{Tool: first.Tool, Target: first.Target, Verdict: Certified}
	// Shard K holds catalog positions K-1, K-1+N, ...: interleave them back.
	total := 0
	for k := 1; k <= n; k++ {
		total += len(byK[k].Scenarios)
	}
	for p := 0; len(out.Scenarios) < total; p++ {
		if c, i := byK[p%n+1], p/n; i < len(c.Scenarios) {
			out.Scenarios = append(out.Scenarios, c.Scenarios[i])
		}
	}
	var errs []string
	for k := 1; k <= n; k++ {
		c := byK[k]
		if severity(c.Verdict) > severity(out.Verdict) {
			out.Verdict = c.Verdict
		}
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("shard %d/%d: %s", k, n, c.Error))
		}
		out.Accepted = append(out.Accepted, c.Accepted...)
		if out.DetectionPower == nil && c.DetectionPower != nil {
			out.DetectionPower = c.DetectionPower
		}
		out.Duration = max(out.Duration, c.Duration)
		if c.Date.After(out.Date) {
			out.Date = c.Date
		}
	}
	out.Error = strings.Join(errs, "\n")
	// The scenarios together can only make the verdict worse (a run where
	// every shard skipped everything certifies nothing).
	if v := VerdictOf(out.Scenarios); severity(v) > severity(out.Verdict) {
		out.Verdict = v
	}
	out.Tenants = TenantsOf(out.Scenarios)
	if len(out.Tenants) == 0 {
		out.Tenants = slices.Clone(first.Tenants)
	}
	if out.Date.IsZero() {
		out.Date = time.Now().UTC().Truncate(time.Second)
	}
	return out, nil
}
