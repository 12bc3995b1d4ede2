package tenants

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/tenantcanary/tenantcanary/fakellm"
)

// Tenant is one profile of the target under test and everything planted for
// it. Its exported fields are fixed once Build returns; the minted canaries
// grow during a run and are guarded, so a Tenant is safe for concurrent use.
type Tenant struct {
	Name     string          // profile name; the launch tenant's is its own name too
	Launch   bool            // this tenant is the launch profile (home at the launch folder)
	Home     string          // the profile's home: config.yaml, .env, state.db, ...
	State    string          // its state folder apart from the home (Layout.StateRoot), or ""
	Workdir  string          // the terminal cwd written into config.yaml
	Tag      string          // 10 random hex digits shared by the tenant's base canaries
	Provider *fakellm.Server // the tenant's own provider; nil when built without providers

	workDir string             // where its workdirs are made: <work root>/<Profile()>
	mkdir   func(string) error // makes a workdir (Options.MakeWorkdir); nil: os.MkdirAll
	remote  *remoteProvider    // the provider in another process (staging), if any

	mu     sync.Mutex
	minted []Canary
	shared []Canary // other tenants' canaries this one declared too (Share)
	serves []string // model names no canary of anyone's that t was provisioned under too (AlsoServes)
}

// Value is the tenant's base canary of kind (minted canaries have their own
// tags: see Minted).
func (t *Tenant) Value(kind Kind) string {
	if kind == Workdir {
		return filepath.Base(t.Workdir)
	}
	return CanaryValue(kind, t.Name, t.Tag)
}

// ProviderKey is the only key the tenant's provider accepts.
func (t *Tenant) ProviderKey() string { return t.Value(ProviderKey) }

// APIServerKey is the key of the tenant's route on an HTTP gateway.
func (t *Tenant) APIServerKey() string { return t.Value(APIServerKey) }

// Model is the tenant's model id.
func (t *Tenant) Model() string { return t.Value(Model) }

// CronMark is the canary that marks the tenant's cron conversations.
func (t *Tenant) CronMark() string { return t.Value(CronPrompt) }

// CronPromptText is the prompt of the tenant's cron job: its cron canary and
// an instruction.
func (t *Tenant) CronPromptText() string { return t.CronMark() + ": run the environment probe" }

// Canaries lists every canary the tenant owns: the base kinds in BaseKinds
// order, then those minted mid-run in minting order.
func (t *Tenant) Canaries() []Canary {
	out := make([]Canary, 0, len(BaseKinds)+4)
	for _, k := range BaseKinds {
		out = append(out, Canary{Owner: t.Name, Kind: k, Value: t.Value(k)})
	}
	t.mu.Lock()
	out = append(out, t.minted...)
	t.mu.Unlock()
	return out
}

// Secrets lists the tenant's credential canaries (Kind.Secret).
func (t *Tenant) Secrets() []Canary {
	var out []Canary
	for _, c := range t.Canaries() {
		if c.Kind.Secret() {
			out = append(out, c)
		}
	}
	return out
}

// Share records c, another tenant's model canary, as a model name t's
// configuration names too: two tenants sharing one model name, where the
// target lets them. In t's places c is then not foreign (a model name both
// declared is no leak when either's request carries it), and a main
// request of t may name it; anywhere else it is still c.Owner's, and
// every other canary of c.Owner (its key, its marker) is foreign to t as
// before. Sharing a canary of t's own, or of a kind other than Model, is
// an error.
func (t *Tenant) Share(c Canary) error {
	if c.Owner == t.Name || c.Kind != Model {
		return fmt.Errorf("share %s's %s with %s: only another tenant's model name can be shared", c.Owner, c.Kind, t.Name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.shared {
		if s.Value == c.Value {
			return nil
		}
	}
	t.shared = append(t.shared, c)
	return nil
}

// Shared lists the canaries t shares with their owners (Share).
func (t *Tenant) Shared() []Canary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Canary(nil), t.shared...)
}

// AlsoServes declares model, a name that is no canary (a model name a
// gateway provisioned every tenant under, gateway-collide's), as a model
// name of t: a main request on t's provider may name it.
func (t *Tenant) AlsoServes(model string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.serves, model) {
		t.serves = append(t.serves, model)
	}
}

// Serves lists the model names t was declared to serve too (AlsoServes).
func (t *Tenant) Serves() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.serves)
}

// Declares reports whether model is a model name of t: its own, one it
// shares (Share), or one it also serves (AlsoServes).
func (t *Tenant) Declares(model string) bool {
	if model == t.Model() || slices.Contains(t.Serves(), model) {
		return true
	}
	for _, c := range t.Shared() {
		if c.Value == model {
			return true
		}
	}
	return false
}

// Minted lists the canaries minted mid-run, in order.
func (t *Tenant) Minted() []Canary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Canary(nil), t.minted...)
}

