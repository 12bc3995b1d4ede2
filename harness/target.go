package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/harness/remote"
	"github.com/tenantcanary/tenantcanary/harness/stores"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Backend names one way the harness drives a target.
type Backend string

const (
	BackendStdio   Backend = "stdio"   // a JSON-RPC process per run on stdin/stdout
	BackendServe   Backend = "serve"   // one pooled websocket server
	BackendGateway Backend = "gateway" // the OpenAI-compatible HTTP gateway
)

// Target says how to run and reach a server under test. Argv templates may
// hold {host} and {port}; {cron_interval} is the serve backend's tick.
type Target struct {
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
	// Kind is agent (the default: a tenant-server) or gateway (a
	// multi-tenant LLM gateway: only the gateway command and the
	// llm_gateway block apply).
	Kind string `yaml:"kind"`

	Layout tenants.Layout `yaml:"layout"`

	Stdio       []string `yaml:"stdio"`        // e.g. [agentd, tui]
	Serve       []string `yaml:"serve"`        // e.g. [agentd, serve, --host, "{host}", --port, "0", --cron]
	Gateway     []string `yaml:"gateway"`      // e.g. [agentd, gateway, --host, "{host}", --port, "0"]
	ProfileRoot []string `yaml:"profile_root"` // prints where named profiles resolve; checked before any write
	CronTick    []string `yaml:"cron_tick"`    // fires due cron jobs of every profile once
	// Preflight, when set, runs once before the catalog, with the
	// environment of every target process; a non-zero exit says the target
	// cannot be certified on this machine (the embedded agentd's is
	// `agentd sandbox check`: no tool sandbox works here) and stops the run
	// with its output, exit 2.
	Preflight []string `yaml:"preflight"`

	ReadyLine string `yaml:"ready_line"` // regexp with groups (host, port) on a serve/gateway stdout
	// ReadyTimeout is how long a started backend has to print its ready
	// line (and answer its health check); default DefaultReadyTimeout, or
	// 90s for a gateway target (which may migrate a database first).
	ReadyTimeout Duration          `yaml:"ready_timeout"`
	TokenVar     string            `yaml:"token_var"` // the variable that hands the serve backend its token
	Env          map[string]string `yaml:"env"`       // extra variables for every target process; {root} is the sandbox root

	// EscapeGrace is how long the processes that an event ends (a
	// session's close, a profile's deletion, a plugin host's death, the
	// server's stop) may take to go once the target has answered (or
	// exited): each one still there then is a process_escape finding.
	// Default DefaultEscapeGrace, room for a target that ends them after it
	// answers; the embedded agentd answers and exits only once they are
	// gone, so its grace is the kernel's reaping on a busy machine.
	EscapeGrace Duration `yaml:"escape_grace"`

	// TurnTimeout is how long one turn may take, end to end; CallTimeout
	// how long one other call (an RPC method, a route, a listing);
	// StopGrace how long the server has from SIGTERM to exit before it is
	// killed. Each defaults to DefaultTurnTimeout, DefaultCallTimeout and
	// DefaultStopGrace, scaled up by a --timeout longer than
	// ReferenceScenarioTimeout (see TimesFor); the certificate reports the
	// values a run used.
	TurnTimeout Duration `yaml:"turn_timeout"`
	CallTimeout Duration `yaml:"call_timeout"`
	StopGrace   Duration `yaml:"stop_grace"`

	// ManagedDir is the target's managed (operator) scope folder, inside the
	// sandbox ({root}/...); Managed, when set, is written there as
	// config.yaml before any target process starts ({root} in its values is
	// the sandbox root): the operator's settings a run pins (the tenants'
	// workdir roots, a weakened target for a positive control, say).
	ManagedDir string         `yaml:"managed_dir"`
	Managed    map[string]any `yaml:"managed"`

	// A running server (staging): URL of its serve backend and its token.
	// The harness starts nothing of the target then.
	URL   string `yaml:"url"`
	Token string `yaml:"token"`
	// GatewayURL is a running gateway's base URL (staging).
	GatewayURL string `yaml:"gateway_url"`
	// Files says whether the harness can read and write the target's homes
	// (false for a remote staging server without remote: files: file
	// checks are skipped, with that reason).
	Files bool `yaml:"files"`
	// Reach is how the harness reaches a running server's host through
	// the operator's own commands (harness/remote): its files, its stop
	// and start, its processes, its plugin reload.
	Reach *remote.Spec `yaml:"remote"`
	// TenantsFile is the roster `canary-run fakellm` wrote for a staging
	// run: the tenants the staging server was provisioned with, whose
	// providers run in that process. Journal overrides the roster's
	// journal path.
	TenantsFile string `yaml:"tenants_file"`
	Journal     string `yaml:"journal"`
	// TenantCredentials says the serve backend takes a tenant credential
	// (the tenant's API server key) as a connection token and binds that
	// connection to the tenant's profile. The harness then dials every
	// tenant with its own credential and the operator token only for
	// operator work (creating and deleting profiles); without it every
	// connection holds the operator's token, and the probes that address
	// another tenant's profile are skipped with that reason.
	TenantCredentials bool `yaml:"tenant_credentials"`
	// Secrets are operator secrets the target holds beyond its token
	// (values of its managed scope, say): canaries owned by "operator",
	// which no tenant-visible place may carry.
	Secrets []string `yaml:"secrets"`
	// ManagedConfig is the operator (managed) scope's YAML file ({root} is
	// the sandbox root): the harness plants an operator-only key there with
	// a canary value owned by "operator". Empty: none planted.
	ManagedConfig string `yaml:"managed_config"`

	// Dialect is how the server's protocol differs from DESIGN.md's
	// (harness/dialect.go); empty for agentd.
	Dialect Dialect `yaml:"dialect"`

	// LLMGateway is how the gateway's tenants are reached, provisioned,
	// probed and stored (harness/gwtarget.go).
	LLMGateway *LLMGateway `yaml:"llm_gateway"`
	// KnownFindings is a file (YAML, relative to the target file) of
	// findings the target's owner accepted, each with a reason and an
	// expiry date (certificate.KnownFinding): reported as accepted,
	// never as passed.
	KnownFindings string `yaml:"known_findings"`

	// ProbePlugin is the target's probe plugin, in its own plugin format
	// (harness/probeplugin.go, docs/probe-plugin.md); nil is the embedded
	// agentd's, for a target that loads agentd's plugins.
	ProbePlugin *ProbePlugin `yaml:"probe_plugin"`
	// ServerFiles are globs, relative to the launch profile's home (or
	// "{root}/..." anywhere in the sandbox: a state root's database), of
	// files and folders that belong to the server rather than to any
	// tenant (its logs, locks, shared caches): a write there is no
	// write_scope finding; they are still scanned, and a tenant's secret
	// there is a shared_place finding.
	ServerFiles []string `yaml:"server_files"`

	// SharedConfig is one operator config file the target reads for every
	// tenant, a templated section per tenant (harness/sharedconfig.go);
	// nil: each tenant's settings are in its own home.
	SharedConfig *SharedConfig `yaml:"shared_config"`
	// ToolEnv is where a tenant's tools get its variables from: dotenv
	// (its home's .env, the default), shared_config (its section's {env})
	// or none.
	ToolEnv string `yaml:"tool_env"`

	// Stores are the shared stores the target's server uses (Redis,
	// PostgreSQL; harness/stores): started by the harness for a local run
	// (and stopped at its end) or reached by URL, handed to the target's
	// processes as {redis_url}, {postgres_url} (or {<name>_url}) in its
	// command lines and env values, and scanned, owner-aware, after every
	// phase.
	Stores []stores.Spec `yaml:"stores"`
	// Replicas is how many server processes the harness starts on one set
	// of homes and stores when a scenario asks for them (1..MaxReplicas;
	// 0 is 1): a cluster behind a load balancer, each tenant's
	// connections spread over them. The replicated command is serve, or,
	// for a target with no serve command, the gateway (a gateway's nodes:
	// the first is the one its provisioner talks to). Each process's
	// command and env values get its number (1..N) as {replica}.
	Replicas int `yaml:"replicas"`
	// ReplicaURLs are a running server's other replicas (url is the
	// first), each reached directly with the same token: a staging
	// cluster behind a load balancer, whose replicas the replicas scenario
	// spreads each tenant over. Its homes and stores are the first's.
	ReplicaURLs []string `yaml:"replica_urls"`
	// Unsupported names backends the target does not offer, each with the
	// reason ("gateway": "one profile per process"): a scenario that needs
	// one is skipped with that reason, not a generic one. A backend named
	// here must have no command.
	Unsupported map[Backend]string `yaml:"unsupported"`

	readyRE *regexp.Regexp
}

