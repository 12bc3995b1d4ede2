// Package isolation is the one source of truth for where third-party plugin
// code may run (plugins.isolation: in_process | host).
//
// It resolves the mode for a profile under the operator's managed scope (a
// managed plugins.isolation wins over the profile's own), gives the host's
// launcher argv prefix, holds the boundary tables (each entry with its
// reason) that both the plugin host's runtime and the static audit read, and
// has the one function every in-process loader asks first:
//
//	s, err := isolation.LoadSettings(home, isolation.ManagedDir())
//	if err := isolation.MayLoadInProcess("plugin probe", isolation.SourceUser, s.Mode); err != nil {
//		return err // errors.Is(err, isolation.ErrRefused)
//	}
//
// The audit (AuditDir, RunAuditCommand for `agentd plugins audit DIR
// [--json]`) parses plugin source with go/parser and never runs it.
package isolation
