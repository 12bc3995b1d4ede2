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
// examples/targets/agentd-cluster has it, its response cache on; three
// replicas and its auth cache on too for the replicas scenario:
// SelfTestTarget), never against the single embedded agentd whose faults
// Faults lists.
func ClusterFaults() []Fault {
	return []Fault{
		{"store-cancel-reply", "cancellations", invariants.RPC, "a pooled Redis client puts a cancelled command's connection back with its reply still coming: the next caller, another tenant's turn, reads the cached answer meant for the cancelled one"},
		// Replicas (issue 47): agentd's replicas over the same stores
		// (SelfTestTarget), each fault one defence of the cluster taken
		// away.
		{"cache-key-no-tenant", "replicas", invariants.Request, "the response cache keys a provider's answer by the request alone: a tenant's byte-identical request on another replica gets the first tenant's answer, its tool call run in the wrong tenant"},
		{"revocation-local-only", "replicas", invariants.RevokedCredential, "a credential rotated through one replica stays in the other replicas' auth caches: they serve the old key right after"},
		{"events-unscoped", "replicas", invariants.RPC, "events between replicas go on one channel for every tenant: a tenant's setting reaches another tenant's connection on another replica"},
		{"resume-wrong-profile", "replicas", invariants.RPC, "a session resumed on another replica is opened under the profile its row names: a tenant resumes another's stored session, its model and history"},
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
