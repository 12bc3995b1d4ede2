package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// SharedConfig is one operator config file that a target reads for every
// tenant, with a section per tenant in one place or more (its agents,
// its providers), as gateways keep theirs. The harness writes it before
// the target starts, and again whenever a scenario writes a new profile's
// home or deletes a profile (Sandbox.WriteHome, Sandbox.DropTenant), so a
// server that reloads it on change sees each tenant come and go. It holds
// every tenant's section by design: it is the operator's file, not a
// tenant's place nor a shared place, and is not scanned.
type SharedConfig struct {
	// Path is the file, inside the sandbox ({root}/...), outside every
	// home and the state root.
	Path string `yaml:"path"`
	// Format is yaml or json; default json for a .json path, else yaml.
	Format string `yaml:"format"`
	// Base is the file's content before any section ({root} filled):
	// the operator's own settings.
	Base map[string]any `yaml:"base"`
	// Sections are where each tenant's sections go, in order.
	Sections []SharedSection `yaml:"sections"`
	// Ready says how the harness knows the server took a change of the
	// file (a tenant added or removed while it runs) before it goes on;
	// nil: it goes on at once.
	Ready *SharedReady `yaml:"ready"`
	// Copies are globs ({root}/...) of the server's own copies of the file
	// (backups it keeps as it reloads): every tenant's section is in them
	// by design, as in the file, so they are the operator's too, not
	// shared places.
	Copies []string `yaml:"copies"`
}

// SharedReady is how the server shows it took a new shared config: any
// of a log line it prints (after the write), its health check answering,
// and a command (run as a hook: TARGET_URL and TARGET_TOKEN set) whose
// output names the tenant's profile once it serves it (or no longer does,
// after a removal). Each given one must hold, within the target's call
// timeout.
type SharedReady struct {
	LogLine string   `yaml:"log_line"` // a regexp on the serve backend's output (stdout or stderr)
	Health  bool     `yaml:"health"`   // the dialect's health check answers
	Lists   []string `yaml:"lists"`    // a command printing the profiles the server serves
}

// CopiesIn are the files Copies match now, in the sandbox at root.
func (c *SharedConfig) CopiesIn(root string) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, g := range c.Copies {
		m, _ := filepath.Glob(strings.ReplaceAll(g, "{root}", root))
		out = append(out, m...)
	}
	return out
}

// SharedSection is one section each tenant has in the shared config.
type SharedSection struct {
	// At is the dotted path of the sections in the file (agents,
	// models.providers); the folders on the way are made.
	At string `yaml:"at"`
	// Key, when given, makes At a mapping with one entry per tenant under
	// this key (a template: "{profile}", "t-{tenant}"); without it At is a
	// list, one element per tenant.
	Key string `yaml:"key"`
	// Template is one tenant's section; each string has the tenant's
	// placeholders (SharedConfigVars) filled, and a string that is exactly
	// one placeholder becomes its value itself ({env}: a mapping; {launch}:
	// a boolean).
	Template map[string]any `yaml:"template"`
}

// Tool environment sources (Target.ToolEnv).
const (
	// ToolEnvDotenv: a tenant's tools get the variables of its home's .env
	// (agentd's way; the default).
	ToolEnvDotenv = "dotenv"
	// ToolEnvShared: they get the variables of the tenant's section of
	// the shared config (the section's {env}).
	ToolEnvShared = "shared_config"
	// ToolEnvNone: the target gives its tools no per-tenant environment;
	// the env-marker control has nothing to see and is skipped.
	ToolEnvNone = "none"
)

// SharedConfigVars are the placeholders of a shared config's section
// templates and keys: Dialect.Config's, and the tenant's profile name
// ({profile}: the launch tenant's is tenants.LaunchProfile), its state
// folder ({state}), its gateway key ({api_server_key}), its env marker
// ({env_marker}), its tool environment as a mapping ({env}: the
// variables agentd reads from .env) and whether it is the launch tenant
// ({launch}).
var SharedConfigVars = placeholder.SharedConfig.Names()

