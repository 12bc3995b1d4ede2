package scenarios

import (
	"sort"

	"github.com/tenantcanary/tenantcanary/harness/llmgw"
)

// noteProvisionerSecrets makes the operator secrets a gateway's
// provisioner printed (operator_secrets: a root token, an admin password)
// canaries of the operator, checked like the target's static secrets.
func (e *Env) noteProvisionerSecrets(g *llmgw.Gateway) {
	m := g.OperatorSecrets()
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		e.noteOperatorSecret("provisioned_"+k, m[k])
	}
}
