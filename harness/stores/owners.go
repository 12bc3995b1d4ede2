package stores

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Tenant is one tenant as a store scan sees it: its canaries' owner name,
// the values its owner rules are filled with, and the canaries of others
// it shares (tenants.Tenant.Share), which are no leak in its keys or rows.
type Tenant struct {
	Name string
	// Vars fill the owner rules: tenant, profile and the ids captured
	// when it was provisioned ({<name>_id}).
	Vars map[string]string
	// Shared are canary values of other tenants this one shares.
	Shared map[string]bool
}

// TenantsOf is ts as a store scan sees them; ids (tenant name -> id name
// -> value, as a gateway's provisioning captured them, may be nil) add
// their {<name>_id} variables (an id named "user" or "user_id" is
// {user_id}), and a gateway tenant's "key" and "bare_key" (its key
// without an sk- prefix) their own.
func TenantsOf(ts []*tenants.Tenant, ids map[string]map[string]string) []Tenant {
	out := make([]Tenant, 0, len(ts))
	for _, t := range ts {
		st := Tenant{Name: t.Name, Vars: map[string]string{"tenant": t.Name, "profile": t.Profile()}, Shared: map[string]bool{}}
		for k, v := range ids[t.Name] {
			if v == "" {
				continue
			}
			st.Vars[k] = v
			// A provisioner names its ids "user", "channel"; the owner
			// rules write them as the routes do, {user_id}.
			if !strings.HasSuffix(k, "_id") && k != "key" && k != "bare_key" {
				st.Vars[k+"_id"] = v
			}
		}
		for _, c := range t.Shared() {
			st.Shared[c.Value] = true
		}
		out = append(out, st)
	}
	return out
}

// keyRule is one owner rule's glob compiled for one tenant.
type keyRule struct {
	glob   string // as the target file wrote it
	tenant string
	re     *regexp.Regexp
	weight int // the length of the owner's value: the longest wins a tie
}

// keyOwners compiles a Redis store's owner rules for every tenant; a rule
// whose variables a tenant lacks (an id not captured) is left out for it.
func keyOwners(owners []Owner, ts []Tenant) ([]keyRule, error) {
	var out []keyRule
	for _, o := range owners {
		for _, t := range ts {
			if !filled(o.Keys, t.Vars) {
				continue
			}
			re, err := globRE(o.Keys, t.Vars)
			if err != nil {
				return nil, fmt.Errorf("owner keys %q: %w", o.Keys, err)
			}
			out = append(out, keyRule{glob: o.Keys, tenant: t.Name, re: re, weight: len(placeholder.String(o.Keys, t.Vars))})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].weight > out[j].weight })
	return out, nil
}

// ownerOfKey is the tenant owning key and the glob that says so, or "".
func ownerOfKey(rules []keyRule, key string) (tenant, glob string) {
	for _, r := range rules {
		if r.re.MatchString(key) {
			return r.tenant, r.glob
		}
	}
	return "", ""
}

// filled reports whether every placeholder of s has a variable in vars.
func filled(s string, vars map[string]string) bool {
	for _, n := range placeholder.Names(s) {
		if vars[n] == "" {
			return false
		}
	}
	return true
}

// globRE compiles a Redis glob (as SCAN MATCH and KEYS read it: * any
// bytes, ? one, [abc] [^a-z] a class, \x the byte x) whose placeholders
// are filled from vars, each value matched literally.
func globRE(glob string, vars map[string]string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch c {
		case '{':
			if end := strings.IndexByte(glob[i:], '}'); end > 0 {
				name := glob[i+1 : i+end]
				if v, ok := vars[name]; ok && placeholder.Sole(glob[i:i+end+1]) != "" {
					b.WriteString(regexp.QuoteMeta(v))
					i += end
					continue
				}
			}
			b.WriteString(`\{`)
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
			} else {
				b.WriteString(`\\`)
			}
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("glob %q: [ without ]", glob)
			}
			class := glob[i+1 : i+1+end]
			neg := strings.HasPrefix(class, "^")
			if neg {
				class = class[1:]
			}
			b.WriteString("[")
			if neg {
				b.WriteString("^")
			}
			for j := 0; j < len(class); j++ {
				switch ch := class[j]; {
				case ch == '\\' && j+1 < len(class):
					j++
					b.WriteString(regexp.QuoteMeta(class[j : j+1]))
				case ch == '-' && j > 0 && j+1 < len(class):
					b.WriteByte('-')
				default:
					b.WriteString(regexp.QuoteMeta(string(ch)))
				}
			}
			b.WriteString("]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("glob %q: %w", glob, err)
	}
	return re, nil
}

// rowRule is one owner rule of a table: the column and each tenant's
// value.
type rowRule struct {
	column string
	owners map[string]string // value -> tenant
}

// tableOwners are the owner rules of schema.table.
func tableOwners(owners []Owner, ts []Tenant, schema, table string) []rowRule {
	var out []rowRule
	for _, o := range owners {
		if o.Table != table && o.Table != schema+"."+table {
			continue
		}
		r := rowRule{column: o.Column, owners: map[string]string{}}
		for _, t := range ts {
			if v := o.ownerValue(); filled(v, t.Vars) {
				r.owners[placeholder.String(v, t.Vars)] = t.Name
			}
		}
		out = append(out, r)
	}
	return out
}
