package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/cluster"
	"github.com/tenantcanary/tenantcanary/agentd/plugins"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/agentd/wsserve"
)

// ExitPortInUse is the exit status when the port is taken (EX_TEMPFAIL).
const ExitPortInUse = 75

func runServe(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("agentd serve", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8787, "port to listen on (0 = any free port)")
	cronOn := fs.Bool("cron", false, "run the cron ticker over every served profile (also AGENTD_CRON=1)")
	interval := fs.Duration("cron-interval", 60*time.Second, "time between cron ticks")
	limits := limitFlags(fs)
	clusterCfg := clusterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "agentd serve: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	if env.Getenv("AGENTD_CRON") == "1" {
		*cronOn = true
	}
	if *interval <= 0 {
		fmt.Fprintf(env.Stderr, "agentd serve: --cron-interval must be positive, got %s\n", *interval)
		return ExitUsage
	}
	clustered, err := clusterCfg.on(env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "agentd serve: %v\n", err)
		return ExitUsage
	}
	h, err := homes(env)
	if err != nil {
		return fail(env, "%v", err)
	}
	token := env.Getenv("AGENTD_SESSION_TOKEN")
	if token == "" {
		var b [24]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
		fmt.Fprintf(env.Stderr, "agentd serve: session token (set AGENTD_SESSION_TOKEN to choose one): %s\n", token)
	}
	// SIGHUP is caught before the port opens: a reload sent as soon as
	// the server answers must not end it (Go's default for SIGHUP).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(env.Stderr, "agentd serve: port %d on %s is in use: %v\n", *port, *host, err)
			return ExitPortInUse
		}
		return fail(env, "serve: listen on %s:%d: %v", *host, *port, err)
	}
	bound := ln.Addr().(*net.TCPAddr).Port

	logger := serverLog(env)
	var cl *cluster.Cluster
	if clustered {
		if cl, err = clusterCfg.open(ctx, env, *limits, logger); err != nil {
			ln.Close()
			return fail(env, "serve: %v", err)
		}
		defer cl.Close() // after the server's shutdown below
		fmt.Fprintf(env.Stderr, "agentd serve: cluster mode: replica %s, state in %s\n", cl.Replica(), cl.Postgres())
	}
	srv, code := newServer(env, h, logger, "serve", *limits, func(o *server.Options) { o.Cluster = cl })
	if srv == nil {
		ln.Close()
		return code
	}
	d := rpc.NewDispatcher()
	srv.Register(d)
	// A connection is read no faster than its requests are admitted (its
	// running and waiting ones); none with the no-conn-limit fault.
	lim := srv.Limits()
	ws := wsserve.New(wsserve.Options{Token: token, Dispatcher: d, OnOpen: srv.Ready, OnClose: srv.DropConn, Tenant: srv.TenantOf,
		MaxInFlight: lim.ConnRequests + lim.ConnQueue})
	hs := &http.Server{Handler: ws, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(env.Stderr, "agentd serve: http: ", 0)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(env.Stdout, "backend listening on %s:%d\n", *host, bound)

	sigctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tickCtx, stopTicks := context.WithCancel(sigctx)
	var ticker sync.WaitGroup
	if *cronOn {
		ticker.Add(1)
		go func() {
			defer ticker.Done()
			runTicker(tickCtx, h, srv, *interval, env)
		}()
	}
	// SIGHUP reloads every open profile's plugins: an operator who
	// installed a plugin in a profile's home (or replaced the home) makes
	// the server take it without a restart.
	var reloader sync.WaitGroup
	defer reloader.Wait()
	reloader.Add(1)
	go func() {
		defer reloader.Done()
		for {
			select {
			case <-tickCtx.Done():
				return
			case <-hup:
				reloadPlugins(srv, logger)
			}
		}
	}()
	logger.Info("serve ready", "pid", os.Getpid(), "port", bound, "cron", *cronOn, "cluster", clustered)

	var serveErr error
	select {
	case <-sigctx.Done():
	case serveErr = <-served:
	}
	// Stop accepting, let turns finish (or cancel them after the grace
	// period), then flush and close every connection.
	stopTicks()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = hs.Shutdown(sctx)
	cancel()
	gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace(env))
	shutErr := srv.Shutdown(gctx)
	cancel()
	ticker.Wait()
	if err := ws.Close(); err != nil {
		// Bounded, not clean: say so, but the server did stop.
		fmt.Fprintf(env.Stderr, "agentd serve: warning: %v\n", err)
	}
	logger.Info("serve stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fail(env, "serve: %v", serveErr)
	}
	if shutErr != nil {
		return fail(env, "serve: shutdown: %v", shutErr)
	}
	return ExitOK
}

// reloadPlugins closes every open profile's plugin hosts and forgets what
// was read of its plugins, so that the next turn finds what its home holds
// now (SIGHUP).
func reloadPlugins(srv *server.Server, logger *slog.Logger) {
	scopes := srv.OpenScopes()
	for _, sc := range scopes {
		if err := plugins.Reload(sc); err != nil {
			logger.Warn("reload plugins", "profile", sc.Profile.Name, "err", err)
		}
	}
	logger.Info("plugins reloaded (SIGHUP)", "profiles", len(scopes))
}

// runTicker fires due cron jobs of every served profile: once at start,
// then every interval. Profiles tick concurrently, each in its own scope;
// a failing job is recorded and never stops the ticker.
func runTicker(ctx context.Context, h profile.Homes, srv *server.Server, interval time.Duration, env *Env) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		tick(ctx, h, srv, env)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func tick(ctx context.Context, h profile.Homes, srv *server.Server, env *Env) {
	profiles, err := h.List()
	if err != nil {
		fmt.Fprintf(env.Stderr, "agentd serve: cron tick: %v\n", err)
		return
	}
	now := time.Now()
	var wg sync.WaitGroup
	for _, p := range profiles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range srv.TickProfile(ctx, p.Name, now) {
				status := "ok"
				if r.Err != nil {
					status = "error (see the profile's cron/jobs.json)"
				}
				fmt.Fprintf(env.Stderr, "agentd serve: cron: profile %s job %s: %s\n", r.Profile, r.Job.ID, status)
			}
		}()
	}
	wg.Wait()
}
