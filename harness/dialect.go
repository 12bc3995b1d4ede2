package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Dialect is how a server's protocol differs from DESIGN.md's: the logical
// operations the catalog uses mapped to the server's methods (or commands,
// or declared unsupported), which events carry a turn's end and its tool
// arguments, what every tenant's config.yaml needs on top of the base, the
// behaviours where servers legitimately differ, and the name and argument
// of the probe tool. The zero Dialect is the identity map: agentd's.
type Dialect struct {
	// Config is deep-merged into every tenant's config.yaml, each string
	// with the tenant's placeholders filled: {provider_key} {key_env}
	// {base_url} {model} {workdir} {home} {tenant} {root}.
	Config map[string]any `yaml:"config"`
	// Methods maps a logical operation (LogicalOps) to the server's.
	Methods map[string]MethodSpec `yaml:"methods"`
	// Events says which events carry what.
	Events EventMap `yaml:"events"`
	// Behaviours declares where the server legitimately differs.
	Behaviours Behaviours `yaml:"behaviours"`
	// ProbeTool is the tool the default responder calls to run the probe.
	ProbeTool ProbeTool `yaml:"probe_tool"`
	// Health, when set, is polled after the ready line until it answers 200.
	Health *Health `yaml:"health"`
	// Transports are the ways the serve backend is spoken to, the first
	// driving the catalog (transport_spec.go); none is JSON-RPC 2.0.
	Transports []Transport `yaml:"transports"`
}

// LogicalOps are the operations the catalog performs, by their DESIGN.md
// method names. config.set is split by key: config.set.cwd,
// config.set.prompt, config.set.model (a plain config.set entry covers the
// keys without one).
var LogicalOps = []string{
	"session.create", "session.resume", "session.close", "prompt.submit",
	"config.set", "config.set.cwd", "config.set.prompt", "config.set.model",
	"model.save_key", "profiles.create", "profiles.delete", "profiles.list",
	"cron.create", "cron.trigger", "cron.list",
	// plugins.install is a capability, not a call: the target loads the
	// catalog's probe plugin (agentd's format). Only unsupported applies.
	"plugins.install",
}

// Unsupported is why the target cannot do op, or "" when it can.
func (d Dialect) Unsupported(op string) string { return d.Methods[op].Unsupported }

// MethodSpec is what one logical operation becomes. In YAML it is a method
// name, or a mapping with method and params (a template), or hook (a
// command run instead of an RPC), or unsupported (the reason).
type MethodSpec struct {
	Method string `yaml:"method"`
	// Params is the request's params: a string that is exactly "{name}"
	// becomes the logical param name (any type; the key is dropped when
	// the param is absent or empty), other strings have {name}s filled.
	// Nil passes the logical params unchanged.
	Params map[string]any `yaml:"params"`
	// Result maps a logical result field (dotted path) to where the
	// server's reply (or a hook's output) has it.
	Result map[string]string `yaml:"result"`
	// Hook is a command (argv template) run in the addressing tenant's
	// hermetic environment instead of an RPC; HookEnv adds variables.
	// Placeholders: the logical params and the tenant's ({home}, {tenant},
	// {workdir}, ...). Its last stdout line, when a JSON object, is the
	// reply; else the reply is {"output": line}.
	Hook    []string          `yaml:"hook"`
	HookEnv map[string]string `yaml:"hook_env"`
	// Unsupported is why the server cannot do this: the scenarios that
	// need it are skipped with this reason.
	Unsupported string `yaml:"unsupported"`
	// ByProfile, when set, is what the operation becomes when the call
	// addresses a profile rather than a session (a profile param and no
	// session_id): for a server whose RPC takes only a session, a command
	// run in the addressed profile's home, say.
	ByProfile *MethodSpec `yaml:"by_profile"`
}

// forCall is the mapping of a call with logical params p: ByProfile when
// set and p addresses a profile rather than a session.
func (m MethodSpec) forCall(p map[string]any) MethodSpec {
	if m.ByProfile == nil {
		return m
	}
	sid, _ := p["session_id"].(string)
	profile, _ := p["profile"].(string)
	if sid == "" && profile != "" {
		return *m.ByProfile
	}
	return m
}