// Mint creates a new canary of kind for the tenant with a fresh tag and
// records it, so every later scan looks for it.
func (t *Tenant) Mint(kind Kind) (Canary, error) {
	if !kindRE.MatchString(string(kind)) {
		return Canary{}, fmt.Errorf("mint canary for %s: kind %q: want lower-case words joined by '_'", t.Name, kind)
	}
	tag, err := NewTag()
	if err != nil {
		return Canary{}, fmt.Errorf("mint %s canary for %s: %w", kind, t.Name, err)
	}
	c := Canary{Owner: t.Name, Kind: kind, Value: CanaryValue(kind, t.Name, tag)}
	t.mu.Lock()
	t.minted = append(t.minted, c)
	t.mu.Unlock()
	return c, nil
}

// Adopt records value, which the target made for the tenant (a key a
// gateway minted), as the tenant's canary of kind, so every later scan
// looks for it. Adopting a value the tenant already owns is a no-op.
func (t *Tenant) Adopt(kind Kind, value string) (Canary, error) {
	if !kindRE.MatchString(string(kind)) {
		return Canary{}, fmt.Errorf("adopt canary for %s: kind %q: want lower-case words joined by '_'", t.Name, kind)
	}
	c := Canary{Owner: t.Name, Kind: kind, Value: value}
	for _, have := range t.Canaries() {
		if have.Value == value {
			return have, nil
		}
	}
	t.mu.Lock()
	t.minted = append(t.minted, c)
	t.mu.Unlock()
	return c, nil
}

// LaunchProfile is the name the target knows the launch tenant's profile
// by (agentd's launch profile answers to "default").
const LaunchProfile = "default"

// Profile is the name the target knows the tenant's profile by: its name,
// or LaunchProfile for the launch tenant. The tenant's workdirs lie in
// <work root>/<Profile()>/, so a target can allow each profile its own
// folder of workdirs (agentd: terminal.workdir_roots: [<work root>/{profile}]).
func (t *Tenant) Profile() string {
	if t.Launch {
		return LaunchProfile
	}
	return t.Name
}

// MintWorkdir mints a workdir canary and creates the directory it names,
// beside the tenant's first workdir; it returns the directory's path.
func (t *Tenant) MintWorkdir() (string, error) {
	c, err := t.Mint(Workdir)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(t.workDir, c.Value)
	if err := t.makeWorkdir(dir); err != nil {
		return "", fmt.Errorf("create minted workdir for %s: %w", t.Name, err)
	}
	return dir, nil
}

// Workdirs lists the tenant's own working directories: the first one, then
// every minted one. A probe that ran anywhere else ran in a foreign place.
func (t *Tenant) Workdirs() []string {
	out := []string{t.Workdir}
	for _, c := range t.Minted() {
		if c.Kind == Workdir {
			out = append(out, filepath.Join(t.workDir, c.Value))
		}
	}
	return out
}

// HasProvider reports whether the tenant has a provider, here or in another
// process.
func (t *Tenant) HasProvider() bool { return t.Provider != nil || t.remote != nil }

// ProviderURL is the base URL the target must use for the tenant's
// provider.
func (t *Tenant) ProviderURL() string {
	switch {
	case t.Provider != nil:
		return t.Provider.BaseURL
	case t.remote != nil:
		return t.remote.baseURL
	}
	return ""
}

// Requests returns the requests the tenant's provider recorded: from the
// provider itself, or, for a provider in another process, from its
// journal (only the records journaled since this set was built). The
// records of a provider in this process share their bodies and headers
// with it (fakellm.Server.RequestsShared): read them, never change them.
func (t *Tenant) Requests() []fakellm.Record {
	if t.Provider != nil {
		return t.Provider.RequestsShared("")
	}
	if t.remote == nil {
		return nil
	}
	all, _ := t.remote.journal.records()
	var out []fakellm.Record
	seen := 0
	for _, r := range all {
		if r.Server != t.remote.baseURL {
			continue
		}
		if seen++; seen > t.remote.skip {
			out = append(out, r)
		}
	}
	return out
}

// LastRequestSeq is the sequence number of the last request t's provider
// received, and false when none: Requests' last, without a copy of every
// record when the provider is the harness's own.
func (t *Tenant) LastRequestSeq() (int, bool) {
	if t.Provider != nil {
		return t.Provider.LastSeq()
	}
	recs := t.Requests()
	if len(recs) == 0 {
		return 0, false
	}
	return recs[len(recs)-1].Seq, true
}

// RequestsErr is the error of the last read of a remote provider's
// journal, or nil.
func (t *Tenant) RequestsErr() error {
	if t.remote == nil {
		return nil
	}
	t.remote.journal.mu.Lock()
	defer t.remote.journal.mu.Unlock()
	return t.remote.journal.err
}

// makeWorkdir makes one of the tenant's workdirs: here, or where the set's
// Options.MakeWorkdir makes them.
func (t *Tenant) makeWorkdir(dir string) error {
	if t.mkdir != nil {
		return t.mkdir(dir)
	}
	return os.MkdirAll(dir, 0o755)
}
