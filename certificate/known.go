package certificate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// KnownFinding is one finding a target's owner accepted: a row of the
// target's known-findings file (the target file's known_findings).
//
//   - invariant: authz
//     place: 'route "own logs" GET /api/log/self'
//     reason: the log API lists every user's rows; fixed in v0.7 (issue 123)
//     expires: 2027-03-31
//
// An accepted finding stays in the certificate, marked accepted with its
// reason, and is never counted as passed; the verdict is certified (exit
// 0) only when every finding of the run is accepted and unexpired. Once
// its expiry date has passed, a known finding accepts nothing: the finding
// counts again.
type KnownFinding struct {
	// Invariant is the finding's invariant (authz, request, text, ...).
	Invariant invariants.Invariant `yaml:"invariant" json:"invariant"`
	// Place is a regexp matched against the finding's one-line text
	// (Finding.String: invariant, tenant, where, whose canary, detail);
	// write it without tenant tags, which change every run.
	Place string `yaml:"place" json:"place"`
	// Reason says why the finding is accepted (a ticket, a plan).
	Reason string `yaml:"reason" json:"reason"`
	// Expires is the last day (YYYY-MM-DD, UTC) the acceptance holds.
	Expires string `yaml:"expires" json:"expires"`

	placeRE *regexp.Regexp
	until   time.Time // the first instant it no longer holds
}

// ErrKnownFindings wraps every reason a known-findings file is refused.
var ErrKnownFindings = errors.New("bad known-findings file")

// LoadKnownFindings reads a known-findings file: a YAML list of
// KnownFinding, every field given, place a regexp, expires a date.
func LoadKnownFindings(path string) ([]KnownFinding, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("known findings: %w", err)
	}
	var ks []KnownFinding
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&ks); err != nil {
		return nil, fmt.Errorf("known findings %s: %w: %w", path, ErrKnownFindings, err)
	}
	var errs []error
	for i := range ks {
		if err := ks[i].compile(); err != nil {
			errs = append(errs, fmt.Errorf("entry %d: %w", i+1, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("known findings %s: %w: %w", path, ErrKnownFindings, err)
	}
	return ks, nil
}

func (k *KnownFinding) compile() error {
	var errs []error
	if k.Invariant == "" {
		errs = append(errs, errors.New("no invariant"))
	}
	if k.Reason == "" {
		errs = append(errs, errors.New("no reason: say why it is accepted"))
	}
	re, err := regexp.Compile(k.Place)
	switch {
	case k.Place == "":
		errs = append(errs, errors.New("no place (a regexp of the finding's text)"))
	case err != nil:
		errs = append(errs, fmt.Errorf("place: %w", err))
	}
	k.placeRE = re
	day, err := time.Parse(time.DateOnly, k.Expires)
	if err != nil {
		errs = append(errs, fmt.Errorf("expires %q: want YYYY-MM-DD", k.Expires))
	}
	k.until = day.AddDate(0, 0, 1)
	return errors.Join(errs...)
}

// Expired reports whether k no longer holds at now.
func (k *KnownFinding) Expired(now time.Time) bool { return !now.Before(k.until) }

// Matches reports whether k names f (whether or not it has expired).
func (k *KnownFinding) Matches(f invariants.Finding) bool {
	if k.placeRE == nil && k.compile() != nil {
		return false
	}
	return f.Invariant == k.Invariant && k.placeRE.MatchString(f.String())
}

// Accepted is the result of a scenario whose every finding a known
// finding accepted: not a pass (the certificate lists each one), and no
// leak the verdict counts.
const Accepted scenarios.Result = "accepted"

// AcceptedFinding is one finding of the run a known finding matched: moved
// out of its phase's findings when the acceptance holds, kept there (and
// listed here, Expired) when it has expired.
type AcceptedFinding struct {
	Scenario string             `json:"scenario"`
	Phase    string             `json:"phase"`
	Finding  invariants.Finding `json:"finding"`
	Reason   string             `json:"reason"`
	Expires  string             `json:"expires"`
	Expired  bool               `json:"expired,omitempty"`
}

// Accept applies the known findings at now: every finding one of them
// matches and that has not expired moves to c.Accepted; a scenario left
// with no finding, no phase error, no failed control and no other failure
// in its log becomes Accepted. A match that expired is listed too, marked
// expired, and its finding stays. The verdict is then recomputed: exit 0
// only if every finding was accepted.
func (c *Certificate) Accept(known []KnownFinding, now time.Time) {
	if len(known) == 0 {
		return
	}
	for i := range c.Scenarios {
		r := &c.Scenarios[i]
		lines := map[string]bool{} // log lines of the findings accepted
		moved := false
		for pi := range r.Phases {
			p := &r.Phases[pi]
			var keep []invariants.Finding
			for _, f := range p.Findings {
				k := match(known, f, now)
				if k == nil {
					keep = append(keep, f)
					continue
				}
				a := AcceptedFinding{Scenario: r.ID, Phase: p.Name, Finding: f, Reason: k.Reason, Expires: k.Expires, Expired: k.Expired(now)}
				c.Accepted = append(c.Accepted, a)
				if a.Expired {
					keep = append(keep, f)
					continue
				}
				moved = true
				lines[scenarios.FindingLine(r.ID, p.Name, f)] = true
			}
			p.Findings = keep
			p.Counts.Findings = len(keep)
		}
		switch {
		case moved && (r.Result == scenarios.Leak || r.Result == scenarios.Failed) && onlyFindings(r, lines):
			r.Result = Accepted
		case moved && r.Result == scenarios.Leak && !leakLeft(r):
			// Accepted findings alone never make a leak: what is left
			// (a phase error, a failed control, a start-up failure) is a
			// failure.
			r.Result = scenarios.Failed
		}
		// The log's lines of accepted findings leave it: the console's and
		// summary's "why" lines must not list what the file accepts (the
		// findings stay listed, as accepted).
		if moved {
			var keep []string
			for _, l := range r.Log {
				if !lines[l] {
					keep = append(keep, l)
				}
			}
			r.Log = keep
		}
	}
	if c.Verdict != Failed || c.Error == "" {
		c.Verdict = VerdictOf(c.Scenarios)
		if c.Error != "" && c.Verdict != Leaks {
			c.Verdict = Failed
		}
	}
}

// match is the first known finding that names f: an unexpired one before
// an expired one.
func match(known []KnownFinding, f invariants.Finding, now time.Time) *KnownFinding {
	var expired *KnownFinding
	for i := range known {
		k := &known[i]
		if !k.Matches(f) {
			continue
		}
		if !k.Expired(now) {
			return k
		}
		if expired == nil {
			expired = k
		}
	}
	return expired
}

// leakLeft reports whether r still holds a leak finding.
func leakLeft(r *scenarios.Report) bool {
	for _, f := range r.Findings() {
		if f.Invariant.Leak() {
			return true
		}
	}
	return false
}

// onlyFindings reports whether r failed for its accepted findings alone:
// no finding left, no phase error, no failed control, and every line of
// its log one of those findings.
func onlyFindings(r *scenarios.Report, accepted map[string]bool) bool {
	for _, p := range r.Phases {
		if len(p.Findings) > 0 || p.Error != "" {
			return false
		}
		for _, ctl := range p.Controls {
			if !ctl.Passed {
				return false
			}
		}
	}
	for _, l := range r.Log {
		if !accepted[l] {
			return false
		}
	}
	return true
}

// AcceptedCount counts the findings accepted (not expired).
func (c *Certificate) AcceptedCount() int {
	n := 0
	for _, a := range c.Accepted {
		if !a.Expired {
			n++
		}
	}
	return n
}
