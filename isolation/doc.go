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
// Settings also carry the host's launcher (a list, or one string split
// with shell quoting rules: SplitArgs, Argv) and its limits (HostLimits:
// plugins.host.call_timeout, memory_limit, cpu_limit, file_size_limit,
// open_files_limit, processes_limit), where the managed scope wins too;
// Settings.ForPooled makes host the default of a pooled server.
//
// The audit (AuditDir, RunAuditCommand for `agentd plugins audit DIR
// [--json]`) parses plugin source with go/parser and never runs it;
// InProcessHazards finds the goroutine constructs (InProcessRefused) an
// in-process loader refuses.
package isolation
