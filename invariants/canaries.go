package invariants

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Patterns converts canaries to the scanner's patterns.
func Patterns(cs []tenants.Canary) []scan.Pattern {
	out := make([]scan.Pattern, len(cs))
	for i, c := range cs {
		out[i] = scan.Pattern{Owner: c.Owner, Kind: string(c.Kind), Value: c.Value}
	}
	return out
}

// matcher is one scanner over every canary of every tenant (minted ones
// included, as of the call), and the rule for which hits count.
type matcher struct {
	m  *scan.Matcher
	ts []*tenants.Tenant
	// shared: place -> canary values of others it shares (Tenant.Share)
	shared map[string]map[string]bool
}

// Checker holds one matcher compiled from every canary of a set of tenants
// (minted ones included, as of NewChecker), so that a check run scanning
// many places compiles it once. The package's functions each make one for
// a single check. Mint no canary between NewChecker and its last use, or
// the new one is not looked for.
type Checker struct {
	m        matcher
	requests *RequestCache // WithRequestCache

	mu sync.Mutex
	// rows holds each file and owner whose canary FileLeaks saw in a
	// SQLite row of that file: what the state database's control asks,
	// answered by the very scan that found nothing foreign.
	rows map[fileOwner]bool
}

// fileOwner is a file and the owner of a canary in it.
type fileOwner struct{ path, owner string }

// NewChecker compiles the canaries of ts.
func NewChecker(ts []*tenants.Tenant) (*Checker, error) {
	m, err := compile(ts)
	if err != nil {
		return nil, err
	}
	return &Checker{m: m}, nil
}

// WithFileCache makes c's file scans (FileLeaks and the shared places)
// keep what they find in fc, and read again only the files changed since:
// a scenario checks its homes after every phase, and most files did not
// change. c is returned.
func (c *Checker) WithFileCache(fc *scan.FileCache) *Checker {
	c.m.m = c.m.m.WithCache(fc)
	return c
}

// withChecker runs check with a fresh Checker over ts; a matcher that does
// not compile is a harness finding placed at place.
func withChecker(ts []*tenants.Tenant, place string, check func(*Checker) []Finding) []Finding {
	c, err := NewChecker(ts)
	if err != nil {
		return harnessFinding(place, err)
	}
	return check(c)
}

func compile(ts []*tenants.Tenant) (matcher, error) {
	var cs []tenants.Canary
	for _, t := range ts {
		cs = append(cs, t.Canaries()...)
	}
	m, err := scan.Compile(Patterns(cs))
	if err != nil {
		return matcher{}, fmt.Errorf("compile the canaries of %d tenants: %w", len(ts), err)
	}
	shared := map[string]map[string]bool{}
	for _, t := range ts {
		for _, c := range t.Shared() {
			if shared[t.Name] == nil {
				shared[t.Name] = map[string]bool{}
			}
			shared[t.Name][c.Value] = true
		}
	}
	return matcher{m: m, ts: ts, shared: shared}, nil
}

// harnessFinding reports a check that could not run.
func harnessFinding(place string, err error) []Finding {
	return []Finding{{Invariant: Harness, Tenant: place, Detail: err.Error()}}
}

// foreign reports whether a hit in place counts: another owner's canary
// that place does not share (Tenant.Share), and with secretsOnly only a
// credential.
func (m matcher) foreign(place string, p scan.Pattern, secretsOnly bool) bool {
	if p.Owner == place || m.shared[place][p.Value] {
		return false
	}
	return !secretsOnly || tenants.Kind(p.Kind).Secret()
}

// find scans b and returns a finding per foreign hit; where is completed
// with the hit's offset when withOffset is set.
func (m matcher) find(inv Invariant, place string, b []byte, where Where, withOffset, secretsOnly bool) []Finding {
	var out []Finding
	m.m.Find(b, func(x scan.Match) {
		if !m.foreign(place, x.Pattern, secretsOnly) {
			return
		}
		w := where
		if withOffset {
			w.Offset = int64p(x.Start)
		}
		out = append(out, hitFinding(inv, place, x, w))
	})
	return out
}

