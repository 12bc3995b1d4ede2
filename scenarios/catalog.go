package scenarios

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Phase is one step of a scenario; the invariants are checked after each.
type Phase struct {
	Name string
	Run  func(*Env)
}

// Spec is one scenario of the catalog: data first, validated when the
// catalog is built.
type Spec struct {
	ID        string            // unique, [a-z0-9-]
	Purpose   string            // one line
	Backends  []harness.Backend // what it drives
	Focus     []Invariant       // the invariants this scenario exists to exercise (all are checked)
	Snapshots func(tenants int) int
	// MinTenants is the fewest tenants it makes sense with (default 2).
	MinTenants int
	Timeout    time.Duration // cap on the whole scenario; at most MaxTimeout
	Phases     []Phase
	// Responder makes each tenant provider's main responder; default
	// tenants.DefaultResponder (every user turn runs the env probe).
	Responder func(*tenants.Tenant) fakellm.Responder
	// Needs are what the scenario needs of a target beyond its backends;
	// a target without them skips the scenario, with the reason.
	Needs []Need
	// Alone: the whole scenario measures latency, so it runs with no other
	// scenario beside it (a phase that measures does so in Env.Alone).
	Alone bool
	// StoreProxies: the target reaches each of its stores through a
	// delaying proxy the scenario controls (harness.SandboxOptions.StoreProxies;
	// the delays start at zero).
	StoreProxies bool
}

// unmet says why target cannot run spec, or "" when it can.
func (s Spec) unmet(target harness.Target) string {
	if target.IsGateway() && !slices.Contains(s.Needs, NeedLLMGateway) {
		return "the target is a multi-tenant LLM gateway (kind: gateway): only the gateway family applies"
	}
	for _, b := range s.Backends {
		if ok, why := target.Supports(b); !ok {
			return fmt.Sprintf("needs the %s backend: %s", b, why)
		}
	}
	for _, n := range s.Needs {
		if why := n.Unmet(target); why != "" {
			return why
		}
	}
	return ""
}

// MaxTimeout caps any scenario's timeout.
const MaxTimeout = 10 * time.Minute

var idRE = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// validate checks one spec on its own.
func (s Spec) validate() error {
	var errs []error
	if !idRE.MatchString(s.ID) {
		errs = append(errs, fmt.Errorf("id %q: want lower-case words joined by '-'", s.ID))
	}
	if strings.TrimSpace(s.Purpose) == "" || strings.Contains(s.Purpose, "\n") {
		errs = append(errs, errors.New("purpose: want one non-empty line"))
	}
	if len(s.Backends) == 0 {
		errs = append(errs, errors.New("no backend"))
	}
	if len(s.Phases) == 0 {
		errs = append(errs, errors.New("no phase"))
	}
	names := map[string]bool{}
	for i, p := range s.Phases {
		if p.Name == "" || p.Run == nil {
			errs = append(errs, fmt.Errorf("phase %d: want a name and a body", i))
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("phase %q given twice", p.Name))
		}
		names[p.Name] = true
	}
	for _, f := range s.Focus {
		if !isFocusable(f) {
			errs = append(errs, fmt.Errorf("focus %q is not an invariant (a row of invariants.All)", f))
		}
	}
	for _, n := range s.Needs {
		if _, ok := lookupNeed(n); !ok {
			errs = append(errs, fmt.Errorf("need %q is unknown", n))
		}
	}
	if s.Snapshots == nil {
		errs = append(errs, errors.New("no expected snapshot count (Snapshots)"))
	}
	if s.Timeout <= 0 || s.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("timeout %v: want (0, %v]", s.Timeout, MaxTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("scenario %q: %w", s.ID, err)
	}
	return nil
}

// Catalog is a validated list of scenarios.
type Catalog struct {
	specs []Spec
}

// NewCatalog validates every spec and that IDs are unique.
func NewCatalog(specs ...Spec) (*Catalog, error) {
	var errs []error
	seen := map[string]bool{}
	for _, s := range specs {
		if err := s.validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[s.ID] {
			errs = append(errs, fmt.Errorf("scenario %q registered twice", s.ID))
		}
		seen[s.ID] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return &Catalog{specs: specs}, nil
}

// All lists the scenarios in catalog order.
func (c *Catalog) All() []Spec { return append([]Spec(nil), c.specs...) }

// Get returns the scenario with id, or an error that suggests the closest
// id.
func (c *Catalog) Get(id string) (Spec, error) {
	for _, s := range c.specs {
		if s.ID == id {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("unknown scenario %q (did you mean %q?)", id, c.closest(id))
}

// Match lists the scenarios whose ID matches re; none matching is an error
// that lists the IDs there are.
func (c *Catalog) Match(expr string) ([]Spec, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("--run %q: %w", expr, err)
	}
	var out []Spec
	for _, s := range c.specs {
		if re.MatchString(s.ID) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--run %q matches no scenario; the catalog has: %s", expr, strings.Join(c.IDs(), ", "))
	}
	return out, nil
}

// IDs lists every scenario ID, sorted.
func (c *Catalog) IDs() []string {
	ids := make([]string, 0, len(c.specs))
	for _, s := range c.specs {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	return ids
}

func (c *Catalog) closest(id string) string {
	best, bestD := "", 1<<30
	for _, s := range c.specs {
		if d := editDistance(id, s.ID); d < bestD {
			best, bestD = s.ID, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
