package invariants

import (
	"encoding/json"
	"fmt"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// TextLeaks scans a log or stream labelled label. With an owner, every
// other tenant's canary counts; without one (a shared log), every tenant's
// secrets do.
func TextLeaks(ts []*tenants.Tenant, label string, text []byte, owner string) []Finding {
	return withChecker(ts, owner, func(c *Checker) []Finding { return c.TextLeaks(label, text, owner) })
}

// TextLeaks is the package's TextLeaks over c's tenants. The places of
// one text that carry the same canary kind of the same owner fold into one
// finding (FoldText): a server that logs a foreign key on every request
// is one finding, with a count and its first and last place.
func (c *Checker) TextLeaks(label string, text []byte, owner string) []Finding {
	return FoldText(Dedup(c.m.find(Text, owner, text, Where{Label: label}, true, owner == "")))
}

// FoldText folds findings of one text (a log, a stream) that carry the
// same owner's canary of the same kind, in the same tenant's place and
// under the same label, into the first of them: its Count says how many
// places ("seen N times"), and its Detail names the last one (offset and
// excerpt). Other
// findings pass unchanged, in order.
func FoldText(fs []Finding) []Finding {
	type group struct {
		at    int
		n     int
		last  Finding
		multi bool
	}
	groups := map[string]*group{}
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		if f.Invariant != Text || f.Owner == "" || f.Place != "" {
			out = append(out, f)
			continue
		}
		k := f.Tenant + "\x00" + f.Owner + "\x00" + string(f.Kind) + "\x00" + f.Where.Label
		g := groups[k]
		if g == nil {
			groups[k] = &group{at: len(out), n: countOf(f), last: f}
			out = append(out, f)
			continue
		}
		g.n += countOf(f)
		g.last, g.multi = f, true
	}
	for _, g := range groups {
		if !g.multi {
			continue
		}
		f := &out[g.at]
		f.Count = g.n
		last := "the last place"
		if g.last.Where.Offset != nil {
			last += fmt.Sprintf(" at offset %d", *g.last.Where.Offset)
		}
		if g.last.Excerpt != "" {
			last += " in " + g.last.Excerpt
		}
		if f.Detail != "" {
			f.Detail += "; "
		}
		f.Detail += last
	}
	return out
}

// Frame is one JSON-RPC frame delivered on a connection. Method is the
// method of the request a reply answers, when the caller knows it (a reply
// does not name it); requests and events name their own.
type Frame struct {
	Data   []byte
	Method string
}

// FrameLeaks scans every frame delivered on a connection that belongs to
// owner (label names the connection): replies and events alike, whether or
// not they name a session, may hold no other tenant's canary.
func FrameLeaks(ts []*tenants.Tenant, owner, label string, frames []Frame) []Finding {
	return withChecker(ts, owner, func(c *Checker) []Finding { return c.FrameLeaks(owner, label, frames) })
}

// FrameLeaks is the package's FrameLeaks over c's tenants.
func (c *Checker) FrameLeaks(owner, label string, frames []Frame) []Finding {
	m := c.m
	var out []Finding
	for i, fr := range frames {
		w := Where{Label: label, Frame: intp(i), Method: fr.Method}
		var head struct {
			Method string `json:"method"`
			Params struct {
				Type string `json:"type"`
			} `json:"params"`
		}
		if json.Unmarshal(fr.Data, &head) == nil && head.Method != "" {
			w.Method = head.Method
			if head.Method == "event" {
				w.Event = head.Params.Type
			}
		}
		out = append(out, m.findJSON(RPC, owner, fr.Data, w, false)...)
	}
	return Dedup(out)
}
