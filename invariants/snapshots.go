package invariants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Snapshot origins.
const (
	OriginTurn = "turn"
	OriginCron = "cron job"
)

// EnvSnapshot is one environment probe output a tenant's provider received
// back as a tool result.
type EnvSnapshot struct {
	Tenant   string `json:"tenant"`
	Origin   string `json:"origin"`    // OriginCron when the tenant's cron canary is in the conversation
	ToolCall string `json:"tool_call"` // the tool call id, "" when the result named none
	Request  int    `json:"request"`   // the first request that carried it
	Text     string `json:"text"`      // the output, JSON-unescaped where it arrived escaped
}

// EnvSnapshots extracts the probe outputs in t's provider records: tool
// results (OpenAI tool-role messages, Anthropic tool_result blocks) holding
// the probe's begin marker, once per tool call id (a conversation re-sends
// earlier results with every turn), in order of first arrival.
func EnvSnapshots(t *tenants.Tenant, recs []fakellm.Record) []EnvSnapshot {
	var out []EnvSnapshot
	seen := map[string]bool{}
	for _, r := range recs {
		origin := OriginTurn
		if bytes.Contains(r.RawBody, []byte(t.CronMark())) {
			origin = OriginCron
		}
		for _, res := range toolResults(r.Messages()) {
			if !strings.Contains(res.text, tenants.ProbeBegin) {
				continue
			}
			key := "id:" + res.id
			if res.id == "" {
				key = "text:" + res.text
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, EnvSnapshot{Tenant: t.Name, Origin: origin, ToolCall: res.id, Request: r.Seq, Text: unescapeJSON(res.text)})
		}
	}
	return out
}

type toolResult struct{ id, text string }

func toolResults(msgs []map[string]any) []toolResult {
	var out []toolResult
	for _, m := range msgs {
		role, _ := m["role"].(string)
		if role == "tool" {
			id, _ := m["tool_call_id"].(string)
			out = append(out, toolResult{id, contentText(m["content"])})
			continue
		}
		blocks, _ := m["content"].([]any)
		for _, b := range blocks {
			bm, _ := b.(map[string]any)
			if typ, _ := bm["type"].(string); typ == "tool_result" {
				id, _ := bm["tool_use_id"].(string)
				out = append(out, toolResult{id, contentText(bm["content"])})
			}
		}
	}
	return out
}

// contentText is a message content as text: a string as is, text blocks
// joined, anything else as JSON.
func contentText(c any) string {
	switch c := c.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, b := range c {
			if bm, ok := b.(map[string]any); ok {
				if s, ok := bm["text"].(string); ok {
					parts = append(parts, s)
					continue
				}
			}
			j, _ := json.Marshal(b)
			parts = append(parts, string(j))
		}
		return strings.Join(parts, "\n")
	case nil:
		return ""
	}
	j, _ := json.Marshal(c)
	return string(j)
}

// unescapeJSON undoes one level of JSON string escaping when s looks
// escaped (a literal \n and no real newline); otherwise it returns s.
func unescapeJSON(s string) string {
	if !strings.Contains(s, `\n`) || strings.Contains(s, "\n") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 < len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+5], 16, 16); err == nil {
					b.WriteRune(rune(v))
					i += 4
					continue
				}
			}
			b.WriteString(`\u`)
		default: // \" \\ \/ and anything unknown: the character itself
			b.WriteByte(s[i])
		}
	}
	if !utf8.ValidString(b.String()) {
		return s
	}
	return b.String()
}

// SnapshotLeaks checks every env snapshot every tenant's provider received:
// the probe ran in one of the tenant's own workdirs (its CWD= line) and
// shows no other tenant's canary in any encoding.
func SnapshotLeaks(ts []*tenants.Tenant) []Finding {
	return withChecker(ts, "", (*Checker).SnapshotLeaks)
}

// SnapshotLeaks is the package's SnapshotLeaks over c's tenants.
func (c *Checker) SnapshotLeaks() []Finding {
	var out []Finding
	for _, t := range c.m.ts {
		if t.HasProvider() {
			out = append(out, c.m.snapshotLeaks(t, t.Requests())...)
		}
	}
	return Dedup(out)
}

// SnapshotLeaksOf checks the snapshots in t's provider records.
func SnapshotLeaksOf(ts []*tenants.Tenant, t *tenants.Tenant, recs []fakellm.Record) []Finding {
	m, err := compile(ts)
	if err != nil {
		return harnessFinding(t.Name, err)
	}
	return Dedup(m.snapshotLeaks(t, recs))
}

func (m matcher) snapshotLeaks(t *tenants.Tenant, recs []fakellm.Record) []Finding {
	var out []Finding
	for _, s := range EnvSnapshots(t, recs) {
		where := Where{Request: intp(s.Request), Origin: s.Origin, ToolCall: s.ToolCall}
		cwd, ok := cwdOf(s.Text)
		own := t.Workdirs()
		switch {
		case !ok:
			out = append(out, Finding{Invariant: Snapshot, Tenant: t.Name, Where: where, Detail: "the snapshot has no CWD= line"})
		case !containsPath(own, cwd):
			f := Finding{Invariant: Snapshot, Tenant: t.Name, Where: where,
				Detail: fmt.Sprintf("the probe ran in %q, not in one of its own workdirs %q", cwd, own)}
			if owner := ownerOf(m.ts, tenants.Workdir, filepath.Base(cwd)); owner != "" {
				f.Owner, f.Kind = owner, tenants.Workdir
			}
			out = append(out, f)
		}
		seen := map[string]bool{}
		m.m.Find([]byte(s.Text), func(x scan.Match) {
			k := x.Pattern.Owner + "/" + x.Pattern.Kind + "/" + string(x.Encoding)
			if !m.foreign(t.Name, x.Pattern, false) || seen[k] {
				return
			}
			seen[k] = true
			out = append(out, hitFinding(Snapshot, t.Name, x, where))
		})
	}
	return Dedup(out)
}

func cwdOf(text string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "CWD="); ok {
			return v, true
		}
	}
	return "", false
}

func containsPath(dirs []string, p string) bool {
	for _, d := range dirs {
		if filepath.Clean(d) == filepath.Clean(p) {
			return true
		}
	}
	return false
}

// SnapshotShortfall reports every tenant with a provider whose provider
// received fewer than min env snapshots: the scenario drove turns that
// never reached the probe, a liveness failure and not a leak.
func SnapshotShortfall(ts []*tenants.Tenant, min int) []Finding {
	var out []Finding
	for _, t := range ts {
		if !t.HasProvider() {
			continue
		}
		if n := len(EnvSnapshots(t, t.Requests())); n < min {
			out = append(out, Finding{Invariant: Shortfall, Tenant: t.Name,
				Detail: fmt.Sprintf("%d env snapshot(s) reached its provider, want at least %d", n, min)})
		}
	}
	return out
}
