package invariants

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/golden"
)

var update = flag.Bool("update", false, "rewrite docs/invariants.md from invariants.All")

// designItems is how many items DESIGN.md's "The invariants" list has.
// DESIGN.md is not in this repository: when its list changes, change this
// and the rows' Design numbers by hand.
const designItems = 21

var nameRE = regexp.MustCompile(`^[a-z][a-z]*(_[a-z]+)*$`)

// TestInvariantTableIsValid: every row of All has a unique, well-formed
// name and a one-line doc; the rows follow DESIGN.md's list and cover
// each of its items; Leak and Lookup answer from the table.
func TestInvariantTableIsValid(t *testing.T) {
	t.Parallel()
	seen := map[Invariant]bool{}
	covered := map[int]bool{}
	last := 0
	for _, r := range All {
		assert.Regexp(t, nameRE, string(r.Name))
		assert.False(t, seen[r.Name], "%s registered twice", r.Name)
		seen[r.Name] = true
		assert.NotEmpty(t, strings.TrimSpace(r.Doc), "%s: no doc", r.Name)
		assert.NotContains(t, r.Doc, "\n", "%s: doc is one line", r.Name)
		assert.NotContains(t, r.Doc, "|", "%s: doc would break the table of docs/invariants.md", r.Name)
		if r.Design > 0 {
			assert.GreaterOrEqual(t, r.Design, last, "%s: out of DESIGN.md's order", r.Name)
			assert.LessOrEqual(t, r.Design, designItems, "%s: DESIGN.md's list has %d items", r.Name, designItems)
			last = r.Design
			covered[r.Design] = true
		}
		got, ok := Lookup(r.Name)
		require.True(t, ok)
		assert.Equal(t, r, got)
		assert.Equal(t, r.Leak, r.Name.Leak(), "%s", r.Name)
	}
	for i := 1; i <= designItems; i++ {
		assert.True(t, covered[i], "DESIGN.md's invariant %d has no row in All", i)
	}
	for _, notLeak := range []Invariant{Shortfall, Control, Harness} {
		assert.False(t, notLeak.Leak(), "%s is no leak", notLeak)
	}
	_, ok := Lookup("no_such_invariant")
	assert.False(t, ok)
	assert.True(t, Invariant("no_such_invariant").Leak(), "an unregistered invariant counts as a leak")
}

// TestInvariantsDocIsCurrent: docs/invariants.md is the table, rendered.
// Regenerate it with `go test ./invariants -run TestInvariantsDocIsCurrent -update`.
func TestInvariantsDocIsCurrent(t *testing.T) {
	golden.Check(t, "..", "docs/invariants.md", renderDoc(), *update, "go test ./invariants -run TestInvariantsDocIsCurrent -update")
}

func renderDoc() string {
	var b strings.Builder
	b.WriteString("# The invariants\n\n")
	b.WriteString("<!-- Generated from invariants.All by `go test ./invariants -run TestInvariantsDocIsCurrent -update`: edit the table, not this file. -->\n\n")
	b.WriteString("Every finding names one of these invariants (a known-findings entry names one in `invariant:`).\n")
	b.WriteString("A leak is an isolation failure; the others fail a run without being leaks. `#` is the item of\n")
	b.WriteString("the design's list of invariants the row belongs to.\n\n")
	b.WriteString("| # | invariant | leak | what it holds |\n|---|---|---|---|\n")
	for _, r := range All {
		n, leak := "", "no"
		if r.Design > 0 {
			n = fmt.Sprint(r.Design)
		}
		if r.Leak {
			leak = "yes"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", n, r.Name, leak, r.Doc)
	}
	return b.String()
}

// mentionRE finds an invariant named in prose: "a `routing` finding", "the
// `request` invariant", "the `launch_bleed` check"; knownRE one a
// known-findings example names.
var (
	mentionRE = regexp.MustCompile("`([a-z_]+)` (?:invariants?|findings?|checks?)( nothing)?\\b")
	knownRE   = regexp.MustCompile(`(?m)^\s*-?\s*invariant:\s*([a-z_]+)\s*$`)
)

// unregistered lists the invariants text names that no row of All
// registers.
func unregistered(text string) []string {
	var out []string
	for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
		if m[2] != "" {
			continue // "`auto` finding nothing": a word, not a finding
		}
		if _, ok := Lookup(Invariant(m[1])); !ok {
			out = append(out, m[0])
		}
	}
	for _, m := range knownRE.FindAllStringSubmatch(text, -1) {
		if _, ok := Lookup(Invariant(m[1])); !ok {
			out = append(out, strings.TrimSpace(m[0]))
		}
	}
	return out
}

// TestDocsNameOnlyRegisteredInvariants: every invariant the README or a
// page of docs/ names is a row of All, so a renamed or dropped invariant
// cannot linger in the prose.
func TestDocsNameOnlyRegisteredInvariants(t *testing.T) {
	t.Parallel()
	// The scan's positive control: it sees an unregistered name.
	sample := "a `routing` finding, a `positive_control` finding, `auto` finding nothing, the `request` invariant\n" +
		"known_findings:\n  - invariant: authz\n  - invariant: nope\n"
	require.Equal(t, []string{"`positive_control` finding", "- invariant: nope"}, unregistered(sample))

	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join("..", "README.md"))
	for _, p := range pages {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.Empty(t, unregistered(string(b)), "%s names invariants no row of invariants.All registers", p)
	}
}
