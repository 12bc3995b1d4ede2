// Package scenarios is the certification catalog: each scenario is data (an
// ID, a purpose, the backends it drives, phases, the snapshots it expects
// per tenant) validated when the catalog is built, and one body that runs
// both as a Go test and as a canary-run entry. Every invariant is checked
// at the end of every phase, positive controls included.
//
//	func TestCatalog(t *testing.T) {
//		for _, spec := range scenarios.Default().All() {
//			t.Run(spec.ID, func(t *testing.T) {
//				scenarios.RunScenario(t, spec, scenarios.Config{Target: target})
//			})
//		}
//	}
package scenarios
