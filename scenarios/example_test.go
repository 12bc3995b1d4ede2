package scenarios_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// Every scenario of the catalog as a sub-test of a user's test (the
// package comment's example; certify.Run adds the preflight and the known
// findings around it).
func ExampleRunScenario() {
	testCatalog := func(t *testing.T) {
		target, err := harness.LoadTarget("target.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range scenarios.Default().All() {
			t.Run(spec.ID, func(t *testing.T) {
				scenarios.RunScenario(t, spec, scenarios.Config{Target: target})
			})
		}
	}
	_ = testCatalog
}

// A run of two scenarios, two at a time, its sandboxes under a work
// folder.
func ExampleRunCatalogWith() {
	run := func(ctx context.Context, target harness.Target, work string) error {
		reports, err := scenarios.RunCatalogWith(ctx, scenarios.Default(), scenarios.Config{Target: target, Tenants: 3},
			scenarios.CatalogOptions{Run: "^(pooled-serve|tenant-authz)$", WorkDir: work, Parallel: 2})
		for _, r := range reports {
			fmt.Println(r.ID, r.Result)
		}
		return err
	}
	_ = run
}