// DefaultReadyLine is agentd's line once bound.
const DefaultReadyLine = `backend listening on (\S+):(\d+)`

// DefaultReadyTimeout is how long a started backend has to get ready when
// the target file gives no ready_timeout.
const DefaultReadyTimeout = 60 * time.Second

// ReadyWithin is how long a started backend has to get ready: the target's
// ready_timeout, else def.
func (t *Target) ReadyWithin(def time.Duration) time.Duration {
	if t.ReadyTimeout > 0 {
		return time.Duration(t.ReadyTimeout)
	}
	return def
}

// The defaults of the times a target file may set.
const (
	DefaultTurnTimeout = 90 * time.Second
	DefaultCallTimeout = 60 * time.Second
	DefaultStopGrace   = 20 * time.Second
	// ReferenceScenarioTimeout is the scenario timeout the defaults are
	// made for: a --timeout k times longer scales each default k times.
	ReferenceScenarioTimeout = 5 * time.Minute
)

// Times are how long the harness waits on the target in a run: what the
// target file set, else the defaults scaled by the run's --timeout.
type Times struct {
	Turn  time.Duration `json:"turn_ns"`
	Call  time.Duration `json:"call_ns"`
	Stop  time.Duration `json:"stop_grace_ns"`
	Ready time.Duration `json:"ready_ns"`
	// Scale is the factor a --timeout longer than ReferenceScenarioTimeout
	// put on the defaults (1 when none did).
	Scale float64 `json:"scale"`
	// FromTarget names the times the target file set itself.
	FromTarget []string `json:"from_target,omitempty"`
}