func hitFinding(inv Invariant, place string, x scan.Match, w Where) Finding {
	return Finding{
		Invariant: inv, Tenant: place, Owner: x.Pattern.Owner, Kind: tenants.Kind(x.Pattern.Kind),
		Where: w, Encoding: x.Encoding, Excerpt: x.Excerpt,
	}
}

// ownerOf names the tenant whose canary of kind has value, or "".
func ownerOf(ts []*tenants.Tenant, kind tenants.Kind, value string) string {
	for _, t := range ts {
		for _, c := range t.Canaries() {
			if c.Kind == kind && c.Value == value {
				return t.Name
			}
		}
	}
	return ""
}

// findJSON scans raw (a JSON document) as bytes, then every string in it
// (keys included) as decoded: a canary that JSON encoding disguised (UTF-16
// text turned into \u0000 escapes, an escaped string escaped again) is
// whole only there. A hit already seen in the raw bytes (same owner, kind
// and encoding) is not reported again from a decoded string.
func (m matcher) findJSON(inv Invariant, place string, raw []byte, where Where, secretsOnly bool) []Finding {
	return m.findJSONDoc(inv, place, raw, nil, where, secretsOnly)
}

// findJSONDoc is findJSON with raw's object already decoded (doc, as
// json.Unmarshal decodes it into a map; nil: decode raw here): a fake
// provider's record holds its body both ways.
func (m matcher) findJSONDoc(inv Invariant, place string, raw []byte, doc map[string]any, where Where, secretsOnly bool) []Finding {
	out := m.find(inv, place, raw, where, true, secretsOnly)
	seen := map[string]bool{}
	for _, f := range out {
		seen[f.Owner+"/"+string(f.Kind)+"/"+string(f.Encoding)] = true
	}
	var v any
	if doc != nil {
		v = doc
	} else if json.Unmarshal(raw, &v) != nil {
		return out
	}
	short := m.m.MinMatchLen()
	walkStrings(v, func(path func() string, s string) {
		if len(s) < short {
			return
		}
		m.m.Find([]byte(s), func(x scan.Match) {
			k := x.Pattern.Owner + "/" + x.Pattern.Kind + "/" + string(x.Encoding)
			if !m.foreign(place, x.Pattern, secretsOnly) || seen[k] {
				return
			}
			seen[k] = true
			w := where
			w.Part = strings.TrimSpace(w.Part + " " + path())
			w.Offset = int64p(x.Start)
			out = append(out, hitFinding(inv, place, x, w))
		})
	})
	return out
}

// walkStrings calls fn for every string and every object key in v, in a
// stable order (object keys sorted), with its JSON path ("$.a[2].b", and
// "... (key)" for a key), made only when fn asks: a document has many
// strings and few hits.
func walkStrings(v any, fn func(path func() string, s string)) {
	type step struct {
		key   string // an object's key, or
		idx   int    // an array's index
		isIdx bool
	}
	var steps []step
	isKey := false
	path := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, st := range steps {
			if st.isIdx {
				b.WriteString("[" + strconv.Itoa(st.idx) + "]")
			} else {
				b.WriteString("." + st.key)
			}
		}
		if isKey {
			b.WriteString(" (key)")
		}
		return b.String()
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			fn(path, v)
		case []any:
			for i, e := range v {
				steps = append(steps, step{idx: i, isIdx: true})
				walk(e)
				steps = steps[:len(steps)-1]
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				steps = append(steps, step{key: k})
				isKey = true
				fn(path, k)
				isKey = false
				walk(v[k])
				steps = steps[:len(steps)-1]
			}
		}
	}
	walk(v)
}

// Matcher is the scanner c compiled, for a scan of a place no check of
// this package reads (a shared store's keys and rows): every canary of
// c's tenants, in every encoding.
func (c *Checker) Matcher() *scan.Matcher { return c.m.m }
