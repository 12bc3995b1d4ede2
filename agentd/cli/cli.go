package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/cron"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/plugins"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/sandbox"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/isolation"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Env is what a command runs with.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Environ        []string
	Self           []string // argv that runs this program as agentd again (see SelfArgv)
}

// SelfArgv is the argv prefix that re-executes the running program as
// agentd (for children such as plugin hosts), given Main's args: the
// executable, then whatever arguments came before agentd's own. For the
// agentd binary that is just the executable; for a program that calls Main
// from `prog agentd ...` it is [prog agentd].
func SelfArgv(args []string) []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return selfArgv(os.Args, exe, args)
}

func selfArgv(osArgs []string, exe string, args []string) []string {
	self := []string{exe}
	if len(args) == 0 || len(osArgs) < len(args) {
		return self
	}
	cut := len(osArgs) - len(args) + 1
	for i, a := range args[1:] {
		if osArgs[cut+i] != a {
			return self // Main was not called with this process's arguments
		}
	}
	return append(self, osArgs[1:cut]...)
}

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env, args []string) int
}

// commands is the command table, in the order help lists them.
var commands = []Command{
	{"tui", "serve the JSON-RPC protocol on stdin/stdout", runTUI},
	{"serve", "serve every profile over websocket: --host H --port P [--cron] [--cron-interval D] [--postgres URL --redis URL [--replica NAME]]", runServe},
	{"gateway", "OpenAI-compatible HTTP gateway for every profile: --host H --port P", runGateway},
	{"profile", "profile root|list|create NAME|delete NAME", runProfile},
	{"cron", "cron create|trigger|list|tick", runCron},
	{"plugins", "plugins audit DIR [--json]: the static pool-safety audit of a plugin's source", runPlugins},
	{"plugin-host", "serve one profile's plugins on stdin/stdout (started by agentd itself)", runPluginHost},
	{"sandbox", "sandbox check [--profile NAME]: which tool sandboxes work here, why the others do not, and whether the profile's terminal.sandbox runs in one (exit 1 when not)", runSandbox},
	{sandbox.LauncherCommand, "run a command in a profile's Landlock sandbox as its subreaper (started by agentd itself)", runSandboxExec},
	{"version", "print the version", func(_ context.Context, env *Env, _ []string) int {
		fmt.Fprintln(env.Stdout, versionLine())
		return ExitOK
	}},
}

// Main runs agentd with args (args[0] is the program name, whatever it is)
// and returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv, Environ: os.Environ(), Self: SelfArgv(args)}
	if len(args) < 2 {
		usage(stderr)
		return ExitUsage
	}
	name, rest := args[1], args[2:]
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		usage(stdout)
		return ExitOK
	}
	if name == "-version" || name == "--version" {
		fmt.Fprintln(stdout, versionLine())
		return ExitOK
	}
	for _, c := range commands {
		if c.Name == name {
			if helpAndVersion(ctx, env, c, rest) {
				return ExitOK
			}
			return c.Run(ctx, env, rest)
		}
	}
	fmt.Fprintf(stderr, "agentd: unknown command %q\n", name)
	usage(stderr)
	return ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentd COMMAND [ARGS]")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nagentd COMMAND --help describes a command and its flags; agentd --version prints the version.")
}

// homes resolves the homes; they carry the seeded faults of the homes'
// files (home-follows-links, home-special-files, unchecked-job-ids) to
// every profile. A bad fault list is reported by newServer; here it seeds
// nothing.
func homes(env *Env) (profile.Homes, error) {
	h, err := profile.Resolve(env.Getenv)
	if err != nil {
		return h, err
	}
	if fs, ferr := faults.FromEnv(env.Getenv); ferr == nil && len(fs) > 0 {
		h.Faults = fs
	}
	return h, nil
}

// subcommandHomes opens a command that takes a subcommand: its usage (and
// ExitUsage) when args name none, else the homes, or ExitFailure when they
// cannot be resolved.
func subcommandHomes(env *Env, args []string, use string) (profile.Homes, int) {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, use)
		return profile.Homes{}, ExitUsage
	}
	h, err := homes(env)
	if err != nil {
		return h, fail(env, "%v", err)
	}
	return h, ExitOK
}

func fail(env *Env, format string, args ...any) int {
	fmt.Fprintf(env.Stderr, "agentd: "+format+"\n", args...)
	return ExitFailure
}

