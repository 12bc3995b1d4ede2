package certify

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/harness"
)

// LoadTarget reads a target file (YAML; the README's "Target files: every
// field") and validates it: harness.LoadTarget. Run and RunT validate a
// target given as a struct literal the same way.
func LoadTarget(file string) (harness.Target, error) {
	return harness.LoadTarget(file)
}

// ErrTarget marks a target that cannot be driven (see harness.Target.Validate).
var ErrTarget = errors.New("bad target")

// checkTarget validates t as LoadTarget does and returns it ready to run
// (its ready line compiled, its layout's defaults filled).
func checkTarget(t harness.Target) (harness.Target, error) {
	if err := t.Validate(); err != nil {
		name := t.Name
		if name == "" {
			name = "(unnamed)"
		}
		return harness.Target{}, fmt.Errorf("%w %s: %w", ErrTarget, name, err)
	}
	return t, nil
}

// certTarget is how the certificate names t: its name, its version, its
// declared behaviours and the times the run (scenario timeout timeout)
// waited on it.
func certTarget(t harness.Target, timeout time.Duration) certificate.Target {
	times := t.TimesFor(timeout)
	if t.IsGateway() {
		// unknown_profile and the other behaviours are an agent server's:
		// a gateway's certificate names none of them.
		return certificate.Target{Name: t.Name, Version: t.Version, Times: &times}
	}
	return certificate.Target{Name: t.Name, Version: t.Version, Times: &times,
		Behaviours: map[string]string{"unknown_profile": t.Dialect.WithDefaults().Behaviours.UnknownProfile}}
}
