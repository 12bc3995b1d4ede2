package harness

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// Kinds of target. An agent server (the default) is driven over stdio,
// websocket and its gateway; a gateway target is a multi-tenant LLM
// gateway and nothing else: no stdio, no websocket, no tools.
const (
	KindAgent   = "agent"
	KindGateway = "gateway"
)

// LLMGateway is the `llm_gateway:` block of a target file: how the
// harness reaches a multi-tenant LLM gateway's tenants. For `kind:
// gateway` the gateway process is the target's `gateway` command (argv
// template with {port}, a free loopback port the harness picks, and
// {root}, the sandbox root), run with the target's `env`; agentd fills
// this block itself (AgentdTarget) with an Access template instead of a
// provisioner.
//
//	kind: gateway
//	gateway: ["{root}/bin/one-api", "--port", "{port}"]
//	env: {SQLITE_PATH: "{root}/data/one-api.db", ROOT_TOKEN: "root-token-1"}
//	llm_gateway:
//	  ready_path: /api/status
//	  provision: ["{root}/bin/provision"]
//	  routes:
//	    - {name: own token, method: GET, path: "/api/token/{token_id}", read: true, success: '"success":\s*true'}
//	  store:
//	    sqlite: "{root}/data/one-api.db"
//	    places:
//	      - {table: tokens, column: key, owner_column: user_id, owner_id: user}
type LLMGateway struct {
	// ReadyPath, when set, is polled with GET (no credentials) on the
	// gateway's base URL after start until it answers 2xx: the gateway's
	// readiness when it prints no ready line. Without it the target's
	// ready_line is waited for on the gateway's stdout.
	ReadyPath string `yaml:"ready_path"`
	// Provision is the provisioner: a command (argv template: {root},
	// {port}) run once after the gateway is ready and never again (a
	// restart keeps the data folder). Its stdin is the tenants' roster
	// (tenants.Roster JSON: names, tags, providers' base URLs, upstream
	// keys, models); its environment is the target's env plus
	// GATEWAY_URL (http://127.0.0.1:PORT), ROOT (the sandbox root) and
	// ROSTER (the roster's path, the same JSON as stdin). Its stdout is
	// one JSON document, Provisioned. Everything it mints (keys, header
	// values) becomes a canary of its tenant.
	Provision []string `yaml:"provision"`
	// Deprovision offboards one tenant (see Deprovision in
	// gwoffboard.go): run once per step, disable then delete.
	Deprovision []string `yaml:"deprovision"`
	// Access is how a tenant reaches the gateway when there is no
	// provisioner: templates filled with the tenant's values
	// ({api_server_key} {provider_key} {model} {tenant}). agentd's
	// gateway is {key: "{api_server_key}", base_path: "/p/{tenant}/v1",
	// launch_base_path: "/v1", models: ["{model}"]}.
	Access *AccessTemplate `yaml:"access"`
	// ChatPath is the chat completions path under a tenant's base path;
	// default /chat/completions.
	ChatPath string `yaml:"chat_path"`
	// ModelsPath, when set, is the model list under a tenant's base path
	// (GET with the tenant's key, /models for OpenAI's): a per-tenant read
	// API, scanned as a frame to that tenant, which must list the
	// tenant's own model (positive control).
	ModelsPath string `yaml:"models_path"`
	// Routes are the gateway's tenant-facing HTTP routes (management API,
	// logs, tokens): each is called with every tenant's own credentials
	// and identifiers (read routes: scanned as frames to that tenant) and
	// with another tenant's identifiers and their guessed neighbours
	// (route authorization).
	Routes []Route `yaml:"routes"`
	// Store, for a gateway with one data folder, is where each tenant's
	// secrets may rest (the shared-store invariant).
	Store *Store `yaml:"store"`
}

// AgentdAccess is agentd's gateway: the launch profile at /v1, every
// other one at /p/<name>/v1, each behind its API_SERVER_KEY.
var AgentdAccess = AccessTemplate{Key: "{api_server_key}", BasePath: "/p/{tenant}/v1", LaunchBasePath: "/v1", Models: []string{"{model}"}}

// AccessTemplate is a tenant's access, templated (see LLMGateway.Access).
type AccessTemplate struct {
	// Key is the tenant's gateway key, sent as "Authorization: Bearer".
	Key string `yaml:"key"`
	// BasePath is the tenant's route (OpenAI base path), e.g. /p/{tenant}/v1.
	BasePath string `yaml:"base_path"`
	// LaunchBasePath is the launch tenant's route when it differs.
	LaunchBasePath string `yaml:"launch_base_path"`
	// Models are the models the tenant may name; default ["{model}"].
	Models []string `yaml:"models"`
}