// UnmarshalYAML takes a bare method name as well as the mapping.
func (m *MethodSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		m.Method = n.Value
		return nil
	}
	type plain MethodSpec
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*m = MethodSpec(p)
	return nil
}

// EventMap names the events a turn is judged by. Every event of another
// type is kept (and scanned) but otherwise ignored.
type EventMap struct {
	Ready      string `yaml:"ready"`      // the connection is ready (gateway.ready)
	TurnEnd    string `yaml:"turn_end"`   // a turn ended (message.complete)
	Status     string `yaml:"status"`     // field of TurnEnd holding the outcome (status)
	StatusOK   string `yaml:"status_ok"`  // its value for a completed turn (complete)
	Error      string `yaml:"error"`      // a turn failed (error)
	ToolArgs   string `yaml:"tool_args"`  // the event carrying a tool call's arguments (tool.start)
	ArgsField  string `yaml:"args_field"` // its field holding them (args)
	ToolField  string `yaml:"tool_field"` // its field naming the tool (name)
	NoReadyEvt bool   `yaml:"no_ready"`   // the server sends no ready event: a connection is ready once open
}

// Behaviour values of Behaviours.UnknownProfile.
const (
	UnknownProfileError    = "error"
	UnknownProfileFallback = "fallback_to_launch"
)

// Behaviours are declared differences, each judged explicitly.
type Behaviours struct {
	// UnknownProfile is what session.create of a profile that does not
	// exist does: "error" (the default) or "fallback_to_launch" (the
	// session is the launch profile's, and is checked as the launch
	// tenant's in every request and frame).
	UnknownProfile string `yaml:"unknown_profile"`
}

// ProbeTool is the tool (and its string argument) that runs a shell
// command on the target: terminal{command} by default.
type ProbeTool struct {
	Name string `yaml:"name"`
	Arg  string `yaml:"arg"`
}

// Health is an HTTP check of a serve backend.
type Health struct {
	Path string `yaml:"path"` // e.g. /api/health
	// Auth is how the token goes along: none, bearer (Authorization
	// header), query (?token=) or a header name.
	Auth string `yaml:"auth"`
}

// WithDefaults fills every empty field with agentd's.
func (d Dialect) WithDefaults() Dialect {
	fill := fillDefault
	e := &d.Events
	fill(&e.Ready, "gateway.ready")
	fill(&e.TurnEnd, "message.complete")
	fill(&e.Status, "status")
	fill(&e.StatusOK, "complete")
	fill(&e.Error, "error")
	fill(&e.ToolArgs, "tool.start")
	fill(&e.ArgsField, "args")
	fill(&e.ToolField, "name")
	fill(&d.Behaviours.UnknownProfile, UnknownProfileError)
	fill(&d.ProbeTool.Name, "terminal")
	fill(&d.ProbeTool.Arg, "command")
	return d
}

// fillDefault sets *s to def when it is empty.
func fillDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

var placeholderRE = regexp.MustCompile(`\{([a-z_]+)\}`)

// configVars are the placeholders of Dialect.Config.
var configVars = []string{"provider_key", "key_env", "base_url", "model", "workdir", "home", "tenant", "root"}

