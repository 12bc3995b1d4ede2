package server

import (
	"fmt"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
)

// slugKeyFileFault is the tenant-text-as-path fault's half in
// model.save_key: the key is also kept in keys/<slug>.key, the slug
// joined into a plain path unchecked. It returns the file written ("" with
// the fault off) and whether the slug is one agentd would otherwise refuse
// (then the .env is left alone: the key file is all that is saved).
func (s *Server) slugKeyFileFault(sc *scope.Scope, slug, key string) (file string, badSlug bool, err error) {
	if !s.opts.Faults.Has(faults.TenantTextAsPath) {
		return "", false, nil
	}
	file = sc.Profile.File("keys", slug+".key") // the bug: the slug is a path
	if err := profile.WriteFileAtomic(file, []byte(key+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("keep the key of %q: %w", slug, err)
	}
	return file, profile.ValidSlug(slug) != nil, nil
}