// ToolEnvSource is the target's tool environment source: ToolEnv, or
// ToolEnvDotenv when not given.
func (t *Target) ToolEnvSource() string {
	if t.ToolEnv == "" {
		return ToolEnvDotenv
	}
	return t.ToolEnv
}

// validateShared checks the shared config, the tool environment's source
// and the layout's state places, each error naming its field.
func (t *Target) validateShared() []error {
	errs := t.Layout.CheckState()
	switch t.ToolEnv {
	case "", ToolEnvDotenv, ToolEnvNone:
	case ToolEnvShared:
		if !t.SharedConfig.usesEnv() {
			errs = append(errs, errors.New("tool_env: shared_config needs a shared_config section whose template holds {env} (the tenant's tool variables)"))
		}
	default:
		errs = append(errs, fmt.Errorf("tool_env %q: want %s, %s or %s", t.ToolEnv, ToolEnvDotenv, ToolEnvShared, ToolEnvNone))
	}
	sc := t.SharedConfig
	if sc == nil {
		return errs
	}
	if !strings.HasPrefix(sc.Path, "{root}/") || !filepath.IsLocal(strings.TrimPrefix(sc.Path, "{root}/")) {
		errs = append(errs, fmt.Errorf("shared_config.path %q: want a file inside the sandbox ({root}/...)", sc.Path))
	}
	switch sc.Format {
	case "", "yaml", "json":
	default:
		errs = append(errs, fmt.Errorf("shared_config.format %q: want yaml or json", sc.Format))
	}
	if err := placeholder.Root.Check(sc.Base); err != nil {
		errs = append(errs, fmt.Errorf("shared_config.base: %w", err))
	}
	if r := sc.Ready; r != nil {
		if r.LogLine == "" && !r.Health && len(r.Lists) == 0 {
			errs = append(errs, errors.New("shared_config.ready: give log_line, health or lists"))
		}
		if _, err := regexp.Compile(r.LogLine); err != nil {
			errs = append(errs, fmt.Errorf("shared_config.ready.log_line: %w", err))
		}
	}
	for i, g := range sc.Copies {
		rel := strings.TrimPrefix(g, "{root}/")
		if _, err := filepath.Match(rel, ""); err != nil || rel == g || !filepath.IsLocal(rel) {
			errs = append(errs, fmt.Errorf("shared_config.copies[%d] %q: want a glob inside the sandbox ({root}/...)", i, g))
		}
	}
	if len(sc.Sections) == 0 {
		errs = append(errs, errors.New("shared_config.sections: give at least one section (at, template)"))
	}
	for i, sec := range sc.Sections {
		where := fmt.Sprintf("shared_config.sections[%d]", i)
		if sec.At == "" || strings.Contains(sec.At, "..") || strings.HasPrefix(sec.At, ".") || strings.HasSuffix(sec.At, ".") {
			errs = append(errs, fmt.Errorf("%s.at %q: want a dotted path like agents or models.providers", where, sec.At))
		}
		if len(sec.Template) == 0 {
			errs = append(errs, fmt.Errorf("%s.template: empty", where))
		}
		if err := placeholder.SharedConfig.Check(sec.Template); err != nil {
			errs = append(errs, fmt.Errorf("%s.template: %w", where, err))
		}
		if err := placeholder.SharedConfig.Check(sec.Key); err != nil {
			errs = append(errs, fmt.Errorf("%s.key: %w", where, err))
		}
		if sec.Key != "" && len(placeholder.Names(sec.Key)) == 0 {
			errs = append(errs, fmt.Errorf("%s.key %q: want a placeholder in it ({profile}, {tenant}), so each tenant has its own key", where, sec.Key))
		}
	}
	return errs
}

// usesEnv reports whether some section's template holds {env}.
func (sc *SharedConfig) usesEnv() bool {
	if sc == nil {
		return false
	}
	found := false
	for _, sec := range sc.Sections {
		placeholder.WalkStrings(sec.Template, func(s string) { found = found || strings.Contains(s, "{env}") })
	}
	return found
}