func (d *Dialect) validate() []error {
	var errs []error
	known := map[string]bool{}
	for _, op := range LogicalOps {
		known[op] = true
	}
	names := make([]string, 0, len(d.Methods))
	for op := range d.Methods {
		names = append(names, op)
	}
	sort.Strings(names)
	for _, op := range names {
		m := d.Methods[op]
		if !known[op] {
			errs = append(errs, fmt.Errorf("dialect.methods: unknown operation %q (known: %s)", op, strings.Join(LogicalOps, " ")))
			continue
		}
		errs = append(errs, m.validate("dialect.methods."+op)...)
		if bp := m.ByProfile; bp != nil {
			errs = append(errs, bp.validate("dialect.methods."+op+".by_profile")...)
			if bp.ByProfile != nil {
				errs = append(errs, fmt.Errorf("dialect.methods.%s.by_profile: a by_profile cannot hold another", op))
			}
		}
		if op == "plugins.install" && m.Unsupported == "" {
			errs = append(errs, errors.New("dialect.methods.plugins.install: a capability, give only unsupported"))
		}
	}
	if err := checkPlaceholders(d.Config, configVars); err != nil {
		errs = append(errs, fmt.Errorf("dialect.config: %w", err))
	}
	switch d.Behaviours.UnknownProfile {
	case "", UnknownProfileError, UnknownProfileFallback:
	default:
		errs = append(errs, fmt.Errorf("dialect.behaviours.unknown_profile %q: want %s or %s", d.Behaviours.UnknownProfile, UnknownProfileError, UnknownProfileFallback))
	}
	if (d.ProbeTool.Name == "") != (d.ProbeTool.Arg == "") {
		errs = append(errs, errors.New("dialect.probe_tool: give both name and arg"))
	}
	errs = append(errs, d.validateTransports()...)
	if h := d.Health; h != nil {
		if !strings.HasPrefix(h.Path, "/") {
			errs = append(errs, fmt.Errorf("dialect.health.path %q: want an absolute path like /api/health", h.Path))
		}
		if h.Auth == "" {
			h.Auth = "none"
		}
	}
	return errs
}

// validate checks one mapping, named where in the messages.
func (m MethodSpec) validate(where string) []error {
	var errs []error
	set := 0
	for _, b := range []bool{m.Method != "", len(m.Hook) > 0, m.Unsupported != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		errs = append(errs, fmt.Errorf("%s: give exactly one of method, hook or unsupported", where))
	}
	if len(m.HookEnv) > 0 && len(m.Hook) == 0 {
		errs = append(errs, fmt.Errorf("%s: hook_env without hook", where))
	}
	return errs
}

// checkPlaceholders reports a {name} in any string of v that is not known.
func checkPlaceholders(v any, known []string) error {
	var bad []string
	walkStrings(v, func(s string) {
		for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
			ok := false
			for _, k := range known {
				ok = ok || k == m[1]
			}
			if !ok {
				bad = append(bad, m[0])
			}
		}
	})
	if len(bad) > 0 {
		return fmt.Errorf("unknown placeholder(s) %s (known: {%s})", strings.Join(bad, " "), strings.Join(known, "} {"))
	}
	return nil
}

func walkStrings(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case map[string]any:
		for _, e := range x {
			walkStrings(e, fn)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, fn)
		}
	}
}

// fill returns v with every {name} of vars filled in strings; a string that
// is exactly "{name}" becomes vars[name] itself (any type). keep reports
// whether the value stays: a sole placeholder whose var is absent or empty
// drops its key.
func fill(v any, vars map[string]any) (out any, keep bool) {
	switch x := v.(type) {
	case string:
		if m := placeholderRE.FindStringSubmatch(x); m != nil && m[0] == x {
			got, ok := vars[m[1]]
			if !ok || got == nil || got == "" {
				return nil, false
			}
			return got, true
		}
		return placeholderRE.ReplaceAllStringFunc(x, func(p string) string {
			if got, ok := vars[p[1:len(p)-1]]; ok {
				return fmt.Sprint(got)
			}
			return p
		}), true
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			if f, ok := fill(e, vars); ok {
				m[k] = f
			}
		}
		return m, true
	case []any:
		l := make([]any, 0, len(x))
		for _, e := range x {
			if f, ok := fill(e, vars); ok {
				l = append(l, f)
			}
		}
		return l, true
	}
	return v, true
}

// TenantVars are a tenant's placeholders (config templates and hooks).
func TenantVars(t *tenants.Tenant, layout tenants.Layout, root string) map[string]any {
	layout = layout.WithDefaults()
	return map[string]any{
		"provider_key": t.ProviderKey(), "key_env": layout.KeyEnv, "base_url": t.ProviderURL(),
		"model": t.Model(), "workdir": t.Workdir, "home": t.Home, "tenant": t.Name, "root": root,
	}
}

