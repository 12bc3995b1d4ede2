// Package flood loads a pooled server from processes of their own, so that
// what the harness measures is the server's cost, not its own: a Flood is
// one tenant's flood of sessions and turns (every worker keeps a turn of a
// session of its own running, back to back, until the flood stops, and
// each connection's pipeline keeps session.create requests in flight that
// no worker waits on: Spec.Pipeline), a Control is a path through the
// same machine that the server does not schedule, timed beside the
// neighbours' turns (see invariants.Round).
//
//	ctl, err := flood.StartControl(ctx, flood.ControlOptions{})
//	defer ctl.Close()
//	f, err := flood.Start(ctx, flood.Spec{Base: base, Token: token, Profile: "beta",
//		Conns: 10, Workers: 1000, Pipeline: 1000, Prompt: "FLOOD", Hold: true}, flood.Options{})
//	defer f.Kill()
//	_, err = f.Wait(ctx, "its connections", func(c flood.Counts) bool { return c.Ready })
//	// ... time the neighbours' turns alone, ctl.Sample beside them ...
//	err = f.Go()
//	_, err = f.Wait(ctx, "every worker to send", func(c flood.Counts) bool { return c.Workers == 10*1000 })
//	// ... time them under the flood, ctl.Sample beside them ...
//	counts, err := f.Stop(ctx)
//
// # The control
//
// A control answers each probe after a fixed unit of CPU work (DefaultWork)
// in a process of its own on a loopback port: a probe crosses the
// harness's goroutines, loopback TCP, the kernel's scheduler and the cores,
// as a neighbour's turn does, and nothing of the target. The alternatives
// each fail one way: the target's health endpoint runs in the target's
// process, whose scheduling of its goroutines is what a server without
// limits gets wrong (it would slow with the neighbours and excuse them); a
// fake provider's latency is the harness process's, which also serves the
// flooder's provider (work the target decides to send); a bare echo
// measures how fast a sleeping process wakes, which a kernel favours, not
// the share of the cores it gets. So a control slowed under the flood is
// the machine slowed, the flood's own process included, and a neighbour
// slowed beyond it is the server's doing.
//
// # Process model
//
// Both children are this very binary, re-executed (/proc/self/exe, else
// os.Executable) with RoleVar in its environment: the package's init sees
// it and runs the child instead of the program, as docker's reexec does. So
// it works in canary-run, in this repository's test binaries and in a
// user's own `go test` binary alike, with nothing to build or install: any
// binary that links the catalog links this package. A test binary built
// with -race re-executes as a race-instrumented child; it floods all the
// same, at a higher CPU cost to the machine (which the control measures).
//
// Where this cannot work, a child never answers and the wait for it fails
// at its deadline, naming what it waited for: a program whose executable is
// not the one that links this package (the catalog loaded as a c-shared
// library or a plugin: /proc/self/exe names the host program), or one that
// cannot find its own executable. No other design was needed here: a
// separate flooder binary would have to be built or installed beside every
// test binary, which is what re-execution avoids.
//
// Each child leads a process group of its own, dies with the harness (the
// parent-death signal) and with ctx, carries the run's marker when given
// one (Options.Marker: a sandbox's Close then finds it if it outlived the
// run), and is killed and reaped on every path: Stop, Kill and Close return
// only once its group is empty, and say so when it is not. Secrets (the
// flooder's credential) cross on stdin, never in the environment or argv,
// where /proc shows them to every process of the machine.
//
// The wire between parent and child is JSON lines: the parent writes one
// object on the child's stdin (Spec, or ControlOptions), then "go" to start
// a held flood (Spec.Hold), and closes stdin to stop it; the child writes
// its reports on stdout (Counts, every Spec.Every, the last one with Done
// set; the control's address) and exits, which closes its connections at
// once.
//
// The flooder speaks the target's dialect (Spec.Dialect) with no hook
// runner: a target whose session.create or prompt.submit is a command hook
// cannot be flooded from here (Spec.Check says so), and a flood of tens of
// thousands of commands would measure the commands anyway.
package flood
