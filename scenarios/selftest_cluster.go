package scenarios

import (
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/invariants"
)

// ClusterFaults are the seeded faults of agentd's cluster mode
// (faults.Cluster), each with the scenario that must catch it: they act
// only in agentd over shared stores, so a self-test runs them against
// agentd in cluster mode (a target with stores:, as
// examples/targets/agentd-cluster has it, its response cache on), never
// against the single embedded agentd whose faults Faults lists.
func ClusterFaults() []Fault {
	return []Fault{
		{"store-cancel-reply", "cancellations", invariants.RPC, "a pooled Redis client puts a cancelled command's connection back with its reply still coming: the next caller, another tenant's turn, reads the cached answer meant for the cancelled one"},
	}
}

// Cluster reports whether f seeds a fault of agentd's cluster mode: its
// self-test needs agentd over shared stores.
func (f Fault) Cluster() bool {
	for _, n := range strings.Split(f.Name, ",") {
		if faults.Cluster(faults.Name(n)) {
			return true
		}
	}
	return false
}