// TenantConfig is the dialect's config template filled for t.
func (d *Dialect) TenantConfig(t *tenants.Tenant, layout tenants.Layout, root string) map[string]any {
	if len(d.Config) == 0 {
		return nil
	}
	out, _ := fill(d.Config, TenantVars(t, layout, root))
	m, _ := out.(map[string]any)
	return m
}

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
	return s.noteHome(t, extras)
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

// UnsupportedError is a logical operation the target declared it cannot do.
type UnsupportedError struct {
	Op     string
	Reason string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s is unsupported by the target: %s", e.Op, e.Reason)
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
		for k, v := range params {
			vars[k] = v
		}
		filled := make([]string, len(argv))
		for i, a := range argv {
			f, ok := fill(a, vars)
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
			f, _ := fill(v, vars)
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

// spec returns the mapping of logical operation op for params.
func (d *Dialect) spec(op string, params any) (string, MethodSpec, bool) {
	if d == nil || len(d.Methods) == 0 {
		return op, MethodSpec{}, false
	}
	if op == "config.set" {
		if p, ok := params.(map[string]any); ok {
			if key, _ := p["key"].(string); key != "" {
				if m, ok := d.Methods["config.set."+key]; ok {
					return "config.set." + key, m, true
				}
			}
		}
	}
	m, ok := d.Methods[op]
	return op, m, ok
}

// asMap turns logical params into a map (through JSON for a struct).
func asMap(params any) map[string]any {
	if m, ok := params.(map[string]any); ok {
		return m
	}
	out := map[string]any{}
	if params == nil {
		return out
	}
	if b, err := json.Marshal(params); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// mapResult rewrites a server's reply into the logical one: each logical
// path of spec.Result takes the value at its server path; the rest of the
// reply stays.
func mapResult(raw []byte, spec MethodSpec) ([]byte, error) {
	if len(spec.Result) == 0 {
		return raw, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("reply %s is not a JSON object, and the target maps its fields: %w", truncate(string(raw), 200), err)
	}
	logical := make([]string, 0, len(spec.Result))
	for k := range spec.Result {
		logical = append(logical, k)
	}
	sort.Strings(logical)
	for _, l := range logical {
		if v, ok := getPath(m, spec.Result[l]); ok {
			setPath(m, l, v)
		}
	}
	return json.Marshal(m)
}

func getPath(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func setPath(m map[string]any, path string, v any) {
	parts := strings.Split(path, ".")
	for _, part := range parts[:len(parts)-1] {
		next, ok := m[part].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[part] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
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

// ReadyAddr is the host:port a ready line's match names: the groups named
// host and port when the line has them, else group 1 as the port (one
// group) or groups 1 and 2 as host and port; host is given when the line
// names none.
func (t *Target) ReadyAddr(m []string, host string) string {
	re := t.ReadyRE()
	h, p := "", ""
	for i, name := range re.SubexpNames() {
		switch {
		case i >= len(m):
		case name == "host":
			h = m[i]
		case name == "port":
			p = m[i]
		}
	}
	if p == "" {
		switch re.NumSubexp() {
		case 1:
			p = m[1]
		default:
			h, p = m[1], m[2]
		}
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = host
	}
	return net.JoinHostPort(h, p)
}

// WaitHealthy polls the dialect's health check at base with token until it
// answers 200, failing with the last status and body seen. No health check
// returns at once.
func (t *Target) WaitHealthy(ctx context.Context, base, token string) error {
	h := t.Dialect.Health
	if h == nil {
		return nil
	}
	last := "no answer yet"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+h.Path, nil)
		if err != nil {
			return fmt.Errorf("health check %s: %w", h.Path, err)
		}
		switch strings.ToLower(h.Auth) {
		case "", "none":
		case "bearer":
			req.Header.Set("Authorization", "Bearer "+token)
		case "query":
			q := req.URL.Query()
			q.Set("token", token)
			req.URL.RawQuery = q.Encode()
		default:
			req.Header.Set(h.Auth, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else if ctx.Err() == nil || last == "no answer yet" {
			last = err.Error() // (a request the deadline cut keeps the answer before it)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("health check GET %s (auth %s) never answered 200: last %s: %w", h.Path, h.Auth, last, ctx.Err())
		case <-tick.C:
		}
	}
}