// TimesFor are t's times in a run whose scenario timeout is timeout (0:
// each scenario's own): a value the target file gives stands; a default
// is scaled by timeout/ReferenceScenarioTimeout when that is over 1.
func (t *Target) TimesFor(timeout time.Duration) Times {
	tm := Times{Scale: 1}
	if timeout > ReferenceScenarioTimeout {
		tm.Scale = float64(timeout) / float64(ReferenceScenarioTimeout)
	}
	pick := func(name string, set Duration, def time.Duration) time.Duration {
		if set > 0 {
			tm.FromTarget = append(tm.FromTarget, name)
			return time.Duration(set)
		}
		return time.Duration(float64(def) * tm.Scale)
	}
	readyDef := DefaultReadyTimeout
	if t.IsGateway() {
		readyDef = 90 * time.Second
	}
	tm.Turn = pick("turn_timeout", t.TurnTimeout, DefaultTurnTimeout)
	tm.Call = pick("call_timeout", t.CallTimeout, DefaultCallTimeout)
	tm.Stop = pick("stop_grace", t.StopGrace, DefaultStopGrace)
	tm.Ready = pick("ready_timeout", t.ReadyTimeout, readyDef)
	return tm
}

// DefaultEscapeGrace is the escape grace of a target file that gives no
// escape_grace.
const DefaultEscapeGrace = 15 * time.Second

// AgentdEscapeGrace is the embedded agentd's escape grace: it answers
// session.close and profiles.delete, and exits, only once every process of
// theirs is gone, and a plugin host's keeper kills what a dead host left
// at once; what is left to wait for is the kernel's reaping.
const AgentdEscapeGrace = 3 * time.Second

// EscapeWithin is how long the processes an event ends may take to go: the
// target's escape_grace, else DefaultEscapeGrace.
func (t *Target) EscapeWithin() time.Duration {
	if t.EscapeGrace > 0 {
		return time.Duration(t.EscapeGrace)
	}
	return DefaultEscapeGrace
}

// Duration is a time.Duration written in a target file as Go writes one
// ("90s", "2m30s").
type Duration time.Duration

