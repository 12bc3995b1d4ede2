// Package scenarios is the certification catalog: each scenario is data (an
// ID, a purpose, the backends it drives, phases, the snapshots it expects
// per tenant) validated when the catalog is built, and one body that runs
// both as a Go test and as a canary-run entry. Every invariant is checked
// at the end of every phase, positive controls included.
//
// To certify a server, use package certify (certify.Run in a test): it
// runs the target's preflight, the catalog and the target's known findings
// around this package. RunScenario runs one scenario and nothing else:
//
//	func TestCatalog(t *testing.T) {
//		target, err := harness.LoadTarget("target.yaml")
//		if err != nil {
//			t.Fatal(err)
//		}
//		for _, spec := range scenarios.Default().All() {
//			t.Run(spec.ID, func(t *testing.T) {
//				scenarios.RunScenario(t, spec, scenarios.Config{Target: target})
//			})
//		}
//	}
//
// Config is how each scenario runs (target, tenants, timeout, seed);
// CatalogOptions are a run of several (RunCatalogWith: which, where, how
// many at once).
package scenarios
