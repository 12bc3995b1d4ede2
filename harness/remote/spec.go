package remote

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
)

// Spec is a target file's remote: block: the commands that reach a
// running server's host. Every field is optional; what a run cannot do
// without one (Spec.Lacks) is skipped, naming the field.
type Spec struct {
	// Home is the server's home folder on its host: the folder holding
	// its launch home (agentd's $HOME, with .agentd inside), which the
	// harness mirrors.
	Home string `yaml:"home"`
	// Workdirs is the folder on the server's host where the tenants'
	// workdirs are made (each tenant's in <workdirs>/<its profile>; the
	// server's operator scope allows them there), pushed there as empty
	// folders. With it, the harness runs its own tenants and providers on
	// a running server (no tenants_file): it plants their homes and
	// workdirs itself.
	Workdirs string `yaml:"workdirs"`
	// ProvidersListen is the address the harness's providers listen on
	// (default 127.0.0.1:0), and ProvidersHost the host the server reaches
	// them at (default: the listen address's).
	ProvidersListen string `yaml:"providers_listen"`
	ProvidersHost   string `yaml:"providers_host"`
	// Pull streams the folder {path} of the server's host out as a tar
	// stream on stdout (`ssh HOST tar -C {path} -cf - .`).
	Pull []string `yaml:"pull"`
	// Push streams a tar stream on stdin into the folder {path}, made if
	// missing (`ssh HOST 'mkdir -p {path} && tar -C {path} -xf -'`).
	Push []string `yaml:"push"`
	// Stop stops the server and Start starts it again (a restart is one
	// then the other); the harness then waits for its health URL to fail,
	// within the target's stop_grace, or to answer, within its
	// ready_timeout.
	Start []string `yaml:"start"`
	Stop  []string `yaml:"stop"`
	// Health is the path, on the server's URL, that answers 200 once it is
	// ready (default DefaultHealth).
	Health string `yaml:"health"`
	// Processes prints the server's processes with their environments
	// (List's format: JSON lines, or "PID PPID CMDLINE_B64 ENVIRON_B64"
	// lines), for the process-escape and environment checks.
	Processes []string `yaml:"processes"`
	// Reload is the server's own plugin reload, run after a plugin's files
	// are pushed.
	Reload []string `yaml:"reload"`
	// Shared are folders of the server's host that belong to no tenant
	// (its working folder, its TMPDIR, a cache): pulled with Pull after
	// every phase and scanned as shared places, where no tenant's secret
	// may rest. None given, the shared-place check is skipped, naming
	// this field.
	Shared []string `yaml:"shared"`
	// Logs are the server's own log files on its host (its gateway's
	// too), read through Exec after every phase and scanned from where the
	// last phase's scan ended, as the logs of a server the harness starts
	// are: no tenant's secret may be written there.
	Logs []string `yaml:"logs"`
	// Exec runs a POSIX shell command line on the server's host: an argv
	// with {command} as one whole element, which the harness fills with
	// a command line whose every value is quoted (Quote, Command):
	// `[ssh, HOST, "{command}"]`, `[kubectl, exec, -i, POD, --, sh, -c,
	// "{command}"]`. With it (and Processes) the harness kills a plugin
	// host by pid, plants files and links in the tenants' workdirs and
	// reads /proc of the server's host (Spec.Shell).
	Exec []string `yaml:"exec"`
}

// Field names, as a target file writes them (for skip reasons).
const (
	FieldFiles     = "remote.home, remote.pull and remote.push"
	FieldRestart   = "remote.stop and remote.start"
	FieldProcesses = "remote.processes"
	FieldReload    = "remote.reload"
	FieldShared    = "remote.shared"
	FieldLogs      = "remote.logs"
	FieldExec      = "remote.exec"
)

// Vocabulary is the placeholders of a remote command line.
var Vocabulary = placeholder.Vocabulary{Of: "a remote: command line", Vars: []placeholder.Var{
	{Name: "path", Doc: "the folder of the server's host a pull or push streams (remote.home, or one beneath it)"},
}}

// Files reports whether the harness can read and write the server's
// home: a home folder, a pull and a push.
func (s *Spec) Files() bool {
	return s != nil && s.Home != "" && len(s.Pull) > 0 && len(s.Push) > 0
}

// CanRestart reports whether the harness can stop the server and start
// it again.
func (s *Spec) CanRestart() bool { return s != nil && len(s.Stop) > 0 && len(s.Start) > 0 }

// ListsProcesses reports whether the harness can list the server's
// processes.
func (s *Spec) ListsProcesses() bool { return s != nil && len(s.Processes) > 0 }