// SharedConfigPath is the shared config file of this sandbox, or "" when
// the target declares none.
func (s *Sandbox) SharedConfigPath() string {
	if s.Target.SharedConfig == nil {
		return ""
	}
	return filepath.Clean(fillRoot(s.Target.SharedConfig.Path, s.Root))
}

// sharedState is what the shared config is written from: the tenants
// whose homes are written (and not deleted since), in the order of the
// set, and the extra tool variables each home was written with.
type sharedState struct {
	written map[string]bool
	env     map[string]map[string]string
}

// noteHome records that t's home was written with extras, and rewrites
// the shared config with t's sections.
func (s *Sandbox) noteHome(t *tenants.Tenant, extras tenants.HomeExtras) error {
	if s.Target.SharedConfig == nil {
		return nil
	}
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	if s.shared.written == nil {
		s.shared = sharedState{written: map[string]bool{}, env: map[string]map[string]string{}}
	}
	s.shared.written[t.Name] = true
	if len(extras.Env) > 0 {
		env := map[string]string{}
		for k, v := range extras.Env {
			env[k] = v
		}
		s.shared.env[t.Name] = env
	}
	return s.writeSharedAndWait(t, true)
}

// writeSharedAndWait writes the shared config and, while a serve backend
// is up, waits until it shows it took the change (SharedReady): t served
// (present) or no longer served. The caller holds sharedMu.
func (s *Sandbox) writeSharedAndWait(t *tenants.Tenant, present bool) error {
	r := s.Target.SharedConfig.Ready
	serve := s.serveProc()
	mark := 0
	if serve != nil {
		mark = len(serve.Output())
	}
	if err := s.writeSharedLocked(); err != nil {
		return err
	}
	s.mu.Lock()
	up := s.serve
	s.mu.Unlock()
	if r == nil || up.base == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Target.TimesFor(0).Call)
	defer cancel()
	if err := s.awaitShared(ctx, r, serve, mark, up, t, present); err != nil {
		return fmt.Errorf("shared config: the server did not show it took the change for %s: %w", t.Name, err)
	}
	return nil
}