// UnmarshalYAML reads "90s"; a bare number is refused (seconds or
// nanoseconds would be a guess).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration (want e.g. 90s or 2m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// TargetDirPlaceholder stands, in every string of a target file, for the
// folder the file is in: paths written relative to the file.
const TargetDirPlaceholder = "{target_dir}"

// AgentdTarget is the embedded target: agentd run as argv0 with the
// arguments in prefix first (its own binary alone, or a program that
// re-executes itself as agentd: certify.Command("agentd") split into
// argv0 and prefix, as canary-run does).
func AgentdTarget(argv0 string, prefix ...string) Target {
	cmd := func(args ...string) []string {
		return append(append([]string{argv0}, prefix...), args...)
	}
	t := Target{
		Name:        "agentd",
		Layout:      tenants.AgentdLayout(),
		Stdio:       cmd("tui"),
		Serve:       cmd("serve", "--host", "{host}", "--port", "0", "--cron", "--cron-interval", "{cron_interval}"),
		Gateway:     cmd("gateway", "--host", "{host}", "--port", "0"),
		ProfileRoot: cmd("profile", "root"),
		CronTick:    cmd("cron", "tick"),
		Preflight:   cmd("sandbox", "check"),
		ReadyLine:   DefaultReadyLine,
		EscapeGrace: Duration(AgentdEscapeGrace),
		TokenVar:    "AGENTD_SESSION_TOKEN",
		Env:         map[string]string{"AGENTD_MANAGED_DIR": "{root}/managed"},
		ManagedDir:  "{root}/managed",
		// The operator's places for the tenants' workdirs: each tenant's lie
		// in <work root>/<its profile> (tenants.Tenant.Profile), and agentd
		// refuses a cwd outside a profile's home and its roots.
		Managed: map[string]any{"terminal": map[string]any{"workdir_roots": []any{"{root}/work/{profile}"}}},
		Files:   true,

		TenantCredentials: true,
		ManagedConfig:     "{root}/managed/config.yaml",
		LLMGateway:        &LLMGateway{Access: &AgentdAccess, Routes: AgentdRoutes()},
	}
	t.readyRE = regexp.MustCompile(t.ReadyLine)
	return t
}

// LoadTarget reads a target file (YAML with the fields of Target) and
// validates it. Unknown fields are errors, so a typo cannot silently drop a
// setting. A file may start from another with extends: PATH (relative to
// its folder): its mappings merge into the other's key by key, its other
// values replace the other's, and a key set to null removes it.
func LoadTarget(path string) (Target, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Target{}, fmt.Errorf("load target: %w", err)
	}
	data, err = resolveTargetFile(path, data, nil)
	if err != nil {
		return Target{}, fmt.Errorf("load target %s: %w", path, err)
	}
	var t Target
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return Target{}, fmt.Errorf("load target %s: %w", path, err)
	}
	if t.KnownFindings != "" && !filepath.IsAbs(t.KnownFindings) {
		t.KnownFindings = filepath.Join(filepath.Dir(path), t.KnownFindings)
	}
	if err := t.Validate(); err != nil {
		return Target{}, fmt.Errorf("load target %s: %w", path, err)
	}
	return t, nil
}

// withTargetDir fills {target_dir} in every string value of a target
// file's YAML with dir. It works on the parsed document, not the text, so
// a folder whose name YAML would read otherwise (a colon, a quote) stays
// one string.
func withTargetDir(data []byte, dir string) ([]byte, error) {
	if !bytes.Contains(data, []byte(TargetDirPlaceholder)) {
		return data, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var fill func(n *yaml.Node)
	fill = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, TargetDirPlaceholder) {
			n.Value = placeholder.String(n.Value, map[string]string{"target_dir": dir})
			n.Style = yaml.DoubleQuotedStyle
		}
		for _, c := range n.Content {
			fill(c)
		}
	}
	fill(&doc)
	return yaml.Marshal(&doc)
}

// ServerFilesIn are ServerFiles with {root} filled with root.
func (t *Target) ServerFilesIn(root string) []string {
	out := make([]string, len(t.ServerFiles))
	for i, g := range t.ServerFiles {
		out[i] = strings.ReplaceAll(g, "{root}", root)
	}
	return out
}

