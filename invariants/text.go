package invariants

import (
	"encoding/json"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// TextLeaks scans a log or stream labelled label. With an owner, every
// other tenant's canary counts; without one (a shared log), every tenant's
// secrets do.
func TextLeaks(ts []*tenants.Tenant, label string, text []byte, owner string) []Finding {
	return withChecker(ts, owner, func(c *Checker) []Finding { return c.TextLeaks(label, text, owner) })
}

// TextLeaks is the package's TextLeaks over c's tenants.
func (c *Checker) TextLeaks(label string, text []byte, owner string) []Finding {
	return Dedup(c.m.find(Text, owner, text, Where{Label: label}, true, owner == ""))
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
