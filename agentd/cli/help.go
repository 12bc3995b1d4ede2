package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tenantcanary/tenantcanary/agentd/server"
	"github.com/tenantcanary/tenantcanary/internal/version"
)

// helps is each command's long help: its usage lines and what it does.
// Flags are not written here: help asks the command's own flag set (see
// flagDefaults), so the list cannot drift from what the command accepts.
var helps = map[string]string{
	"tui": `usage: agentd tui
Serve the tenant-server JSON-RPC protocol on stdin/stdout, one JSON object a
line; logs go to stderr. Exits when stdin closes or on SIGTERM.`,
	"serve": `usage: agentd serve [--host H] [--port P] [--cron] [--cron-interval D]
Serve every profile over websocket at /api/ws?token=T (pooled mode: one
process, every profile). Prints "backend listening on H:PORT" once bound.`,
	"gateway": `usage: agentd gateway [--host H] [--port P]
OpenAI-compatible HTTP gateway: POST /v1/chat/completions for the launch
profile, /p/NAME/v1/chat/completions for the others, each behind that
profile's API_SERVER_KEY.`,
	"profile": `usage: agentd profile root | list | create NAME | delete NAME
  root          print the folder holding the named profiles
  list          print every profile and its home
  create NAME   make a profile (copies no secrets)
  delete NAME   delete a profile`,
	"cron": `usage: agentd cron create --name N --prompt P --every D [--profile P]
       agentd cron trigger [--profile P] ID
       agentd cron list [--profile P] [--json]
       agentd cron tick
  create    add a job to a profile (the launch profile by default)
  trigger   make a job due now
  list      print a profile's jobs
  tick      run every due job of every profile once`,
	"plugins": `usage: agentd plugins audit DIR [--json]
The static pool-safety audit of a plugin's source (or of every plugin under
DIR); it reads the source and never runs it.
  --json   print the findings as JSON`,
	"plugin-host": `usage: agentd plugin-host
Serve one profile's plugins over the framed protocol on stdin/stdout.
agentd starts it itself; it takes no arguments.`,
	"version": `usage: agentd version
Print the server's protocol version and this build's version and commit.`,
}

// environmentHelp names the variables every command reads.
const environmentHelp = `environment:
  AGENTD_HOME           the launch profile's home (default $HOME/.agentd)
  AGENTD_MANAGED_DIR    the operator's managed config (default /etc/agentd)
  AGENTD_SESSION_TOKEN  serve's websocket token (random and printed when unset)
  AGENTD_CRON=1         serve runs the cron ticker (as --cron)
  AGENTD_SHUTDOWN_GRACE how long running turns may finish on exit (default 10s)`

// versionLine is what --version and `agentd version` print.
func versionLine() string {
	return server.Version + ", tenantcanary " + version.Get().String()
}

// helpAndVersion handles --help and --version for any command: it reports
// whether args asked for either (before a "--"), having printed the answer.
func helpAndVersion(ctx context.Context, env *Env, c Command, args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			printCommandHelp(ctx, env.Stdout, c, args)
			return true
		case "-version", "--version":
			fmt.Fprintln(env.Stdout, versionLine())
			return true
		}
	}
	return false
}

func printCommandHelp(ctx context.Context, w io.Writer, c Command, args []string) {
	text, ok := helps[c.Name]
	if !ok {
		text = "usage: agentd " + c.Name + "\n" + c.Summary
	}
	fmt.Fprintln(w, text)
	if flags := flagDefaults(ctx, c, args); flags != "" {
		fmt.Fprintf(w, "\nflags:\n%s", flags)
	}
	fmt.Fprintf(w, "\n%s\n", environmentHelp)
}

// flagDefaults asks the command's own flag set for its flags: the flag
// package answers -h by printing them, before the command does anything
// else. cron's flags belong to its subcommands (create's, by default).
func flagDefaults(ctx context.Context, c Command, args []string) string {
	var probe []string
	switch c.Name {
	case "tui", "serve", "gateway":
		probe = []string{"-h"}
	case "cron":
		sub := "create"
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			sub = args[0]
		}
		probe = []string{sub, "-h"}
	default:
		return ""
	}
	var buf bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &buf,
		Getenv: func(k string) string {
			if k == "HOME" {
				return "/nonexistent-agentd-help-home" // resolved, never read: -h stops the command first
			}
			return ""
		}}
	c.Run(ctx, env, probe)
	out := buf.String()
	if i := strings.Index(out, "\n"); strings.HasPrefix(out, "Usage of ") && i >= 0 {
		out = out[i+1:]
	}
	return out
}
