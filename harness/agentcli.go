package harness

import (
	"context"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// The target's agent CLI on the tenants' homes (stdio, cron_tick) runs
// beside the harness in the sandbox's hermetic environment; for a running
// server whose homes the harness reaches through remote:, it runs on the
// server's host through the operator's transport (ssh, kubectl exec),
// which forwards no environment: its command line carries what the
// process needs ({home}, {env}: placeholder.Stdio).

// StartStdio starts one stdio backend, named name, with a pipe to its
// stdin (DialStdio speaks to it); ctx's end kills it. For a running server (Target.RemoteFiles)
// the homes are pushed first, so the process reads what the harness wrote,
// and the command (the operator's transport) runs with the harness's own
// environment, as remote: commands do. Close stops it, if the caller has
// not: the transport's end closes the remote process's stdin, and a stdio
// backend ends there.
func (s *Sandbox) StartStdio(ctx context.Context, name string) (*Proc, error) {
	if len(s.Target.Stdio) == 0 {
		return nil, fmt.Errorf("start %s: the target gives no stdio command", name)
	}
	argv, env, err := s.agentCLI(ctx, s.Target.Stdio)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return s.start(ctx, name, argv, true, env)
}

// RunCronTick runs the target's cron_tick to its end and returns its
// stdout, as StartStdio runs stdio: on a running server's host through its
// transport, the homes pushed first.
func (s *Sandbox) RunCronTick(ctx context.Context) (string, error) {
	const name = "cron tick"
	if len(s.Target.CronTick) == 0 {
		return "", fmt.Errorf("%s: the target gives no cron_tick command", name)
	}
	argv, env, err := s.agentCLI(ctx, s.Target.CronTick)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	p, err := s.start(ctx, name, argv, false, env)
	if err != nil {
		return "", err
	}
	return s.waitCommand(ctx, name, p)
}

// agentCLI is argv with {home} and {env} filled, and the environment its
// process runs with: the sandbox's, or, for a running server, the
// harness's own (the transport's: an ssh agent, a kubeconfig) with the
// run's marker.
func (s *Sandbox) agentCLI(ctx context.Context, argv []string) ([]string, []string, error) {
	if !s.Target.RemoteFiles() {
		return expandCLI(argv, s.Set.Home, s.cliEnv(s.Set.Home)), s.Env(nil), nil
	}
	pctx, cancel := context.WithTimeout(ctx, s.Target.TimesFor(0).Call)
	defer cancel()
	if err := s.PushHomes(pctx); err != nil {
		return nil, nil, fmt.Errorf("push the homes first: %w", err)
	}
	home := s.RemotePath(s.Set.Home)
	env := append(os.Environ(), procgroup.MarkerVar+"="+s.RunID)
	return expandCLI(argv, home, s.cliEnv(home)), env, nil
}

// cliEnv is what {env} stands for with HOME home: the variables the
// harness sets for a target process beside the host's own, but TMPDIR
// (the sandbox's, which a server's host does not have).
func (s *Sandbox) cliEnv(home string) map[string]string {
	vars := map[string]string{"root": s.Root, "replica": "1"}
	for k, v := range s.storeVars {
		vars[k] = v
	}
	env := map[string]string{}
	for k, v := range s.Target.Env {
		env[k] = placeholder.String(v, vars)
	}
	layout := s.Set.Layout.WithDefaults()
	env["HOME"] = home
	env[layout.HomeVar] = path.Join(home, layout.LaunchDir)
	env[procgroup.MarkerVar] = s.RunID
	return env
}

// expandCLI fills argv's {home} with home and {env} with env's NAME=VALUE
// words, sorted: an argument that is exactly {env} becomes one argument a
// variable (an exec transport passes them as they are: `kubectl exec POD
// -- env {env} agentd tui`), and {env} inside a longer argument the words
// shell-quoted (a command string a shell reads: `ssh HOST "env {env}
// agentd tui"`).
func expandCLI(argv []string, home string, env map[string]string) []string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	words := make([]string, len(names))
	quoted := make([]string, len(names))
	for i, k := range names {
		words[i] = k + "=" + env[k]
		quoted[i] = k + "=" + shellWord(env[k])
	}
	fill := map[string]string{"home": home, "env": strings.Join(quoted, " ")}
	out := make([]string, 0, len(argv)+len(words))
	for _, a := range argv {
		if a == "{env}" {
			out = append(out, words...)
			continue
		}
		out = append(out, placeholder.String(a, fill))
	}
	return out
}

// plainWord is a word a POSIX shell reads as itself.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellWord is s as one word of a POSIX shell's command line.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
