package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/tenantcanary/tenantcanary/certify"
)

// harnessGOGC is the harness's GOGC: a collection when the heap has grown
// by 4 times what the last one left (measured: a catalog's GC work, 11 % of
// the harness's CPU at 100, falls by more than half).
const harnessGOGC = 400

func main() {
	// Re-executed as the embedded agentd (the default target): run it.
	certify.Dispatch(map[string]func() int{agentdCommand: agentdMain})
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agentd" {
		// `canary-run agentd ...` by hand: agentd handles its own signals,
		// as the standalone binary does.
		os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv("GOGC") == "" {
		// The harness holds a run's records (every provider request, frame
		// and snapshot) and re-reads them at every check; memory is cheap
		// next to the collections a default GOGC would run over them.
		debug.SetGCPercent(harnessGOGC)
	}
	ctx, stop := interruptible(context.Background(), os.Stderr)
	code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// interruptible returns a context canceled by the first SIGINT or SIGTERM;
// a second one gets the default action (the process ends at once).
func interruptible(parent context.Context, stderr io.Writer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-ch:
			signal.Stop(ch)
			fmt.Fprintf(stderr, "canary-run: %v: stopping every process (again to quit at once)\n", s)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}
