package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const usage = "usage: tinyagent root | stdio | serve --host H --port P [--cron-interval D]"

// Main runs the command in os.Args and returns the process's exit code.
func Main() int {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tinyagent:", err)
		return 1
	}
	return 0
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	p, err := newPool()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch args[0] {
	case "root":
		fmt.Fprintln(stdout, p.profilesDir())
		return nil
	case "stdio":
		return serveStdio(ctx, p, stdin, stdout)
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		host := fs.String("host", "127.0.0.1", "address to listen on")
		port := fs.String("port", "0", "port to listen on (0: any free port)")
		every := fs.Duration("cron-interval", 30*time.Second, "how often due cron jobs fire")
		if err := fs.Parse(args[1:]); err != nil {
			return fmt.Errorf("%w\n%s", err, usage)
		}
		return serveWebsocket(ctx, p, *host, *port, *every, stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