func serverLog(env *Env) *slog.Logger {
	return slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// shutdownGrace is how long running turns may finish after stdin ends or a
// SIGTERM, from AGENTD_SHUTDOWN_GRACE (a duration), 10s by default.
func shutdownGrace(env *Env) time.Duration {
	if d, err := time.ParseDuration(env.Getenv("AGENTD_SHUTDOWN_GRACE")); err == nil && d >= 0 {
		return d
	}
	return 10 * time.Second
}

func runTUI(ctx context.Context, env *Env, args []string) int {
	fs := flag.NewFlagSet("agentd tui", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	h, err := homes(env)
	if err != nil {
		return fail(env, "%v", err)
	}
	out := env.Stdout
	if f, ok := out.(*os.File); ok && f == os.Stdout {
		// Frames get a private copy of stdout; fd 1 itself now points at
		// stderr, so anything a library prints cannot corrupt the stream.
		frames, err := reserveStdout()
		if err != nil {
			return fail(env, "tui: %v", err)
		}
		defer frames.Close()
		out = frames
	}
	log := serverLog(env)
	srv, code := newServer(env, h, log, "tui", server.Limits{})
	if srv == nil {
		return code
	}
	d := rpc.NewDispatcher()
	srv.Register(d)
	conn := rpc.NewLineConn(out)
	sigctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := srv.Ready(conn); err != nil {
		_ = srv.Shutdown(context.Background())
		return fail(env, "tui: %v", err)
	}
	log.Info("tui ready", "pid", os.Getpid(), "launch", h.Launch)
	serveErr := rpc.ServeLines(sigctx, d, env.Stdin, conn)
	why := "stdin closed"
	if sigctx.Err() != nil {
		why = "signal or cancel"
	}
	gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace(env))
	defer cancel()
	shutErr := srv.Shutdown(gctx)
	conn.Close()
	log.Info("tui stopped", "why", why)
	if serveErr != nil {
		return fail(env, "tui: %v", serveErr)
	}
	if shutErr != nil {
		return fail(env, "tui: shutdown: %v", shutErr)
	}
	return ExitOK
}

// reserveStdout duplicates fd 1 for the frame stream and points fd 1 at
// stderr.
func reserveStdout() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("duplicate stdout: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("point stdout at stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "frames"), nil
}

func runProfile(ctx context.Context, env *Env, args []string) int {
	const use = "usage: agentd profile root | list | create NAME | delete NAME"
	h, code := subcommandHomes(env, args, use)
	if code != ExitOK {
		return code
	}
	switch args[0] {
	case "root":
		fmt.Fprintln(env.Stdout, h.Root())
	case "list":
		list, err := h.List()
		if err != nil {
			return fail(env, "%v", err)
		}
		for _, p := range list {
			fmt.Fprintf(env.Stdout, "%s\t%s\n", p.Name, p.Home)
		}
	case "create", "delete":
		if len(args) != 2 {
			fmt.Fprintln(env.Stderr, use)
			return ExitUsage
		}
		if args[0] == "create" {
			p, err := h.Create(args[1])
			if err != nil {
				return fail(env, "%v", err)
			}
			fmt.Fprintln(env.Stdout, p.Home)
			return ExitOK
		}
		if err := h.Delete(args[1]); err != nil {
			return fail(env, "%v", err)
		}
		fmt.Fprintf(env.Stdout, "deleted %s\n", args[1])
	default:
		fmt.Fprintf(env.Stderr, "agentd profile: unknown subcommand %q\n%s\n", args[0], use)
		return ExitUsage
	}
	return ExitOK
}

