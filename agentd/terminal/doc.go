// Package terminal runs a persistent bash in a real pseudo-terminal, one
// command at a time, for one session of one profile.
//
// Each command's output is cut from the PTY stream between unique sentinel
// lines, with its exit status. A command that outruns its timeout, or a
// shell that dies, costs the shell: it is killed (its whole session of
// processes) and the next command starts a fresh one, and the result says
// so. Shell state (exported variables, the working directory) persists from
// one command to the next within one Shell and nowhere else.
//
// With Options.Sandbox the shell runs confined to its profile (package
// sandbox), and ending the shell (Close, a timeout, a dead shell) ends every
// process it started, in whatever session or group.
//
//	sh := terminal.New(terminal.Options{Dir: cwd, Env: env})
//	defer sh.Close()
//	res, err := sh.Run(ctx, "export X=1; pwd")
//	fmt.Println(res.Output, res.ExitCode)
package terminal
