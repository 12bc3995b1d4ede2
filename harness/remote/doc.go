// Package remote reaches a server the harness did not start through the
// operator's own commands: a tar stream of a folder of the server's host
// out (pull) and in (push), its start, stop and restart, its process
// listing with each process's environment, its plugin reload, and a
// POSIX shell command line of the harness's own run there (exec: every
// value in it quoted with Quote or Command). Each is
// a command line of the target file's remote: block, run on this machine
// in a process group of its own and killed with its context; what it
// reaches (ssh, kubectl exec, docker exec) is the operator's transport.
//
// The harness keeps a local mirror of the server's home folder: it plants
// homes in the mirror and pushes them, and pulls the folder back before
// every scan, so the scanners read the mirror and their findings name the
// remote path (Mirror.RemotePath):
//
//	m := remote.Mirror{Spec: spec, Local: dir}
//	if err := m.Pull(ctx); err != nil { ... } // dir now holds spec.Home's files
//	procs, err := remote.List(ctx, spec.Processes) // for the escape checks
//	_, err = spec.Shell(ctx, remote.MustCommand("kill", "-s", "KILL", "--", "4242"), nil, nil)
//
// Pull refuses a tar entry that would land outside the mirror (an
// absolute name, a "..", a link pointing out) with ErrEscapes, and writes
// every file through an os.Root on the mirror.
package remote
