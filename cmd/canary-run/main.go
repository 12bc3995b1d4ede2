package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenantcanary/tenantcanary/certify"
)

func main() {
	// Re-executed as the embedded agentd (the default target): run it.
	certify.Dispatch(map[string]func() int{agentdCommand: agentdMain})
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "agentd" {
		// `canary-run agentd ...` by hand: agentd handles its own signals,
		// as the standalone binary does.
		os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
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