// takesPort reports whether a command takes the port the harness picks.
func takesPort(argv []string) bool {
	return slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "{port}") })
}

// Validate checks that the target can be driven: a name, a way to reach at
// least one backend, a ready line that compiles with a port group, and a
// layout.
func (t *Target) Validate() error {
	var errs []error
	if t.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	if len(t.Stdio) == 0 && len(t.Serve) == 0 && t.URL == "" && len(t.Gateway) == 0 && t.GatewayURL == "" && !t.IsGateway() {
		errs = append(errs, errors.New("no backend: give stdio, serve, gateway, url or gateway_url"))
	}
	if t.URL != "" && len(t.Serve) > 0 {
		errs = append(errs, errors.New("both url (a running server) and serve (start one) are set"))
	}
	if t.ReadyLine == "" && !t.IsGateway() {
		t.ReadyLine = DefaultReadyLine
	}
	re, err := regexp.Compile(t.ReadyLine)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("ready_line: %w", err))
	case t.IsGateway():
		// The harness picks the gateway's port ({port}): the line needs no group.
		t.readyRE = re
	case re.NumSubexp() < 1 && !takesPort(t.Serve) && !takesPort(t.Gateway):
		errs = append(errs, fmt.Errorf("ready_line %q: want a port group (and a host group before it, or groups named host and port), or give the port to the command as {port}", t.ReadyLine))
	default:
		t.readyRE = re
	}
	if (len(t.Serve) > 0 || t.URL != "") && t.TokenVar == "" && t.Token == "" {
		errs = append(errs, errors.New("serve backend without token_var (or token for a running server)"))
	}
	if t.URL != "" && t.TenantsFile == "" && !t.Reach.OwnTenants() {
		errs = append(errs, errors.New("url (a running server) needs tenants_file: the roster `canary-run fakellm` wrote for the tenants it was provisioned with (or remote: home, pull, push and workdirs, for the harness to plant tenants of its own)"))
	}
	errs = append(errs, t.validateRemote()...)
	if t.Files && len(t.ProfileRoot) == 0 && t.URL == "" && !t.IsGateway() {
		errs = append(errs, errors.New("files: true needs profile_root, the command that proves the profiles resolve inside the sandbox"))
	}
	if t.Managed != nil && !strings.HasPrefix(t.ManagedDir, "{root}/") {
		errs = append(errs, fmt.Errorf("managed needs managed_dir inside the sandbox ({root}/...), not %q", t.ManagedDir))
	}
	for _, argv := range [][]string{t.Stdio, t.Serve, t.Gateway, t.ProfileRoot, t.CronTick, t.Preflight} {
		for _, a := range argv {
			if err := placeholder.Argv.Check(a); err != nil {
				errs = append(errs, fmt.Errorf("argument %q: %w", a, err))
			}
		}
	}
	errs = append(errs, t.Dialect.validate()...)
	errs = append(errs, t.ProbePlugin.validate()...)
	if t.ProbePlugin != nil && t.Dialect.Unsupported("plugins.install") != "" {
		errs = append(errs, errors.New("probe_plugin is given and dialect.methods.plugins.install is unsupported: drop one"))
	}
	for _, g := range t.ServerFiles {
		rel := strings.TrimPrefix(g, "{root}/")
		if _, err := filepath.Match(rel, ""); err != nil || rel == "" || filepath.IsAbs(rel) || strings.HasPrefix(filepath.Clean(rel), "..") {
			errs = append(errs, fmt.Errorf("server_files: %q is not a glob inside the launch home, nor one inside the sandbox ({root}/...)", g))
		}
	}
	errs = append(errs, t.validateStores()...)
	errs = append(errs, t.validateReplicas()...)
	errs = append(errs, t.validateUnsupported()...)
	errs = append(errs, t.validateGateway()...)
	errs = append(errs, t.validateShared()...)
	t.Layout = t.Layout.WithDefaults()
	return errors.Join(errs...)
}

