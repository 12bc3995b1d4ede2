package harness

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
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
	// LaunchAgent is what {agent} is in a method's params for a call that
	// names no profile (the launch profile): a server whose session keys
	// must name the agent ("agent:{agent}:{unique}"). Default "main".
	LaunchAgent string `yaml:"launch_agent"`
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

// wireParams are the params of a call with logical params p: the
// spec's Params filled from p, or p itself when it maps none.
func (m MethodSpec) wireParams(p map[string]any, launchAgent string) any {
	if m.Params == nil {
		return p
	}
	vars := make(map[string]any, len(p)+2)
	for k, v := range p {
		vars[k] = v
	}
	// {unique}: a value of this call's own (an idempotency key); {agent}:
	// the profile the call names, or the launch agent.
	vars["unique"] = uniqueValue()
	if prof, _ := p["profile"].(string); prof != "" {
		vars["agent"] = prof
	} else {
		vars["agent"] = cmp.Or(launchAgent, "main")
	}
	v, _ := placeholder.Value(m.Params, vars)
	return v
}

// uniqueValue is a value no other call gets: 16 random hex digits.
func uniqueValue() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	Ready    string `yaml:"ready"`     // the connection is ready (gateway.ready)
	TurnEnd  string `yaml:"turn_end"`  // a turn ended (message.complete)
	Status   string `yaml:"status"`    // field of TurnEnd holding the outcome (status)
	StatusOK string `yaml:"status_ok"` // its value for a completed turn (complete)
	// TurnEndField and TurnEndValues: an event named TurnEnd ends the turn
	// only when its payload's field (a dotted path) holds one of the
	// values ("state": "final"); with another value it is part of the
	// turn (a delta). Unset: every TurnEnd event ends it.
	TurnEndField  string   `yaml:"turn_end_field"`
	TurnEndValues []string `yaml:"turn_end_values"`
	Error         string   `yaml:"error"`      // a turn failed (error)
	ToolArgs      string   `yaml:"tool_args"`  // the event carrying a tool call's arguments (tool.start)
	ArgsField     string   `yaml:"args_field"` // its field holding them (args); a dotted path reaches below the top level
	ToolField     string   `yaml:"tool_field"` // its field naming the tool (name); a dotted path too
	NoReadyEvt    bool     `yaml:"no_ready"`   // the server sends no ready event: a connection is ready once open
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

func (d *Dialect) validate() []error {
	var errs []error
	for _, op := range slices.Sorted(maps.Keys(d.Methods)) {
		m := d.Methods[op]
		if !slices.Contains(LogicalOps, op) {
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
	if err := placeholder.Config.Check(d.Config); err != nil {
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
	if ev := d.Events; (ev.TurnEndField == "") != (len(ev.TurnEndValues) == 0) {
		errs = append(errs, errors.New("dialect.events: give turn_end_field and turn_end_values together"))
	} else if ev.TurnEndField != "" && ev.TurnEndField == ev.Status && ev.StatusOK != "" && !slices.Contains(ev.TurnEndValues, ev.StatusOK) {
		errs = append(errs, fmt.Errorf("dialect.events: status %q is the turn-end field, so status_ok %q must be one of turn_end_values %v", ev.Status, ev.StatusOK, ev.TurnEndValues))
	}
	if h := d.Health; h != nil {
		if !strings.HasPrefix(h.Path, "/") {
			errs = append(errs, fmt.Errorf("dialect.health.path %q: want an absolute path like /api/health", h.Path))
		}
		if h.Auth == "" {
			// On a copy: copies of a Target share the block, and each
			// scenario validates its own at once (NewSandbox).
			hh := *h
			hh.Auth = "none"
			d.Health = &hh
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

// UnsupportedError is a logical operation the target declared it cannot do.
type UnsupportedError struct {
	Op     string
	Reason string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s is unsupported by the target: %s", e.Op, e.Reason)
}