// For fills the template with t's values: {api_server_key}
// {provider_key} {model} {tenant}; the launch tenant takes LaunchBasePath
// when one is given.
func (tpl AccessTemplate) For(t *tenants.Tenant) GatewayAccess {
	fill := func(s string) string {
		return strings.NewReplacer("{api_server_key}", t.APIServerKey(), "{provider_key}", t.ProviderKey(),
			"{model}", t.Model(), "{tenant}", t.Name).Replace(s)
	}
	a := GatewayAccess{Key: fill(tpl.Key), BasePath: fill(tpl.BasePath)}
	if t.Launch && tpl.LaunchBasePath != "" {
		a.BasePath = fill(tpl.LaunchBasePath)
	}
	for _, m := range tpl.Models {
		a.Models = append(a.Models, fill(m))
	}
	return a
}

// ChatCompletionsPath is the chat completions path under a tenant's base
// path: chat_path, default /chat/completions.
func (g LLMGateway) ChatCompletionsPath() string {
	if g.ChatPath != "" {
		return g.ChatPath
	}
	return "/chat/completions"
}

// Route is one tenant-facing HTTP route of a gateway.
type Route struct {
	// Name says what the route is, for reports ("own token").
	Name string `yaml:"name"`
	// Method is the HTTP method; default GET.
	Method string `yaml:"method"`
	// Path is a template: {<name>_id} is the identifier the provisioner
	// gave the tenant under ids.<name> ({token_id} is ids.token,
	// {user_id} ids.user, {channel_id} ids.channel, {log_id} ids.log).
	// A route whose identifiers a tenant lacks is not called for it.
	Path string `yaml:"path"`
	// Body is an optional request body (JSON text) with the same
	// placeholders.
	Body string `yaml:"body"`
	// Auth is the single credential form of old: "headers" (the
	// provisioner's headers for the tenant's management API; the default
	// when it gave any) or "key" (Authorization: Bearer <the tenant's
	// gateway key>). A target file's `auth: key` sets it (through Forms).
	Auth string `yaml:"-"`
	// Forms are the credential forms the route is called with (`auth:` in
	// a target file: one name, or a list of names and templates; see
	// AuthForm). Every route is also called with none: an anonymous
	// success, or any tenant's data in an anonymous answer, is an authz
	// finding. Empty: Auth's single form.
	Forms AuthForms `yaml:"auth"`
	// Public marks a route anyone may call (a status page): an anonymous
	// success is then no finding (tenant data in its answer still is).
	Public bool `yaml:"public"`
	// Variants are a read route's query variants, the filters a UI sends
	// ("?type=1", "?keyword={own.user_id}"): the route is called as
	// declared and with each, appended to its path.
	Variants []string `yaml:"variants"`
	// Capture reads values from the owner's answer for later routes:
	// name -> a small JSONPath ($.data.id). A captured value is an id of
	// the tenant that made the call: later routes name it {NAME_id} (the
	// named tenant's) or {own.NAME_id} (the caller's); an id the
	// provisioner gave under the same name wins. Captured ids are never
	// the base of a neighbour guess, and a caller never guesses one of its
	// own. A route with a capture is called by each tenant as its owner
	// (read or not) before the cross-tenant probes.
	Capture map[string]string `yaml:"capture"`
	// Backend is where the route is served: "gateway" (the default: the
	// LLM gateway) or "serve" (an agent server's serve backend, its
	// dashboard and websocket port, which gateway-routes then starts).
	Backend string `yaml:"backend"`
	// Read marks a per-tenant read API: the tenant's own call must
	// succeed (positive control) and its answer is scanned as a frame to
	// that tenant. Routes that change something (PUT, DELETE) are only
	// probed cross-tenant; declare them after the reads.
	Read bool `yaml:"read"`
	// Success is a regexp a 2xx answer's body must match to count as a
	// success, for an API that answers 200 {"success": false} to a
	// refusal; empty: every 2xx is a success.
	Success string `yaml:"success"`
	// URLFields are the route's fields that hold a URL the gateway
	// fetches: a body field (dotted path) or ?name for a query
	// parameter; the fetch probes point them at the harness's listener.
	URLFields []string `yaml:"url_fields"`
	// Then names routes the caller calls next, with its own credentials
	// and ids, after each call of this route that gateway-routes makes
	// (its owner's own call, and each cross-tenant probe): a chain across
	// routes, whose later answers are judged (gwroutes_chain.go). In
	// gateway-fetch they are the routes that make the gateway fetch the
	// URL this route stored (a fetch trigger).
	Then []string `yaml:"then"`
	// CaptureSecrets names captures (keys of Capture) that are
	// credentials (a key the route mints): each captured value becomes a
	// secret canary of the tenant that captured it, and later routes
	// present it as the caller's own ({own.NAME_id} in an auth template).
	CaptureSecrets []string `yaml:"capture_secrets"`
	// Webhook marks a route whose url_fields store a URL the gateway is
	// meant to call later (a webhook, a callback), when a route of Then
	// triggers it: gateway-fetch then expects the fetch of the caller's
	// own URL (a positive control), and finds a fetch made on another
	// tenant's behalf or carrying another tenant's data.
	Webhook bool `yaml:"webhook"`
}

