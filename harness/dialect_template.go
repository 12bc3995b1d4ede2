// The dialect's templates: placeholders, filling them, and mapping a
// logical call to the server's method and its reply back.

package harness

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/tenantcanary/tenantcanary/internal/dotpath"
	"github.com/tenantcanary/tenantcanary/internal/placeholder"
	"github.com/tenantcanary/tenantcanary/tenants"
)

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
	out, _ := placeholder.Value(d.Config, TenantVars(t, layout, root))
	m, _ := out.(map[string]any)
	return m
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
			dotpath.Set(m, l, v)
		}
	}
	return json.Marshal(m)
}

func getPath(m map[string]any, path string) (any, bool) { return dotpath.Get(m, path) }