func runCron(ctx context.Context, env *Env, args []string) int {
	const use = "usage: agentd cron create --name N --prompt P --every D [--profile P] | trigger [--profile P] ID | list [--profile P] [--json] | tick"
	h, code := subcommandHomes(env, args, use)
	if code != ExitOK {
		return code
	}
	fs := flag.NewFlagSet("agentd cron "+args[0], flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	prof := fs.String("profile", "", "profile name (the launch profile when empty)")
	name := fs.String("name", "", "job name")
	prompt := fs.String("prompt", "", "the job's prompt")
	every := fs.String("every", "", `schedule, like "every 1h" or "1h"`)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return ExitUsage
	}
	getJobs := func() (cron.Jobs, profile.Profile, bool) {
		p, err := h.Get(*prof)
		if err != nil {
			fail(env, "%v", err)
			return cron.Jobs{}, profile.Profile{}, false
		}
		return cron.ForProfile(p), p, true
	}
	// oneJob runs a subcommand that makes or fires one job (when its
	// arguments are usable) and prints the job's id.
	oneJob := func(usable bool, do func(cron.Jobs) (cron.Job, error)) int {
		jobs, _, ok := getJobs()
		if !ok {
			return ExitFailure
		}
		if !usable {
			fmt.Fprintln(env.Stderr, use)
			return ExitUsage
		}
		job, err := do(jobs)
		if err != nil {
			return fail(env, "%v", err)
		}
		fmt.Fprintln(env.Stdout, job.ID)
		return ExitOK
	}
	switch args[0] {
	case "create":
		return oneJob(*prompt != "" && *every != "", func(jobs cron.Jobs) (cron.Job, error) {
			return jobs.Create(*name, *prompt, *every, time.Now())
		})
	case "trigger":
		return oneJob(fs.NArg() == 1, func(jobs cron.Jobs) (cron.Job, error) {
			return jobs.Trigger(fs.Arg(0), time.Now())
		})
	case "list":
		jobs, _, ok := getJobs()
		if !ok {
			return ExitFailure
		}
		list, err := jobs.List()
		if err != nil {
			return fail(env, "%v", err)
		}
		if *asJSON {
			b, _ := json.MarshalIndent(list, "", "  ")
			fmt.Fprintln(env.Stdout, string(b))
			return ExitOK
		}
		cron.SortByNext(list)
		for _, j := range list {
			fmt.Fprintf(env.Stdout, "%s\t%s\t%s\tnext %s\tenabled=%v\n", j.ID, j.Name, j.Schedule, j.NextRun.Format(time.RFC3339), j.Enabled)
		}
	case "tick":
		srv, code := newServer(env, h, serverLog(env), "cron", server.Limits{})
		if srv == nil {
			return code
		}
		sigctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		results, err := srv.TickCron(sigctx, time.Now())
		_ = srv.Shutdown(context.Background())
		if err != nil {
			return fail(env, "cron tick: %v", err)
		}
		sort.SliceStable(results, func(a, b int) bool { return results[a].Profile < results[b].Profile })
		failed := 0
		for _, r := range results {
			status := "ok"
			if r.Err != nil {
				failed++
				status = "error: " + strings.ReplaceAll(r.Err.Error(), "\n", " ")
			}
			fmt.Fprintf(env.Stdout, "%s\t%s\t%s\t%s\n", r.Profile, r.Job.ID, r.Output, status)
		}
		if failed > 0 {
			fmt.Fprintf(env.Stderr, "agentd: cron tick: %d of %d jobs failed\n", failed, len(results))
			return ExitFailure
		}
	default:
		fmt.Fprintf(env.Stderr, "agentd cron: unknown subcommand %q\n%s\n", args[0], use)
		return ExitUsage
	}
	return ExitOK
}

// newServer builds the server for a command, with the seeded faults of
// AGENTD_FAULTS when AGENTD_ALLOW_FAULTS=1 allows them (refused
// otherwise). It returns nil and the exit status on failure.
func newServer(env *Env, h profile.Homes, log *slog.Logger, source string, lim server.Limits, options ...func(*server.Options)) (*server.Server, int) {
	if err := lim.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "agentd %s: %v\n", source, err)
		return nil, ExitUsage
	}
	fs, err := faults.FromEnv(env.Getenv)
	if err != nil {
		fmt.Fprintf(env.Stderr, "agentd: %v\n", err)
		return nil, ExitUsage
	}
	if len(fs) > 0 {
		msg := "SEEDED ISOLATION FAULTS ARE ON: this agentd leaks tenant data on purpose (test-only): " + strings.Join(fs.Names(), ",")
		fmt.Fprintf(env.Stderr, "agentd: WARNING: %s\n", msg)
		log.Warn(msg)
	}
	if m, err := sandbox.Effective(sandbox.Auto); err != nil {
		log.Warn("tool sandbox: none works here; terminals of profiles other than the launch one are refused in pooled serving unless the managed scope sets terminal.sandbox: none", "why", err.Error())
	} else {
		log.Info("tool sandbox", "auto", string(m))
	}
	// A profile's turns offer the built-in tools and its plugins' tools;
	// the plugins call back into this server (nested calls, facades).
	var srv *server.Server
	builtins := []agent.Tool{agent.TerminalTool{}}
	pluginOpts := plugins.Options{Command: append(append([]string(nil), env.Self...), "plugin-host"), Self: env.Self, Faults: fs,
		Pooled: poolsPlugins(source, fs)}
	tools := func(sc *scope.Scope) *agent.Registry {
		o := pluginOpts
		o.Backend = srv
		reg, err := plugins.Registry(context.Background(), sc, builtins, o)
		if err != nil {
			sc.Log.Error("plugins unavailable in this turn", "err", err)
		}
		return reg
	}
	o := server.Options{Homes: h, BaseEnv: env.Environ, Log: log, Source: source, Faults: fs, Self: env.Self, Tools: tools, Limits: lim}
	for _, set := range options {
		set(&o)
	}
	srv = server.New(o)
	return srv, ExitOK
}