// awaitShared polls each of r's signs until all hold or ctx ends.
func (s *Sandbox) awaitShared(ctx context.Context, r *SharedReady, serve *Proc, mark int, up serveAddr, t *tenants.Tenant, present bool) error {
	var re *regexp.Regexp
	if r.LogLine != "" {
		var err error
		if re, err = regexp.Compile(r.LogLine); err != nil {
			return fmt.Errorf("shared_config.ready.log_line: %w", err) // a Target never validated
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := "no check made yet"
	for {
		ok := true
		switch {
		case re != nil && serve != nil && !re.MatchString(after(serve.Output(), mark)):
			ok, last = false, fmt.Sprintf("no line matching %q on the serve backend's output since the write", r.LogLine)
		case r.Health && !s.healthy(ctx, up):
			ok, last = false, "its health check did not answer"
		case len(r.Lists) > 0:
			out, err := s.HookRunner()(ctx, "shared_config.ready.lists", map[string]any{"profile": t.Profile()}, r.Lists, nil)
			listed := err == nil && strings.Contains(string(out), t.Profile())
			if listed != present {
				ok, last = false, fmt.Sprintf("its listing (%v) does not show %s %s: %s", r.Lists, t.Profile(), map[bool]string{true: "served", false: "gone"}[present], truncate(string(out), 200))
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", last, ctx.Err())
		case <-tick.C:
		}
	}
}

// after is text past its first mark bytes ("" when it is shorter).
func after(text string, mark int) string {
	if mark > len(text) {
		return ""
	}
	return text[mark:]
}

// serveProc is the serve backend's process the harness started, or nil.
func (s *Sandbox) serveProc() *Proc {
	for _, p := range s.Procs() {
		if p.Name() == "serve" {
			return p
		}
	}
	return nil
}

// healthy reports whether the dialect's health check answers now.
func (s *Sandbox) healthy(ctx context.Context, up serveAddr) bool {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.Target.WaitHealthy(hctx, up.base, up.token) == nil
}

// DropTenant takes a deleted profile's sections out of the shared config
// and rewrites it (a target without one: nothing to do). The profile's
// home, written again (WriteHome), brings them back.
func (s *Sandbox) DropTenant(t *tenants.Tenant) error {
	if s.Target.SharedConfig == nil || s.Target.Remote() || !s.Target.Files {
		return nil
	}
	s.sharedMu.Lock()
	defer s.sharedMu.Unlock()
	delete(s.shared.written, t.Name)
	delete(s.shared.env, t.Name)
	return s.writeSharedAndWait(t, false)
}

// sharedVars are t's placeholders in the shared config's sections.
func (s *Sandbox) sharedVars(t *tenants.Tenant) map[string]any {
	vars := TenantVars(t, s.Set.Layout, s.Root)
	env := map[string]any{}
	for k, v := range t.DotEnv(s.Set.Layout) {
		env[k] = v
	}
	for k, v := range s.shared.env[t.Name] {
		env[k] = v
	}
	vars["profile"], vars["state"], vars["launch"] = t.Profile(), t.State, t.Launch
	vars["api_server_key"], vars["env_marker"], vars["env"] = t.APIServerKey(), t.Value(tenants.EnvMarker), env
	return vars
}

// writeSharedLocked writes the shared config: the base, then each written
// tenant's sections. The file is replaced in one rename, so a server
// reloading it never reads half of it. s.sharedMu is held.
func (s *Sandbox) writeSharedLocked() error {
	sc := s.Target.SharedConfig
	path := s.SharedConfigPath()
	for _, own := range []string{s.Set.LaunchHome, s.Set.Layout.StateRootOf(s.Root)} {
		if own != "" && within(path, own) {
			return fmt.Errorf("shared config %s lies inside %s: the tenants' places would hold every tenant's section", path, own)
		}
	}
	doc, _ := expandRoot(sc.Base, s.Root).(map[string]any)
	if doc == nil {
		doc = map[string]any{}
	}
	for _, t := range s.Set.Tenants {
		if !s.shared.written[t.Name] {
			continue
		}
		vars := s.sharedVars(t)
		for i, sec := range sc.Sections {
			body, _ := placeholder.Value(sec.Template, vars)
			key := ""
			if sec.Key != "" {
				k, _ := placeholder.Value(sec.Key, vars)
				key = fmt.Sprint(k)
			}
			if err := putSection(doc, sec.At, key, body); err != nil {
				return fmt.Errorf("shared config: sections[%d] of %s: %w", i, t.Name, err)
			}
		}
	}
	var data []byte
	var err error
	if sc.Format == "json" || (sc.Format == "" && strings.EqualFold(filepath.Ext(path), ".json")) {
		data, err = json.MarshalIndent(doc, "", "  ")
	} else {
		data, err = yaml.Marshal(doc)
	}
	if err != nil {
		return fmt.Errorf("shared config: encode: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("shared config: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("shared config: %w", err)
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o600)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("shared config: write %s: %w", path, werr)
	}
	return nil
}

// putSection puts body at the dotted path at of doc: under key in a
// mapping, or appended to a list when key is "".
func putSection(doc map[string]any, at, key string, body any) error {
	parts := strings.Split(at, ".")
	m := doc
	for i, part := range parts[:len(parts)-1] {
		next, ok := m[part].(map[string]any)
		if !ok {
			if m[part] != nil {
				return fmt.Errorf("%s is not a mapping in the base", strings.Join(parts[:i+1], "."))
			}
			next = map[string]any{}
			m[part] = next
		}
		m = next
	}
	last := parts[len(parts)-1]
	if key == "" {
		list, ok := m[last].([]any)
		if !ok && m[last] != nil {
			return fmt.Errorf("%s is not a list in the base", at)
		}
		m[last] = append(list, body)
		return nil
	}
	sections, ok := m[last].(map[string]any)
	if !ok {
		if m[last] != nil {
			return fmt.Errorf("%s is not a mapping in the base", at)
		}
		sections = map[string]any{}
		m[last] = sections
	}
	if _, dup := sections[key]; dup {
		return fmt.Errorf("%s.%s is given twice (the base, or two tenants with one key)", at, key)
	}
	sections[key] = body
	return nil
}
