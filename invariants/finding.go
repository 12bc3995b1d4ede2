package invariants

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Finding is one broken rule: in whose place (Tenant) what was found (the
// canary's Owner and Kind, in which Encoding, with an Excerpt), or what was
// wrong (Detail), and Where. Findings are plain values: they compare by
// their String, and marshal to JSON.
type Finding struct {
	Invariant Invariant     `json:"invariant"`
	Tenant    string        `json:"tenant"`          // whose place: provider, snapshot, home, connection, log; "" for a shared log
	Owner     string        `json:"owner,omitempty"` // whose canary
	Kind      tenants.Kind  `json:"kind,omitempty"`
	Where     Where         `json:"where"`
	Encoding  scan.Encoding `json:"encoding,omitempty"`
	Excerpt   string        `json:"excerpt,omitempty"`
	Detail    string        `json:"detail,omitempty"`
	// Place, when set, names the route or place the finding is about
	// (`route "own token"`): Dedup keeps one finding per invariant, place,
	// owner and tenant, however many calls or rows showed it.
	Place string `json:"place,omitempty"`
	// Count is how many findings Dedup folded into this one (0 or 1: one).
	Count int `json:"count,omitempty"`
}

// Where locates a finding; only the fields that apply are set.
type Where struct {
	Request  *int   `json:"request,omitempty"`   // provider request sequence number
	Path     string `json:"path,omitempty"`      // request URL path, or file path
	Part     string `json:"part,omitempty"`      // "body", "header x-api-key", "auth", "model", table row ...
	Origin   string `json:"origin,omitempty"`    // snapshot origin: "turn" or "cron job"
	ToolCall string `json:"tool_call,omitempty"` // snapshot tool call id
	Offset   *int64 `json:"offset,omitempty"`    // byte offset in the file, text or frame
	Label    string `json:"label,omitempty"`     // log, stream or connection label
	Frame    *int   `json:"frame,omitempty"`     // RPC frame index on the connection
	Method   string `json:"method,omitempty"`    // RPC method
	Event    string `json:"event,omitempty"`     // RPC event type
}

func (w Where) String() string {
	var parts []string
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	if w.Label != "" {
		add(w.Label)
	}
	if w.Request != nil {
		add("request #" + strconv.Itoa(*w.Request))
	}
	if w.Frame != nil {
		add("frame #" + strconv.Itoa(*w.Frame))
	}
	if w.Method != "" {
		add("method " + w.Method)
	}
	if w.Event != "" {
		add("event " + w.Event)
	}
	if w.Origin != "" {
		add(w.Origin)
	}
	if w.ToolCall != "" {
		add("tool call " + w.ToolCall)
	}
	loc := w.Path
	if w.Part != "" {
		if loc != "" {
			loc += " "
		}
		loc += w.Part
	}
	if w.Offset != nil {
		loc += ":" + strconv.FormatInt(*w.Offset, 10)
	}
	if strings.HasPrefix(loc, ":") && len(parts) > 0 {
		parts[len(parts)-1] += loc // "serve log:120"
	} else {
		add(loc)
	}
	return strings.Join(parts, " ")
}

// String renders the finding on one line.
func (f Finding) String() string {
	var b strings.Builder
	place := f.Tenant
	if place == "" {
		place = "(shared)"
	}
	fmt.Fprintf(&b, "%s: %s", f.Invariant, place)
	if w := f.Where.String(); w != "" {
		fmt.Fprintf(&b, " %s", w)
	}
	if f.Owner != "" || f.Kind != "" {
		fmt.Fprintf(&b, ": carries %s's %s", f.Owner, f.Kind)
		if f.Encoding != "" && f.Encoding != scan.Raw {
			fmt.Fprintf(&b, " (%s)", f.Encoding)
		}
	}
	if f.Detail != "" {
		fmt.Fprintf(&b, ": %s", f.Detail)
	}
	if f.Excerpt != "" {
		fmt.Fprintf(&b, " in %s", f.Excerpt)
	}
	if f.Count > 1 {
		fmt.Fprintf(&b, " (seen %d times)", f.Count)
	}
	return b.String()
}

// Dedup returns the findings with repeats folded, first occurrence kept,
// in order: a repeat is a finding with the same String, or, for findings
// with a Place, the same invariant, place, owner and tenant. The kept
// finding's Count says how many were folded into it (see Collapse).
func Dedup(fs []Finding) []Finding { return Collapse(fs) }

// TB is the part of testing.TB that Assert needs.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Assert fails t when there is any finding, listing every finding (after
// Dedup) one a line; leaks and the other failures (shortfall, control,
// harness) are listed under separate headings so that a broken harness is
// never mistaken for a leak, or the other way round. It reports whether
// the list was empty.
func Assert(t TB, fs []Finding) bool {
	t.Helper()
	fs = Dedup(fs)
	if len(fs) == 0 {
		return true
	}
	t.Errorf("%s", Format(fs))
	return false
}

// Format renders findings as Assert reports them.
func Format(fs []Finding) string {
	var leaks, other []string
	for _, f := range Dedup(fs) {
		if f.Invariant.Leak() {
			leaks = append(leaks, "  "+f.String())
		} else {
			other = append(other, "  "+f.String())
		}
	}
	var b strings.Builder
	if len(leaks) > 0 {
		fmt.Fprintf(&b, "%d cross-tenant leak(s):\n%s\n", len(leaks), strings.Join(leaks, "\n"))
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, "%d harness, liveness or control failure(s) (not leaks):\n%s\n", len(other), strings.Join(other, "\n"))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func intp(i int) *int       { return &i }
func int64p(i int64) *int64 { return &i }
