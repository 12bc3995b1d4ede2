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
//	pol := sandbox.Policy{Mode: sandbox.Bwrap, Home: home, Dir: home, Self: self}
//	argv, err := pol.Wrap([]string{"bash", "-i"})
//	cmd := exec.Command(argv[0], argv[1:]...)
//	cmd.Env = toolEnv // the environment passes through unchanged
//	st, err := pol.Prepare(cmd) // adds what Stop needs to end it all
//	_ = cmd.Start(); st.Started(cmd.Process.Pid)
//	defer st.Stop(waited) // ends the command and every process it started
package sandbox