// Expand fills the placeholders of an argv template (its vocabulary:
// placeholder.Argv); one vars lacks stays as written.
func Expand(argv []string, vars map[string]string) []string {
	return placeholder.Strings(argv, vars)
}

// ReadyRE is the compiled ready line.
func (t *Target) ReadyRE() *regexp.Regexp {
	if t.readyRE == nil {
		t.readyRE = regexp.MustCompile(DefaultReadyLine)
	}
	return t.readyRE
}

// Remote reports whether the target is a running server the harness did not
// start.
func (t *Target) Remote() bool { return t.URL != "" || t.GatewayURL != "" }

// Supports reports whether the harness can drive backend b on this target,
// and if not, why.
func (t *Target) Supports(b Backend) (bool, string) {
	if why := t.Unsupported[b]; why != "" {
		return false, fmt.Sprintf("the target does not offer the %s backend: %s", b, why)
	}
	switch b {
	case BackendStdio:
		if len(t.Stdio) == 0 {
			return false, "the target gives no stdio command"
		}
		if t.Remote() {
			return false, "a stdio backend runs beside the harness, and the target is a running remote server"
		}
	case BackendServe:
		if len(t.Serve) == 0 && t.URL == "" {
			return false, "the target gives neither a serve command nor a url"
		}
	case BackendGateway:
		if len(t.Gateway) == 0 && t.GatewayURL == "" {
			return false, "the target gives neither a gateway command nor a gateway_url"
		}
	default:
		return false, fmt.Sprintf("unknown backend %q", b)
	}
	return true, ""
}

func (t *Target) validateUnsupported() []error {
	var errs []error
	commands := map[Backend]bool{BackendStdio: len(t.Stdio) > 0, BackendServe: len(t.Serve) > 0 || t.URL != "", BackendGateway: len(t.Gateway) > 0 || t.GatewayURL != ""}
	keys := make([]Backend, 0, len(t.Unsupported))
	for b := range t.Unsupported {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	for _, b := range keys {
		has, known := commands[b]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("unsupported.%s: no such backend (want stdio, serve or gateway)", b))
		case strings.TrimSpace(t.Unsupported[b]) == "":
			errs = append(errs, fmt.Errorf("unsupported.%s: give the reason the target does not offer it", b))
		case has:
			errs = append(errs, fmt.Errorf("unsupported.%s: the target also gives the %s backend a command or url", b, b))
		}
	}
	return errs
}

// CanRestart reports whether the harness starts (and so can restart) the
// serve backend.
func (t *Target) CanRestart() bool { return len(t.Serve) > 0 && t.URL == "" }

// ManagedFor is t's managed scope for a sandbox at root: every string
// value with {root} replaced by root.
func (t Target) ManagedFor(root string) map[string]any {
	m, _ := expandRoot(t.Managed, root).(map[string]any)
	return m
}

// fillRoot fills s's {root} (placeholder.Root) with the sandbox's root.
func fillRoot(s, root string) string {
	return placeholder.String(s, map[string]string{"root": root})
}

func expandRoot(v any, root string) any {
	switch x := v.(type) {
	case string:
		return fillRoot(x, root)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = expandRoot(e, root)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = expandRoot(e, root)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = expandRoot(e, root)
		}
		return out
	}
	return v
}

// WithManaged returns a copy of t whose managed scope is cfg (written as
// config.yaml in ManagedDir when a sandbox is built).
func (t Target) WithManaged(cfg map[string]any) Target {
	out := t
	out.Managed = tenants.DeepMerge(t.Managed, cfg)
	return out
}