// poolsPlugins says whether a server started by command source runs
// third-party plugins as a pooled server does (plugins.isolation: host
// unless the operator's managed scope, or in tui the launch profile's own
// config, which tui trusts as the operator's, sets it). Every command that
// builds a server can serve more than one profile (tui's session.create
// {profile}, cron tick's jobs of every profile, serve and gateway), so
// every one does: the default follows what a server serves, never how it
// was launched. The seeded faults launch-mode-isolation (tui and cron
// tick) and cron-tick-in-process (cron tick) restore agentd 0.14.1's rule,
// where only serve and gateway did.
func poolsPlugins(source string, fs faults.Set) bool {
	switch {
	case source == "serve" || source == "gateway":
		return true
	case fs.Has(faults.LaunchModeIsolation):
		return false // the bug: the launch mode picks the default
	case source == "cron" && fs.Has(faults.CronTickInProcess):
		return false // the bug: cron tick loads every profile's plugins in-process
	}
	return true
}

// runPlugins is `agentd plugins audit DIR [--json]`.
func runPlugins(_ context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] != "audit" {
		fmt.Fprintln(env.Stderr, "usage: agentd plugins audit DIR [--json]")
		return ExitUsage
	}
	return isolation.RunAuditCommand(args[1:], env.Stdout, env.Stderr)
}

// runPluginHost is the plugin host child: the protocol on stdin/stdout,
// everything a plugin prints on stderr. It exits when stdin closes.
func runPluginHost(ctx context.Context, env *Env, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(env.Stderr, "agentd plugin-host: takes no arguments, got %q\n", args)
		return ExitUsage
	}
	if err := host.ServeChild(ctx, env.Stdin, env.Stdout, env.Stderr); err != nil {
		fmt.Fprintf(env.Stderr, "agentd plugin-host: %v\n", err)
		return 1
	}
	return ExitOK
}

// runSandbox is `agentd sandbox check [--profile NAME]`: which modes work
// here, and whether the profile's terminal.sandbox (the managed scope's
// pin first) runs in one. It writes nothing: the launch home need not
// exist.
func runSandbox(_ context.Context, env *Env, args []string) int {
	const use = "usage: agentd sandbox check [--profile NAME]"
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(env.Stderr, use)
		return ExitUsage
	}
	fs := flag.NewFlagSet("agentd sandbox check", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	name := fs.String("profile", profile.LaunchName, "judge this profile's terminal.sandbox")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, use)
		return ExitUsage
	}
	h, err := homes(env)
	if err != nil {
		return fail(env, "%v", err)
	}
	p := profile.Profile{Name: profile.LaunchName, Home: h.Launch, Managed: h.Managed}
	if *name != profile.LaunchName {
		if p, err = h.Get(*name); err != nil {
			return fail(env, "%v", err)
		}
	}
	set, err := p.TerminalSandbox()
	if err != nil {
		return fail(env, "%v", err)
	}
	for _, k := range set.Ignored { // judged as a pooled agentd reads it
		fmt.Fprintln(env.Stdout, k.String())
	}
	net, err := p.TerminalNetwork()
	if err != nil {
		return fail(env, "%v", err)
	}
	c := sandbox.Configured{Mode: set.Mode, Pinned: set.Pinned, From: set.From, Network: net.Mode, NetworkFrom: net.From}
	if p.Name != profile.LaunchName {
		c.Profile = p.Name
	}
	return sandbox.Check(env.Stdout, c)
}

// runSandboxExec is the Landlock launcher child (see sandbox.RunLauncher).
func runSandboxExec(_ context.Context, env *Env, args []string) int {
	return sandbox.RunLauncher(args, env.Stderr)
}
