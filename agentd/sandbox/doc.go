// Package sandbox confines the subprocesses agentd runs for a profile (its
// terminal's shell, its plugin host) to that profile: they see a read-only
// system root, their own home and workdir read-write, a private /tmp, no
// other home, none of the server's files and no other process; and
// everything they start ends with them (containment), setsid and double
// forks included.
//
// Modes (terminal.sandbox): bwrap (bubblewrap: own PID, IPC and UTS
// namespaces with a private /proc, killed with its parent), landlock (no
// namespaces: agentd re-executes itself as `agentd sandbox-exec`, which
// applies Landlock to the command and, as a child subreaper, kills every
// descendant when the command ends or agentd stops it), none, and auto
// (bwrap where it works, else landlock, else none). Whether a mode works
// here is probed once and cached; Check prints the verdicts.
//
// Both confining modes drop every capability, also when agentd runs as
// root; bwrap always mounts a /proc of its own PID namespace. Policy.Network
// NetNone (terminal.network: none) takes the network away. A workdir outside
// the home is opened without following symlinks (OpenDir), judged again
// (SystemRule, Policy.Allow) and bound through that descriptor, so a folder
// swapped for a link after the profile's check reaches nothing.
//
// The command's environment is the command's alone: bwrap and the
// launcher, which start it from outside the sandbox, run with an
// allow-list of agentd's own environment (internal/outerenv) and get the
// command's through a descriptor, so a tenant's LD_PRELOAD in its .env
// runs only inside.
//
//	pol := sandbox.Policy{Mode: sandbox.Auto, Home: home, Dir: home, Self: self}
//	c, err := pol.Command([]string{"bash", "-i"}, toolEnv) // toolEnv is bash's, never bwrap's or the launcher's
//	_ = c.Start()
//	c.Started()
//	waited := make(chan struct{})
//	go func() { _ = c.Wait(); close(waited) }()
//	defer c.Stop(waited) // ends the command and every process it started
//
//	prefix, err := pol.Prefix() // the same sandbox as an argv prefix (a plugin host's launcher)
package sandbox
