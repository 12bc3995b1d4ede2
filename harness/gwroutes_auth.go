package harness

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// The credential forms of a gateway route (Route.Forms, the route's
// `auth:` in a target file). Every route is also called with FormNone,
// whether or not it lists it.
const (
	// FormNone sends no credentials: an anonymous caller.
	FormNone = "none"
	// FormKey sends the tenant's gateway key as "Authorization: Bearer".
	FormKey = "key"
	// FormHeaders sends the provisioner's headers of the tenant.
	FormHeaders = "headers"
)

// AuthForm is one way a tenant presents its credentials on a route. In a
// target file a form is a name, or a template:
//
//	auth:
//	  - headers                 # the provisioner's headers
//	  - key                     # Authorization: Bearer <gateway key>
//	  - session                 # a credential the provisioner printed under credentials.session
//	  - {name: channel pin, bearer: "{key}-{channel_id}", own: any}
//	  - {name: my token your group, headers: {Authorization: "{header.Authorization}", X-Group: "{group_id}"}}
//
// A template's values take the caller's {key}, {bare_key} (without
// "sk-"), {header.NAME} (its provisioner header NAME), {cred.NAME.HEADER}
// (header HEADER of its credential NAME) and {own.X_id}, and the named
// tenant's {X_id}: in a cross-tenant probe that is the other tenant's id,
// so a template carrying ids is one of the route's foreign probes.
type AuthForm struct {
	// Name is none, key, headers, a credential the provisioner printed
	// (GatewayAccess.Credentials), or, for a template, its label.
	Name string `yaml:"name"`
	// Bearer, for a template, is sent as "Authorization: Bearer <it>".
	Bearer string `yaml:"bearer"`
	// Headers, for a template, are sent as they are, filled.
	Headers map[string]string `yaml:"headers"`
	// Own is what the owner's own call of a read route with this form
	// must give: "ok" (the default: a success, a positive control) or
	// "any" (a form the gateway may refuse its owner, such as a channel
	// pin only an administrator may use).
	Own string `yaml:"own"`
}

// The backends a route may name (Route.Backend).
const (
	RouteBackendGateway = "gateway"
	RouteBackendServe   = "serve"
)

// OnServe reports whether the route is served by an agent server's serve
// backend rather than its gateway.
func (r Route) OnServe() bool { return r.Backend == RouteBackendServe }

// Template reports whether f is a template (bearer or headers) rather
// than a named credential.
func (f AuthForm) Template() bool { return f.Bearer != "" || len(f.Headers) > 0 }

// MustWork reports whether the owner's own call of a read route with f
// must succeed.
func (f AuthForm) MustWork() bool { return f.Name != FormNone && f.Own != "any" }

// String is the form's name.
func (f AuthForm) String() string { return f.Name }

// AuthForms are a route's credential forms: in a target file one name (the
// single form of old, `auth: key`) or a list of names and templates.
type AuthForms []AuthForm

// UnmarshalYAML reads one name, or a list of names and templates.
func (fs *AuthForms) UnmarshalYAML(n *yaml.Node) error {
	one := func(n *yaml.Node) (AuthForm, error) {
		switch n.Kind {
		case yaml.ScalarNode:
			return AuthForm{Name: n.Value}, nil
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				switch k := n.Content[i].Value; k {
				case "name", "bearer", "headers", "own":
				default:
					return AuthForm{}, fmt.Errorf("line %d: auth form: unknown field %q (want name, bearer, headers, own)", n.Content[i].Line, k)
				}
			}
			var f AuthForm
			if err := n.Decode(&f); err != nil {
				return AuthForm{}, err
			}
			return f, nil
		}
		return AuthForm{}, fmt.Errorf("line %d: auth form: want a name or {name, bearer, headers, own}", n.Line)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		f, err := one(n)
		*fs = AuthForms{f}
		return err
	case yaml.SequenceNode:
		out := make(AuthForms, 0, len(n.Content))
		for _, c := range n.Content {
			f, err := one(c)
			if err != nil {
				return err
			}
			out = append(out, f)
		}
		*fs = out
		return nil
	}
	return fmt.Errorf("line %d: auth: want a form's name or a list of forms", n.Line)
}