// validateStores checks the stores: block, that a running target's stores
// are running too (given by URL), and that every {<name>_url} a command
// line or env value names is a declared store's.
func (t *Target) validateStores() []error {
	var errs []error
	if err := stores.Validate(t.Stores); err != nil {
		errs = append(errs, err)
	}
	declared := map[string]bool{}
	for i, sp := range t.Stores {
		declared[sp.Placeholder()] = true
		if sp.URL == "" && t.Remote() {
			errs = append(errs, fmt.Errorf("stores[%d].url: empty, and the target is a running server (url or gateway_url): give the URL of the store it uses", i))
		}
	}
	seen := map[string]bool{}
	check := func(where, s string) {
		for _, n := range placeholder.Names(s) {
			if strings.HasSuffix(n, "_url") && !declared[n] && !seen[n] {
				seen[n] = true
				errs = append(errs, fmt.Errorf("%s: {%s} names no store of stores: (declared: %s)", where, n, storeNames(t.Stores)))
			}
		}
	}
	for _, argv := range [][]string{t.Stdio, t.Serve, t.Gateway, t.ProfileRoot, t.CronTick, t.Preflight} {
		for _, a := range argv {
			check(fmt.Sprintf("argument %q", a), a)
		}
	}
	keys := make([]string, 0, len(t.Env))
	for k := range t.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		check("env."+k, t.Env[k])
	}
	return errs
}

// MaxReplicas is the most server processes a target file may ask for.
const MaxReplicas = 8

// ReplicaCount is how many server processes make the target's cluster:
// its replicas, or a running server's url and replica_urls; 1 when it
// gives none.
func (t *Target) ReplicaCount() int {
	if t.URL != "" && len(t.ReplicaURLs) > 0 {
		return 1 + len(t.ReplicaURLs)
	}
	return max(t.Replicas, 1)
}

// ReplicaHealthy waits, within ctx, until a running server's replica n
// answers its health URL (remote.health, else /api/health) and the
// dialect's health check.
func (t *Target) ReplicaHealthy(ctx context.Context, n int) error {
	base := t.ReplicaURL(n)
	if err := remote.WaitHealth(ctx, t.Reach.HealthURL(base), true); err != nil {
		return fmt.Errorf("replica %d (%s): %w", n, base, err)
	}
	if err := t.WaitHealthy(ctx, base, t.Token); err != nil {
		return fmt.Errorf("replica %d (%s): %w", n, base, err)
	}
	return nil
}

// ReplicaURL is the base URL of a running server's replica n (1-based:
// 1 is url).
func (t *Target) ReplicaURL(n int) string {
	if n <= 1 {
		return t.URL
	}
	return t.ReplicaURLs[n-2]
}

// ReplicatesGateway reports whether the target's replicas are gateway
// nodes: it runs several (replicas: N) and has a gateway command but no
// serve command.
func (t *Target) ReplicatesGateway() bool {
	return t.ReplicaCount() > 1 && len(t.Serve) == 0 && len(t.Gateway) > 0
}

func (t *Target) validateReplicas() []error {
	var errs []error
	if t.Replicas < 0 || t.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("replicas: %d: want 1 to %d", t.Replicas, MaxReplicas))
	}
	if t.Replicas > 1 && len(t.Serve) == 0 && len(t.Gateway) == 0 {
		errs = append(errs, fmt.Errorf("replicas: %d needs serve or gateway: the harness starts the replicas from the serve command, or a gateway's nodes from the gateway command (a running server's replicas are its url and replica_urls)", t.Replicas))
	}
	if len(t.ReplicaURLs) > 0 && t.URL == "" {
		errs = append(errs, errors.New("replica_urls: a running server's other replicas, and the target gives no url (the harness starts its replicas itself: replicas: N)"))
	}
	if len(t.ReplicaURLs) >= MaxReplicas {
		errs = append(errs, fmt.Errorf("replica_urls: %d: want at most %d (with url, %d replicas)", len(t.ReplicaURLs), MaxReplicas-1, MaxReplicas))
	}
	seen := map[string]bool{strings.TrimRight(t.URL, "/"): true}
	for i, raw := range t.ReplicaURLs {
		u, err := url.Parse(raw)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("replica_urls[%d]: %q: want http(s)://HOST:PORT, as url", i, raw))
		case seen[strings.TrimRight(raw, "/")]:
			errs = append(errs, fmt.Errorf("replica_urls[%d]: %q: given twice (or the same as url): every replica is its own process", i, raw))
		}
		seen[strings.TrimRight(raw, "/")] = true
	}
	return errs
}

func storeNames(specs []stores.Spec) string {
	if len(specs) == 0 {
		return "none"
	}
	var out []string
	for _, sp := range specs {
		out = append(out, "{"+sp.Placeholder()+"}")
	}
	return strings.Join(out, " ")
}