// Store declares where a gateway with one data folder keeps each
// tenant's secrets.
type Store struct {
	// SQLite is the gateway's database (path template: {root}); read
	// row by row from a copy (WAL included).
	SQLite string `yaml:"sqlite"`
	// DataDir is the data folder (path template: {root}); every file
	// in it but the database (and its -wal, -shm, -journal) is scanned:
	// any tenant's secret there is a finding. Empty: the database's
	// folder.
	DataDir string `yaml:"data_dir"`
	// Places are the only table columns a tenant's secret may rest in,
	// each in a row its tenant owns.
	Places []StorePlace `yaml:"places"`
}

// StorePlace is one column where tenants' secrets may rest, and how a
// row names its owner.
type StorePlace struct {
	// Table and Column hold the secret. Without Column the place is
	// owner-only rows: no secret may rest in them, and no other
	// tenant's canary either.
	Table  string `yaml:"table"`
	Column string `yaml:"column"`
	// OwnerColumn is the column of the same row that names its owner.
	OwnerColumn string `yaml:"owner_column"`
	// OwnerID is the provisioner's ids key whose value OwnerColumn holds
	// for the tenant that owns the row (user: ids.user).
	OwnerID string `yaml:"owner_id"`
	// IDColumn and ID, when set, name each row's identifier and the
	// ids key it becomes: after traffic, the harness reads the store and
	// gives each tenant ids.<ID> = the identifier of its latest row here,
	// so routes with {<ID>_id} are probed for rows no provisioner knew.
	IDColumn string `yaml:"id_column"`
	ID       string `yaml:"id"`
}

// Provisioned is a provisioner's stdout:
//
//	{"tenants": {"alpha": {"key": "sk-...", "models": ["model-alpha-..."], "base_path": "/v1",
//	  "headers": {"Authorization": "..."}, "ids": {"user": "3", "token": "7", "channel": "2"}}}}
type Provisioned struct {
	Tenants map[string]GatewayAccess `json:"tenants"`
	// OperatorSecrets are secrets of the operator the provisioner
	// minted (a root token, an admin password), by name: each becomes a
	// canary of the operator, checked like the target's static secrets.
	OperatorSecrets map[string]string `json:"operator_secrets,omitempty"`
}

// GatewayAccess is one tenant's way into the gateway.
type GatewayAccess struct {
	// Key is the gateway key minted for the tenant (Authorization:
	// Bearer); recorded as the tenant's secret canary (kind gateway_key).
	Key string `json:"key"`
	// Models are the models the tenant may name (its own upstream model).
	Models []string `json:"models"`
	// BasePath is the tenant's OpenAI base path on the gateway (/v1).
	BasePath string `json:"base_path"`
	// Headers are extra credentials for the tenant's management API
	// (Authorization of a user session, a user id header); each value is
	// recorded as the tenant's secret canary when long enough to scan.
	Headers map[string]string `json:"headers,omitempty"`
	// IDs are identifiers the tenant owns (user, token, channel, ...):
	// the route placeholders {<name>_id} and the store's owner ids.
	IDs map[string]string `json:"ids,omitempty"`
	// Credentials are the tenant's other credentials (an access token, a
	// session cookie), each a name and the headers that present it: a
	// route's auth form of that name sends them. Each value is recorded
	// as the tenant's secret canary, as Headers' are.
	Credentials map[string]map[string]string `json:"credentials,omitempty"`
}

// IsGateway reports whether t is a multi-tenant LLM gateway target.
func (t *Target) IsGateway() bool { return t.Kind == KindGateway }