// CredentialForms are the forms route r is called with by a caller,
// in order, FormNone left out: its `auth` list, else its single Auth,
// else the default (the empty name: the provisioner's headers when it
// gave the caller any, else the key).
func (r Route) CredentialForms() []AuthForm {
	var out []AuthForm
	for _, f := range r.Forms {
		if f.Name != FormNone {
			out = append(out, f)
		}
	}
	if len(out) == 0 && len(r.Forms) == 0 {
		out = []AuthForm{{Name: r.Auth}}
	}
	return out
}

// Queries are the query variants the route is called with: "" (the path
// as declared), then each of Variants.
func (r Route) Queries() []string {
	return append([]string{""}, r.Variants...)
}

// WithQuery appends a query variant ("?type=1", "&p=2", or "type=1") to a
// filled path.
func WithQuery(path, variant string) string {
	v := strings.TrimLeft(variant, "?&")
	if v == "" {
		return path
	}
	if strings.Contains(path, "?") {
		return path + "&" + v
	}
	return path + "?" + v
}

// valueRE matches every placeholder of a route template: {token_id},
// {own.user_id}, {key}, {header.Authorization}, {cred.session.Cookie}.
var valueRE = regexp.MustCompile(`\{([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\}`)

// RouteValues are the values a route's templates are filled from, by
// placeholder name (token_id, own.token_id, key, header.Authorization).
type RouteValues map[string]string

// NewRouteValues are the values of caller's call naming the ids named:
// named's {X_id}, the caller's {own.X_id}, {key}, {bare_key},
// {header.NAME} and {cred.NAME.HEADER}. In an owner's own call named and
// own are the same.
func NewRouteValues(caller GatewayAccess, own, named map[string]string) RouteValues {
	v := RouteValues{}
	for k, x := range named {
		v[k+"_id"] = x
	}
	for k, x := range own {
		v["own."+k+"_id"] = x
	}
	if caller.Key != "" {
		v["key"] = caller.Key
		v["bare_key"] = strings.TrimPrefix(caller.Key, "sk-")
	}
	for h, x := range caller.Headers {
		v["header."+h] = x
	}
	for c, hs := range caller.Credentials {
		for h, x := range hs {
			v["cred."+c+"."+h] = x
		}
	}
	return v
}

// Fill fills s's placeholders; missing names the first one v lacks.
func (v RouteValues) Fill(s string) (out, missing string) {
	out = valueRE.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		x, ok := v[name]
		if !ok || x == "" {
			if missing == "" {
				missing = name
			}
			return m
		}
		return x
	})
	return out, missing
}

