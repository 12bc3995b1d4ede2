package scenarios

import (
	"strings"
	"testing"
)

// logWriter sends progress lines to the test's log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCatalogAgainstAgentd runs the whole catalog against the embedded
// target: every invariant after every phase, positive controls included,
// and no process of any run left behind.
func TestCatalogAgainstAgentd(t *testing.T) {
	t.Parallel()
	cfg := Config{Target: agentdTarget(), Tenants: 3}
	for _, spec := range Default().All() {
		t.Run(spec.ID, func(t *testing.T) {
			t.Parallel()
			cfg := cfg
			cfg.Progress = logWriter{t}
			rep := RunScenario(t, spec, cfg)
			for _, p := range rep.Phases {
				for _, c := range p.Controls {
					if !c.Passed {
						t.Errorf("control %s of %s failed: %s", c.Name, c.Tenant, c.Detail)
					}
				}
			}
		})
	}
}