// validateGateway checks the kind and the llm_gateway block.
func (t *Target) validateGateway() []error {
	var errs []error
	if t.LLMGateway != nil {
		// Validation fills defaults in the routes: on a copy, since
		// copies of a Target share the block (scenarios run at once).
		c := *t.LLMGateway
		c.Routes = append([]Route(nil), c.Routes...)
		t.LLMGateway = &c
	}
	switch t.Kind {
	case "", KindAgent:
		if t.LLMGateway != nil && t.LLMGateway.Provision != nil {
			errs = append(errs, errors.New("llm_gateway.provision needs kind: gateway"))
		}
		return append(errs, t.LLMGateway.validate()...)
	case KindGateway:
	default:
		return []error{fmt.Errorf("kind %q: want %s or %s", t.Kind, KindAgent, KindGateway)}
	}
	if len(t.Stdio) > 0 || len(t.Serve) > 0 || t.URL != "" {
		errs = append(errs, errors.New("kind: gateway takes no stdio, serve or url: a gateway has no tenant-server protocol"))
	}
	if len(t.Gateway) == 0 && t.GatewayURL == "" {
		errs = append(errs, errors.New("kind: gateway needs gateway (the command, with {port}) or gateway_url"))
	}
	g := t.LLMGateway
	if g == nil {
		return append(errs, errors.New("kind: gateway needs an llm_gateway block (provision, or access)"))
	}
	if len(g.Provision) == 0 && g.Access == nil {
		errs = append(errs, errors.New("llm_gateway: give provision (the command that mints each tenant's key) or access (templates)"))
	}
	if len(t.Gateway) > 0 && !strings.Contains(strings.Join(t.Gateway, " "), "{port}") &&
		(t.readyRE == nil || t.readyRE.NumSubexp() == 0) {
		errs = append(errs, errors.New("llm_gateway: the gateway command has no {port}: the harness must know where it listens (give {port}, or a ready_line whose group is the port)"))
	}
	return append(errs, g.validate()...)
}

func (g *LLMGateway) validate() []error {
	if g == nil {
		return nil
	}
	var errs []error
	if g.ReadyPath != "" && !strings.HasPrefix(g.ReadyPath, "/") {
		errs = append(errs, fmt.Errorf("llm_gateway.ready_path %q: want an absolute path", g.ReadyPath))
	}
	for i := range g.Routes {
		r := &g.Routes[i]
		where := fmt.Sprintf("llm_gateway.routes[%d] (%s)", i, r.Name)
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("llm_gateway.routes[%d]: no name", i))
		}
		// Writes only what changes: a validated target is shared by the
		// scenarios running at once, and each validates it again.
		m := strings.ToUpper(r.Method)
		if m == "" {
			m = "GET"
		}
		if r.Method != m {
			r.Method = m
		}
		if !strings.HasPrefix(r.Path, "/") {
			errs = append(errs, fmt.Errorf("%s: path %q: want an absolute path", where, r.Path))
		}
		for _, ph := range RoutePlaceholders(r.Path + r.Body) {
			if !strings.HasSuffix(ph, "_id") {
				errs = append(errs, fmt.Errorf("%s: placeholder {%s}: want {<name>_id} (an id the provisioner gave)", where, ph))
			}
		}
		switch r.Auth {
		case "", "headers", "key":
		default:
			errs = append(errs, fmt.Errorf("%s: auth %q: want headers or key", where, r.Auth))
		}
		errs = append(errs, r.validateForms(where)...)
		if r.Success != "" {
			if _, err := regexp.Compile(r.Success); err != nil {
				errs = append(errs, fmt.Errorf("%s: success: %w", where, err))
			}
		}
	}
	if s := g.Store; s != nil {
		if s.SQLite == "" {
			errs = append(errs, errors.New("llm_gateway.store: no sqlite path"))
		}
		if len(s.Places) == 0 {
			errs = append(errs, errors.New("llm_gateway.store: no places: where may each tenant's secrets rest?"))
		}
		for i, p := range s.Places {
			if p.Table == "" || p.OwnerColumn == "" || p.OwnerID == "" {
				errs = append(errs, fmt.Errorf("llm_gateway.store.places[%d]: want table, column (none for owner-only rows), owner_column and owner_id", i))
			}
		}
	}
	errs = append(errs, g.validateChains()...)
	return append(errs, g.validateRound2()...)
}

var routePlaceholderRE = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)

// RoutePlaceholders lists the {name}s of a route template, in order.
func RoutePlaceholders(s string) []string {
	var out []string
	for _, m := range routePlaceholderRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Succeeded reports whether an answer with status and body is a success of
// the route (a 2xx, matching Success when set).
func (r *Route) Succeeded(status int, body []byte) bool {
	if status < 200 || status > 299 {
		return false
	}
	if r.Success == "" {
		return true
	}
	re := compiled(r.Success)
	return re != nil && re.Match(body)
}
