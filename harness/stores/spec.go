package stores

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/internal/storeproc"
)

// Kind names a store's server: the kinds internal/storeproc can start.
type Kind = storeproc.Kind

// The kinds of store a target may declare.
const (
	Redis    = storeproc.Redis
	Postgres = storeproc.Postgres
)

// Kinds are the kinds a Spec may name, in the order error messages list
// them.
var Kinds = storeproc.Kinds

// Spec is one shared store of a target, as its target file's `stores:`
// declares it.
type Spec struct {
	Kind Kind `yaml:"kind"`
	// Name names the store's placeholder, {<name>_url}, in the target's
	// command lines and env values; default the kind ({redis_url},
	// {postgres_url}). Two stores of one kind need names of their own.
	Name string `yaml:"name"`
	// URL is a running store to reach (staging): redis://HOST:PORT[/DB]
	// or postgres://USER@HOST:PORT/DB. Empty: the harness starts one for
	// the run, in the run's folder, and stops it at the run's end.
	URL string `yaml:"url"`
	// Owners say which keys or rows belong to which tenant.
	Owners []Owner `yaml:"owners"`
	// TenantData says the target keeps per-tenant data in this store
	// (sessions, messages, caches): each tenant's own canary must then be
	// found in it, the positive control of its scan.
	TenantData bool `yaml:"tenant_data"`
}

// Owner is one rule of which keys or rows a tenant owns. A Redis store's
// rules give Keys; a PostgreSQL store's give Table and Column.
type Owner struct {
	// Keys is a Redis glob (*, ?, [...], \ escapes, as SCAN MATCH reads
	// it) holding the tenant's value: "sess:{tenant}:*".
	Keys string `yaml:"keys"`
	// Table is a table, schema-qualified or not ("sessions" is that table
	// in any schema), and Column the column whose value names the row's
	// owner.
	Table  string `yaml:"table"`
	Column string `yaml:"column"`
	// Value is how the owner's value is written, a template: default
	// "{tenant}" (the tenant's name); "{profile}", "user-{tenant}", or an
	// id captured when the tenant was provisioned ("{user_id}").
	Value string `yaml:"value"`
}

// ownerVars is the vocabulary of an owner's value and key glob: the
// tenant's name and profile, and any id captured when the tenant was
// provisioned ({<name>_id}).
var ownerVars = placeholder.Vocabulary{Of: "a store owner's value", Vars: []placeholder.Var{
	{Name: "tenant", Doc: "the tenant's name"},
	{Name: "profile", Doc: "the tenant's profile name (the launch tenant's is its launch profile's)"},
	{Name: "key", Doc: "a gateway tenant's key, as its provisioner minted it"},
	{Name: "bare_key", Doc: "a gateway tenant's key without an sk- prefix (as gateways store it)"},
}, Suffix: "_id"}

// ownerValue is the template of o's owner value.
func (o Owner) ownerValue() string {
	if o.Value == "" {
		return "{tenant}"
	}
	return o.Value
}

// Placeholder is the name of the store's placeholder in the target's
// command lines and env values, without braces: "redis_url".
func (s Spec) Placeholder() string {
	name := s.Name
	if name == "" {
		name = string(s.Kind)
	}
	return name + "_url"
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Validate checks specs, each error naming its field
// ("stores[1].owners[0].keys: ...").
func Validate(specs []Spec) error {
	var errs []error
	seen := map[string]int{}
	for i, s := range specs {
		field := fmt.Sprintf("stores[%d]", i)
		bad := func(sub, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s%s: %s", field, sub, fmt.Sprintf(format, args...)))
		}
		if !slices.Contains(Kinds, s.Kind) {
			bad(".kind", "%q is no store kind (want one of %v)", s.Kind, Kinds)
			continue
		}
		if s.Name != "" && !nameRE.MatchString(s.Name) {
			bad(".name", "%q: want lower-case letters, digits and _, starting with a letter", s.Name)
		}
		if j, ok := seen[s.Placeholder()]; ok {
			bad(".name", "{%s} is stores[%d]'s too: give one of them a name of its own", s.Placeholder(), j)
		}
		seen[s.Placeholder()] = i
		if s.URL != "" {
			if err := checkURL(s.Kind, s.URL); err != nil {
				bad(".url", "%v", err)
			}
		}
		for j, o := range s.Owners {
			of := fmt.Sprintf(".owners[%d]", j)
			if err := ownerVars.Check(o.Value); err != nil {
				bad(of+".value", "%v", err)
			}
			switch s.Kind {
			case Redis:
				if o.Table != "" || o.Column != "" {
					bad(of, "a redis store's owners give keys, not table and column")
				}
				if o.Keys == "" {
					bad(of+".keys", "empty: want a key glob holding the owner's value, e.g. \"sess:{tenant}:*\"")
					continue
				}
				if err := ownerVars.Check(o.Keys); err != nil {
					bad(of+".keys", "%v", err)
				}
				if o.Value != "" {
					bad(of+".value", "a redis owner's value is in its keys glob ({tenant}, {profile}, {<name>_id})")
				}
				if len(placeholder.Names(o.Keys)) == 0 {
					bad(of+".keys", "%q holds no owner placeholder ({tenant}, {profile} or {<name>_id}): every tenant would own the same keys", o.Keys)
				}
				if _, err := globRE(o.Keys, nil); err != nil {
					bad(of+".keys", "%v", err)
				}
			case Postgres:
				if o.Keys != "" {
					bad(of, "a postgres store's owners give table and column, not keys")
				}
				if o.Table == "" {
					bad(of+".table", "empty: want the table whose rows the column assigns ([schema.]table)")
				}
				if o.Column == "" {
					bad(of+".column", "empty: want the column whose value names the row's owner")
				}
				if strings.Count(o.Table, ".") > 1 {
					bad(of+".table", "%q: want table or schema.table", o.Table)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func checkURL(kind Kind, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error repeats the URL, password and all.
		return fmt.Errorf("not a URL (it does not parse): want %s://HOST:PORT/...", kind)
	}
	want := map[Kind][]string{Redis: {"redis", "rediss"}, Postgres: {"postgres", "postgresql"}}[kind]
	if !slices.Contains(want, u.Scheme) || u.Host == "" {
		return fmt.Errorf("%q: want %s://HOST:PORT/... for a %s store", redact(raw), want[0], kind)
	}
	return nil
}

// redact is raw with its password, if any, hidden: a store's URL goes
// into findings and certificates.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