// routeValueNames lists the placeholders of s, in order.
func routeValueNames(s string) []string {
	var out []string
	for _, m := range valueRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// NamesForeignIDs reports whether some call of r names the named
// tenant's ids ({X_id}, not {own.X_id}): in its path, body, variants or
// forms. Only such routes are probed across tenants.
func (r Route) NamesForeignIDs() bool {
	return r.ProbesForeignIDs(AuthForm{}) || slices.ContainsFunc(r.Forms, r.ProbesForeignIDs)
}

// ProbesForeignIDs reports whether a call of the route with form f names
// another tenant's ids: the route's path, body or variants name one, or
// f's own template does. A form of a route that names an id only in
// another form is the caller's own call, no cross-tenant probe: its
// success is no finding.
func (r Route) ProbesForeignIDs(f AuthForm) bool {
	s := r.Path + " " + r.Body + " " + strings.Join(r.Variants, " ") + " " + f.Bearer
	for _, h := range slices.Sorted(maps.Keys(f.Headers)) {
		s += " " + f.Headers[h]
	}
	for _, n := range routeValueNames(s) {
		if !strings.Contains(n, ".") && strings.HasSuffix(n, "_id") {
			return true
		}
	}
	return false
}

// NamesIDs reports whether the route's path, body or variants name any
// id, the caller's own included.
func (r Route) NamesIDs() bool {
	for _, n := range routeValueNames(r.Path + " " + r.Body + " " + strings.Join(r.Variants, " ")) {
		if strings.HasSuffix(n, "_id") {
			return true
		}
	}
	return false
}

var captureNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// validateForms checks the route's forms, variants, captures and the
// placeholders of all of them (where names the route in errors). It is
// part of LLMGateway's validation.
func (r *Route) validateForms(where string) []error {
	var errs []error
	idName := func(what, n string) {
		base := strings.TrimPrefix(n, "own.")
		if strings.Contains(base, ".") || !strings.HasSuffix(base, "_id") {
			errs = append(errs, fmt.Errorf("%s: %s placeholder {%s}: want {X_id} (the named tenant's id X) or {own.X_id} (the caller's)", where, what, n))
		}
	}
	for _, n := range routeValueNames(r.Path + " " + r.Body) {
		if strings.HasPrefix(n, "own.") {
			idName("path or body", n)
		}
	}
	for i, v := range r.Variants {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s: variants[%d] is empty (the route as declared is always called)", where, i))
		}
		for _, n := range routeValueNames(v) {
			idName(fmt.Sprintf("variants[%d]", i), n)
		}
	}
	if len(r.Variants) > 0 && !r.Read {
		errs = append(errs, fmt.Errorf("%s: variants are a read route's filters: give read: true", where))
	}
	switch r.Backend {
	case "", RouteBackendGateway, RouteBackendServe:
	default:
		errs = append(errs, fmt.Errorf("%s: backend %q: want gateway or serve", where, r.Backend))
	}
	seen := map[string]bool{}
	for i, f := range r.Forms {
		fw := fmt.Sprintf("%s: auth[%d]", where, i)
		switch {
		case f.Name == "":
			errs = append(errs, fmt.Errorf("%s: no name", fw))
		case seen[f.Name]:
			errs = append(errs, fmt.Errorf("%s: form %q listed twice", fw, f.Name))
		}
		seen[f.Name] = true
		switch f.Own {
		case "", "ok", "any":
		default:
			errs = append(errs, fmt.Errorf("%s (%s): own %q: want ok or any", fw, f.Name, f.Own))
		}
		if !f.Template() {
			continue
		}
		if f.Name == FormNone || f.Name == FormKey || f.Name == FormHeaders {
			errs = append(errs, fmt.Errorf("%s: %q names a built-in form: a template needs a name of its own", fw, f.Name))
		}
		if f.Bearer != "" && f.Headers["Authorization"] != "" {
			errs = append(errs, fmt.Errorf("%s (%s): give bearer or headers.Authorization, not both", fw, f.Name))
		}
		tpl := f.Bearer
		for _, h := range slices.Sorted(maps.Keys(f.Headers)) {
			tpl += " " + f.Headers[h]
		}
		for _, n := range routeValueNames(tpl) {
			switch {
			case n == "key" || n == "bare_key":
			case strings.HasPrefix(n, "header.") && strings.Count(n, ".") == 1:
			case strings.HasPrefix(n, "cred.") && strings.Count(n, ".") == 2:
			default:
				idName(fmt.Sprintf("auth form %q", f.Name), n)
			}
		}
	}
	if len(r.Forms) > 0 && len(r.CredentialForms()) == 0 && r.Read {
		errs = append(errs, fmt.Errorf("%s: a read route needs a form other than none (its owner's call is its positive control); a route only anonymous callers use: give public: true and no read", where))
	}
	// The single form of old: a route whose only form is key or headers
	// keeps Auth, for the callers that read it.
	if cf := r.CredentialForms(); len(r.Forms) > 0 && len(cf) == 1 && (cf[0].Name == FormKey || cf[0].Name == FormHeaders) && !cf[0].Template() {
		if r.Auth != cf[0].Name { // written once: a validated target is shared
			r.Auth = cf[0].Name
		}
	}
	names := make([]string, 0, len(r.Capture))
	for name := range r.Capture {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !captureNameRE.MatchString(name) {
			errs = append(errs, fmt.Errorf("%s: capture %q: want a name of [a-z0-9_] (later routes name it {%s_id})", where, name, name))
		}
		if _, err := ParseCapturePath(r.Capture[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s: capture %s: %w", where, name, err))
		}
	}
	return errs
}

// ErrCapturePath wraps every reason a capture path is refused.
var ErrCapturePath = errors.New("bad capture path")
