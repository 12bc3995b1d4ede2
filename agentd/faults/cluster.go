package faults

// Faults of cluster mode (issue 47: replicas over shared stores). Each
// needs `agentd serve --postgres URL --redis URL`; without the stores
// they change nothing.
const (
	// StoreCancelReply: cluster mode's Redis client is a small pool of RESP
	// connections that, when a command's context ends while its reply is
	// on the way, puts the connection back in the pool undrained (redis-py
	// #2624): the next caller on that connection reads the previous
	// command's reply, another tenant's cached answer or credential among
	// them.
	StoreCancelReply Name = "store-cancel-reply"
	// CacheKeyNoTenant: the cluster's response cache keys a provider's
	// answer by the request alone, not by the tenant that sent it
	// (BerriAI/litellm #29955): two tenants that send the same request
	// share one answer, the first's.
	CacheKeyNoTenant Name = "cache-key-no-tenant"
	// RevocationLocalOnly: a credential revoked on one replica is dropped
	// from that replica's auth cache only, never from the shared cache nor
	// announced to the other replicas (litellm #34217): they keep
	// accepting the revoked key until their cache's entry expires.
	RevocationLocalOnly Name = "revocation-local-only"
	// EventsUnscoped: events between replicas go on one channel for every
	// tenant, and a replica hands what it receives there to the sessions
	// it follows that channel for: every tenant's, so a tenant's settings
	// reach another tenant's connection on another replica.
	EventsUnscoped Name = "events-unscoped"
	// ResumeWrongProfile: a session resumed on a replica that does not
	// hold it is looked up by its stored id alone (the routing entry and
	// the row), and opened under the profile the row names, not the
	// caller's: a tenant resumes another tenant's session, history and all.
	ResumeWrongProfile Name = "resume-wrong-profile"
)

// clusterFaults lists the faults of this file.
func clusterFaults() []Name {
	return []Name{StoreCancelReply, CacheKeyNoTenant, RevocationLocalOnly, EventsUnscoped, ResumeWrongProfile}
}

// Cluster reports whether fault n acts only in cluster mode.
func Cluster(n Name) bool {
	for _, c := range clusterFaults() {
		if c == n {
			return true
		}
	}
	return false
}