// Lacks says which fields would give what ("files", "restart",
// "processes", "reload", "exec"), or "" when s has them.
func (s *Spec) Lacks(what string) string {
	has := map[string]bool{"files": s.Files(), "restart": s.CanRestart(),
		"processes": s.ListsProcesses(), "reload": s != nil && len(s.Reload) > 0, "exec": s.Execs()}
	field := map[string]string{"files": FieldFiles, "restart": FieldRestart,
		"processes": FieldProcesses, "reload": FieldReload, "exec": FieldExec}
	ok, known := has[what]
	switch {
	case !known:
		return fmt.Sprintf("remote: %q is nothing a remote: block gives", what)
	case ok:
		return ""
	}
	return "give " + field[what] + " in the target file's remote: block"
}

// Commands lists the commands s declares, by field name, in a fixed order
// (remote.exec, whose placeholder is {command}, apart).
func (s *Spec) Commands() []Named {
	if s == nil {
		return nil
	}
	var out []Named
	for _, c := range []Named{{"pull", s.Pull}, {"push", s.Push}, {"start", s.Start}, {"stop", s.Stop},
		{"processes", s.Processes}, {"reload", s.Reload}} {
		if len(c.Argv) > 0 {
			out = append(out, Named{"remote." + c.Field, c.Argv})
		}
	}
	return out
}

// Named is one command of a remote: block and its field.
type Named struct {
	Field string
	Argv  []string
}

// Validate checks s: a home that is an absolute path, pull and push given
// together and each naming {path}, and placeholders of the vocabulary.
func (s *Spec) Validate() error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.Home != "" && (!path.IsAbs(s.Home) || path.Clean(s.Home) == "/") {
		errs = append(errs, fmt.Errorf("remote.home: %q is not an absolute folder below / on the server's host", s.Home))
	}
	if (len(s.Pull) > 0) != (len(s.Push) > 0) || (s.Home == "") != (len(s.Pull) == 0) {
		errs = append(errs, errors.New("remote: home, pull and push go together (the harness reads and writes the server's home with them): give all three or none"))
	}
	for _, c := range []Named{{"pull", s.Pull}, {"push", s.Push}} {
		if len(c.Argv) > 0 && !strings.Contains(strings.Join(c.Argv, " "), "{path}") {
			errs = append(errs, fmt.Errorf("remote.%s: no {path} in %q: the folder it streams", c.Field, strings.Join(c.Argv, " ")))
		}
	}
	if s.Workdirs != "" && (!path.IsAbs(s.Workdirs) || path.Clean(s.Workdirs) == "/" || !s.Files()) {
		errs = append(errs, fmt.Errorf("remote.workdirs: %q: want an absolute folder below / on the server's host, beside home, pull and push", s.Workdirs))
	}
	for i, f := range s.Shared {
		switch {
		case !path.IsAbs(f) || path.Clean(f) == "/":
			errs = append(errs, fmt.Errorf("remote.shared[%d]: %q is not an absolute folder below / on the server's host", i, f))
		case !s.Files():
			errs = append(errs, fmt.Errorf("remote.shared[%d]: %q: the shared folders are pulled with remote.pull: give home, pull and push", i, f))
		case within(f, s.Home) || within(s.Home, f):
			errs = append(errs, fmt.Errorf("remote.shared[%d]: %q overlaps remote.home (%s): the homes are the tenants', scanned as theirs", i, f, s.Home))
		case s.Workdirs != "" && (within(f, s.Workdirs) || within(s.Workdirs, f)):
			errs = append(errs, fmt.Errorf("remote.shared[%d]: %q overlaps remote.workdirs (%s): the workdirs are the tenants'", i, f, s.Workdirs))
		}
	}
	for i, f := range s.Logs {
		switch {
		case !path.IsAbs(f) || path.Clean(f) == "/":
			errs = append(errs, fmt.Errorf("remote.logs[%d]: %q is not an absolute file on the server's host", i, f))
		case !s.Execs():
			errs = append(errs, fmt.Errorf("remote.logs[%d]: %q: the logs are read with remote.exec: give it", i, f))
		}
	}
	if s.Health != "" && !strings.HasPrefix(s.Health, "/") {
		errs = append(errs, fmt.Errorf("remote.health: %q is not a path on the server's URL (want e.g. /api/health)", s.Health))
	}
	if (len(s.Stop) > 0) != (len(s.Start) > 0) {
		errs = append(errs, errors.New("remote: stop and start go together (the harness starts the server again after stopping it): give both or neither"))
	}
	for _, c := range s.Commands() {
		if err := Vocabulary.Check(c.Argv); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Field, err))
		}
	}
	if err := s.validateExec(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// OwnTenants reports whether the harness runs its own tenants and
// providers on the running server: it reaches its homes and makes its
// workdirs (Workdirs).
func (s *Spec) OwnTenants() bool { return s.Files() && s.Workdirs != "" }

// within reports whether the host path p is dir or below it.
func within(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// WithHome is s reaching folder of the server's host in place of its
// home: a mirror of one of its shared folders (Shared) pulls with it.
func (s *Spec) WithHome(folder string) *Spec {
	c := *s
	c.Home = folder
	return &c
}
