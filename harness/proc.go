package harness

import (
	"context"

	"github.com/tenantcanary/tenantcanary/internal/proc"
)

// Errors of a process's life, distinct so a caller can tell a target that
// never got ready from one that died.
var (
	ErrExited   = proc.ErrExited
	ErrNotReady = proc.ErrNotReady
	ErrStart    = proc.ErrStart
)

// ProcSpec describes a child the harness runs.
type ProcSpec struct {
	Name    string   // for errors and logs, e.g. "agentd serve"
	Argv    []string // program and arguments
	Dir     string   // working directory
	Env     []string // the complete environment (see tenants.HermeticEnv)
	LogPath string   // stdout and stderr are appended here, line by line, prefixed by stream
	Stdin   bool     // keep a pipe to the child's stdin (stdio RPC); else stdin is /dev/null
}

// Proc is one running child in a process group of its own. Its stdout lines
// are kept in order and can be waited on (Line, WaitLine); stdout and
// stderr both go to the log file. Stop and Kill are safe to call more than
// once and from any goroutine; they return after the child is reaped and
// every reader has finished. It is the one subprocess type of the module
// (internal/proc), which the plugin host uses too.
type Proc = proc.Proc

// StartProc starts spec's program. The child runs in a new process group,
// dies with the harness (parent-death signal) and is killed as a group
// when ctx ends.
func StartProc(ctx context.Context, spec ProcSpec) (*Proc, error) {
	return proc.Start(ctx, proc.Spec{
		Name: spec.Name, Argv: spec.Argv, Dir: spec.Dir, Env: spec.Env,
		LogPath: spec.LogPath, Stdin: spec.Stdin,
	})
}
