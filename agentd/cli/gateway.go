package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/gateway"
)

func runGateway(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("agentd gateway", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	host := fs.String("host", "", "address to listen on (gateway.api_server.host of the launch profile, else 127.0.0.1)")
	port := fs.Int("port", -1, "port (gateway.api_server.port of the launch profile, else 8642; 0 = any free port)")
	limits := limitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	h, err := homes(env)
	if err != nil {
		return fail(env, "%v", err)
	}
	launch, err := h.Get("")
	if err != nil {
		return fail(env, "gateway: %v", err)
	}
	cfg, err := launch.LoadConfig()
	if err != nil {
		return fail(env, "gateway: %v", err)
	}
	if *host == "" {
		*host = cfg.Gateway.APIServer.Host
		if *host == "" {
			*host = "127.0.0.1"
		}
	}
	if *port < 0 {
		*port = cfg.Gateway.APIServer.Port
		if *port == 0 {
			*port = 8642
		}
	}
	logger := serverLog(env)
	srv, code := newServer(env, h, logger, "gateway", *limits)
	if srv == nil {
		return code
	}
	seeded, _ := faults.FromEnv(env.Getenv) // newServer refused a bad list already
	g, err := gateway.New(gateway.Options{Homes: h, Server: srv, Log: logger, Faults: seeded})
	if err != nil {
		_ = srv.Shutdown(context.Background())
		if errors.Is(err, gateway.ErrAlreadyServed) {
			return fail(env, "gateway: refusing to serve twice: %v", err)
		}
		return fail(env, "gateway: %v", err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		_ = srv.Shutdown(context.Background())
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(env.Stderr, "agentd gateway: port %d on %s is in use: %v\n", *port, *host, err)
			return ExitPortInUse
		}
		return fail(env, "gateway: listen on %s:%d: %v", *host, *port, err)
	}
	hs := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(env.Stderr, "agentd gateway: http: ", 0)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(env.Stdout, "backend listening on %s:%d\n", *host, ln.Addr().(*net.TCPAddr).Port)
	logger.Info("gateway ready", "pid", os.Getpid())

	sigctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var serveErr error
	select {
	case <-sigctx.Done():
	case serveErr = <-served:
	}
	gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace(env))
	defer cancel()
	_ = hs.Shutdown(gctx) // waits for requests in flight within the grace period
	shutErr := srv.Shutdown(gctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fail(env, "gateway: %v", serveErr)
	}
	if shutErr != nil {
		return fail(env, "gateway: shutdown: %v", shutErr)
	}
	return ExitOK
}
