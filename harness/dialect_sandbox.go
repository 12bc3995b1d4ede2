// What a Sandbox does with its target's dialect: tenant homes with the
// config template, the probe tool, and hooks run as target commands.

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"strings"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// writeHomes writes every tenant's home with extras and the dialect's
// config template filled for that tenant.
func (s *Sandbox) writeHomes(extras tenants.HomeExtras) error {
	for _, t := range s.Set.Tenants {
		if err := s.WriteHome(t, extras); err != nil {
			return err
		}
	}
	return nil
}

// WriteHome writes t's home with extras and the dialect's config template
// (a profile a scenario adds later gets the same), and, for a target with
// a shared config, rewrites that file with t's sections.
func (s *Sandbox) WriteHome(t *tenants.Tenant, extras tenants.HomeExtras) error {
	if cfg := s.Target.Dialect.TenantConfig(t, s.Set.Layout, s.Root); cfg != nil {
		extras.Config = tenants.DeepMerge(cfg, extras.Config)
	}
	if err := t.WriteHome(s.Set.Layout, extras); err != nil {
		return err
	}
	if err := s.noteHome(t, extras); err != nil {
		return err
	}
	return s.pushWritten()
}

// probeResponder is the default responder for a dialect whose probe tool
// is not terminal{command}.
func (d *Dialect) probeResponder() func(*tenants.Tenant) fakellm.Responder {
	pt := d.WithDefaults().ProbeTool
	if pt.Name == "terminal" && pt.Arg == "command" {
		return nil
	}
	return func(t *tenants.Tenant) fakellm.Responder { return tenants.ProbeResponder(t, pt.Name, pt.Arg) }
}

// shellTool makes a scenario's responder speak the dialect's probe tool:
// every call of terminal{command} it answers with (an attack's shell
// command, the default probe) becomes a call of the dialect's tool with
// the command in its argument. The identity dialect keeps resp as it is.
func (d *Dialect) shellTool(resp func(*tenants.Tenant) fakellm.Responder) func(*tenants.Tenant) fakellm.Responder {
	pt := d.WithDefaults().ProbeTool
	if pt.Name == "terminal" && pt.Arg == "command" {
		return resp
	}
	return func(t *tenants.Tenant) fakellm.Responder {
		r := resp(t)
		return func(rec fakellm.Record) fakellm.Response {
			out := r(rec)
			for i, c := range out.Calls {
				if c.Name != "terminal" {
					continue
				}
				var cmd any
				switch a := c.Args.(type) {
				case map[string]any:
					cmd = a["command"]
				case map[string]string:
					cmd = a["command"]
				}
				if cmd != nil {
					out.Calls[i].Name, out.Calls[i].Args = pt.Name, map[string]any{pt.Arg: cmd}
				}
			}
			return out
		}
	}
}

// HookRunner runs a hook: argv and env are templates to fill with the
// call's logical params and the addressed tenant's placeholders; it returns
// the command's stdout.
type HookRunner func(ctx context.Context, op string, params map[string]any, argv []string, env map[string]string) (string, error)

// HookRunner runs hooks as target commands of the sandbox, in the hermetic
// environment of the tenant the call addresses (params' profile; none is
// the launch tenant), with the layout's home variable at that tenant's
// home, the serve backend's address and token while it is up
// (HookServeVars), the call's params and the tenant's placeholders filled.
func (s *Sandbox) HookRunner() HookRunner {
	return func(ctx context.Context, op string, params map[string]any, argv []string, env map[string]string) (string, error) {
		profile, _ := params["profile"].(string)
		t := s.Set.Launch()
		if profile != "" {
			if t = s.Set.Get(profile); t == nil {
				return "", fmt.Errorf("hook %s: no tenant %q in this run", op, profile)
			}
		}
		vars := TenantVars(t, s.Set.Layout, s.Root)
		for k, v := range s.storeVars {
			vars[k] = v
		}
		for k, v := range params {
			vars[k] = v
		}
		filled := make([]string, len(argv))
		for i, a := range argv {
			f, ok := placeholder.Value(a, vars)
			if !ok {
				return "", fmt.Errorf("hook %s: argument %q names a param the call does not have", op, a)
			}
			filled[i] = fmt.Sprint(f)
		}
		extra := s.serveEnv()
		if extra == nil {
			extra = map[string]string{}
		}
		extra[s.Set.Layout.WithDefaults().HomeVar] = t.Home
		for k, v := range env {
			f, _ := placeholder.Value(v, vars)
			if f != nil {
				extra[k] = fmt.Sprint(f)
			}
		}
		return s.RunCommand(ctx, "hook "+op, filled, extra)
	}
}

// DialOptions are the options every connection of this sandbox's target
// takes: its dialect, with hooks run by HookRunner.
func (s *Sandbox) DialOptions() []DialOption {
	return []DialOption{WithDialect(s.Target.Dialect, s.HookRunner())}
}

// hookReply is a hook's reply: its last stdout line when that is a JSON
// object, else {"output": line}.
func hookReply(out string) []byte {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if strings.HasPrefix(last, "{") && json.Valid([]byte(last)) {
		return []byte(last)
	}
	b, _ := json.Marshal(map[string]string{"output": last})
	return b
}
