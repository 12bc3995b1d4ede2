package certificate

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tenantcanary/tenantcanary/invariants"
)

// Reach is the certificate's first picture: who reached whom. Its rows
// are the owners of the canaries found, or of the session, job or home a
// finding names (Finding.Owner: a tenant, or "operator" for the
// operator's secrets), its columns the places they were found in (the
// tenant whose request, home, connection or log carried one, or a place
// of no tenant's, named in parentheses: see PlaceShared and the others),
// its cells the number of findings. A reader sees at a glance that beta's
// data reached alpha, and no one else's.
//
// Each cell counts apart the findings the verdict counted and those the
// target's known findings accepted, so the matrix never hides what the
// verdict counted, nor passes off an accepted finding as none. Findings
// that name no canary's owner (harness, control and liveness failures, a
// call that was not refused, a guessable id) and availability findings (a
// tenant's load, not its data) are not in the matrix: LeftOut counts them,
// with why.
//
// ReachOf computes it from a certificate; certificate.json carries it as
// "reach".
type Reach struct {
	// Owners are the rows: every tenant of the run, in the certificate's
	// order, then any other owner a finding names ("operator" last).
	Owners []string `json:"owners,omitempty"`
	// Places are the columns: every tenant of the run, then any other
	// tenant a finding names, then the places of no tenant's that hold a
	// finding, in the order of the Place constants.
	Places []string `json:"places,omitempty"`
	// Cells are the cells that count anything, row by row.
	Cells []ReachCell `json:"cells,omitempty"`
	// LeftOut counts the findings the matrix leaves out, by reason.
	LeftOut []ReachLeftOut `json:"left_out,omitempty"`
}

// ReachCell is one cell of a Reach: how many findings put Owner's canary
// in Place.
type ReachCell struct {
	Owner string `json:"owner"`
	Place string `json:"place"`
	// Findings are the findings the verdict counted (an expired
	// acceptance counts again, here too).
	Findings int `json:"findings"`
	// Accepted are the findings the target's known findings accept:
	// listed, never passed, not counted by the verdict.
	Accepted int `json:"accepted,omitempty"`
}

// ReachLeftOut counts findings a Reach leaves out, and says why.
type ReachLeftOut struct {
	Reason   string `json:"reason"`
	Findings int    `json:"findings"`
	Accepted int    `json:"accepted,omitempty"`
}

// The places of a Reach that belong to no tenant. Tenant names never hold
// parentheses, so these never collide with one.
const (
	// PlaceShared: a file or folder outside every tenant's home and
	// workdir (the server's cwd, TMPDIR, the system temp folder, a shared
	// folder).
	PlaceShared = "(shared place)"
	// PlaceSharedLog: a log or stream no tenant owns (the server's own
	// log).
	PlaceSharedLog = "(shared log)"
	// PlaceSharedConnection: an RPC connection no tenant owns.
	PlaceSharedConnection = "(shared connection)"
	// PlaceSharedStore: in a target's shared data folder, a row no tenant
	// owns, or a file beside the database.
	PlaceSharedStore = "(shared store)"
	// PlaceStrayProcess: a process carrying the owner's canary that
	// outlived the session, profile, plugin host or server that started it.
	PlaceStrayProcess = "(stray process)"
	// PlaceAnonymous: a caller with no credentials (a gateway route that
	// answered it with a tenant's data).
	PlaceAnonymous = "(anonymous)"
	// PlaceUnowned: a place of no tenant's that the finding does not
	// name further.
	PlaceUnowned = "(shared)"
)

// nonTenantPlaces are the places of no tenant's, in column order, with
// the words a sentence names them by.
var nonTenantPlaces = []struct{ name, words string }{
	{PlaceShared, "a shared place"},
	{PlaceSharedLog, "a shared log"},
	{PlaceSharedConnection, "a shared connection"},
	{PlaceSharedStore, "the shared store"},
	{PlaceStrayProcess, "a stray process"},
	{PlaceAnonymous, "an anonymous caller"},
	{PlaceUnowned, "a place of no tenant's"},
}

// The reasons a Reach leaves a finding out.
const (
	leftNotLeak      = "not a leak (harness, control, liveness)"
	leftAvailability = "availability (a tenant's load, not its data)"
	leftNoOwner      = "no canary's owner named (a call not refused, a guessable id)"
)

// ReachOf is the who-reached-whom matrix of c: every finding of every
// phase (repeats within a phase counted once, as the summary lists them)
// and every unexpired accepted finding, by the owner of its canary and
// the place it was found in.
func ReachOf(c *Certificate) Reach {
	type key struct{ owner, place string }
	counts := map[key]*ReachCell{}
	left := map[string]*ReachLeftOut{}
	add := func(f invariants.Finding, accepted bool) {
		n, a := 1, 0
		if accepted {
			n, a = 0, 1
		}
		if why := leftOutWhy(f); why != "" {
			l := left[why]
			if l == nil {
				l = &ReachLeftOut{Reason: why}
				left[why] = l
			}
			l.Findings += n
			l.Accepted += a
			return
		}
		k := key{f.Owner, reachPlace(f)}
		cell := counts[k]
		if cell == nil {
			cell = &ReachCell{Owner: k.owner, Place: k.place}
			counts[k] = cell
		}
		cell.Findings += n
		cell.Accepted += a
	}
	for i := range c.Scenarios {
		for _, p := range c.Scenarios[i].Phases {
			for _, f := range invariants.Dedup(p.Findings) {
				add(f, false)
			}
		}
	}
	seen := map[string]bool{}
	for _, a := range c.Accepted {
		k := a.Scenario + "\x00" + a.Phase + "\x00" + a.Finding.String()
		if a.Expired || seen[k] {
			continue // an expired one is still among its phase's findings
		}
		seen[k] = true
		add(a.Finding, true)
	}

	var r Reach
	tenant := map[string]bool{}
	for _, t := range c.Tenants {
		if !tenant[t.Name] {
			tenant[t.Name] = true
			r.Owners = append(r.Owners, t.Name)
			r.Places = append(r.Places, t.Name)
		}
	}
	var owners, places []string
	shared := map[string]bool{}
	for k := range counts {
		if !tenant[k.owner] && !slices.Contains(owners, k.owner) {
			owners = append(owners, k.owner)
		}
		switch {
		case isNonTenantPlace(k.place):
			shared[k.place] = true
		case !tenant[k.place] && !slices.Contains(places, k.place):
			places = append(places, k.place)
		}
	}
	slices.SortFunc(owners, func(a, b string) int {
		// The operator's row comes last.
		if (a == invariants.OperatorOwner) != (b == invariants.OperatorOwner) {
			if a == invariants.OperatorOwner {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	slices.Sort(places)
	r.Owners = append(r.Owners, owners...)
	r.Places = append(r.Places, places...)
	for _, p := range nonTenantPlaces {
		if shared[p.name] {
			r.Places = append(r.Places, p.name)
		}
	}
	for _, o := range r.Owners {
		for _, p := range r.Places {
			if cell := counts[key{o, p}]; cell != nil {
				r.Cells = append(r.Cells, *cell)
			}
		}
	}
	for _, why := range []string{leftNotLeak, leftAvailability, leftNoOwner} {
		if l := left[why]; l != nil {
			r.LeftOut = append(r.LeftOut, *l)
		}
	}
	return r
}

// leftOutWhy is why the matrix leaves f out, or "" when it is in.
func leftOutWhy(f invariants.Finding) string {
	switch {
	case !f.Invariant.Leak():
		return leftNotLeak
	case f.Invariant == invariants.Availability:
		return leftAvailability
	case f.Owner == "":
		return leftNoOwner
	}
	return ""
}

// reachPlace is the column of f: the tenant whose place held the canary,
// or the place of no tenant's that f names.
func reachPlace(f invariants.Finding) string {
	switch {
	case f.Invariant == invariants.ProcessEscape:
		// Its Tenant is the owner: the place is the process, which
		// should have ended.
		return PlaceStrayProcess
	case f.Tenant != "":
		return f.Tenant
	case f.Invariant == invariants.SharedStore:
		return PlaceSharedStore
	case f.Invariant == invariants.SharedPlace || f.Invariant == invariants.WriteScope:
		return PlaceShared
	case f.Invariant == invariants.RPC || f.Where.Frame != nil:
		return PlaceSharedConnection
	case f.Invariant == invariants.Text:
		return PlaceSharedLog
	case f.Where.Path != "":
		return PlaceShared
	case f.Where.Label != "":
		return PlaceSharedLog
	}
	return PlaceUnowned
}

func isNonTenantPlace(p string) bool {
	return strings.HasPrefix(p, "(")
}

// Cell is the cell of owner and place (zero when nothing counts there).
func (r Reach) Cell(owner, place string) ReachCell {
	for _, c := range r.Cells {
		if c.Owner == owner && c.Place == place {
			return c
		}
	}
	return ReachCell{Owner: owner, Place: place}
}

// Empty reports whether no finding is in the matrix (counted or accepted).
func (r Reach) Empty() bool { return len(r.Cells) == 0 }

// Counted is the number of findings in the matrix the verdict counts
// (accepted ones are not).
func (r Reach) Counted() int { return r.total(func(c ReachCell) int { return c.Findings }) }

// Sentence says the matrix in words, from its cells: "beta's data
// reached alpha and a shared place; no other tenant's data left its
// tenant", then what the known findings accept. LeftOutLine says what the
// matrix leaves out.
func (r Reach) Sentence() string {
	counted := r.reached(func(c ReachCell) int { return c.Findings })
	var parts []string
	if len(counted) == 0 {
		if r.accepted() == 0 {
			parts = append(parts, "no finding shows a tenant's data (or the operator's secrets) reaching another tenant or a shared place")
		} else {
			parts = append(parts, "no counted finding shows a tenant's data (or the operator's secrets) reaching another tenant or a shared place")
		}
	} else {
		parts = append(parts, strings.Join(counted, "; "))
		tenants, leaked := 0, 0
		for _, o := range r.Owners {
			if o == invariants.OperatorOwner {
				continue
			}
			tenants++
			for _, c := range r.Cells {
				if c.Owner == o && c.Findings > 0 {
					leaked++
					break
				}
			}
		}
		switch {
		case leaked == 0 && tenants > 0:
			parts = append(parts, "no tenant's data left its tenant")
		case leaked < tenants:
			parts = append(parts, "no other tenant's data left its tenant")
		}
	}
	if acc := r.reached(func(c ReachCell) int { return c.Accepted }); len(acc) > 0 {
		parts = append(parts, "accepted by the known findings (listed, not counted): "+strings.Join(acc, "; "))
	}
	return strings.Join(parts, "; ")
}

// reached is one clause per owner with a count (n of its cells): "beta's
// data reached alpha and a shared place".
func (r Reach) reached(n func(ReachCell) int) []string {
	var out []string
	for _, o := range r.Owners {
		var where []string
		for _, c := range r.Cells {
			if c.Owner == o && n(c) > 0 {
				where = append(where, placeWords(c.Place))
			}
		}
		if len(where) == 0 {
			continue
		}
		who := o + "'s data"
		if o == invariants.OperatorOwner {
			who = "the operator's secrets"
		}
		out = append(out, who+" reached "+andList(where))
	}
	return out
}

func (r Reach) accepted() int { return r.total(func(c ReachCell) int { return c.Accepted }) }

// total sums one count of every cell.
func (r Reach) total(count func(ReachCell) int) int {
	n := 0
	for _, c := range r.Cells {
		n += count(c)
	}
	return n
}

// LeftOutLine says what the matrix leaves out: "3 findings are not in
// the matrix: not a leak (harness, control, liveness): 2; no canary's
// owner named (...): 1", or "".
func (r Reach) LeftOutLine() string {
	total := 0
	var parts []string
	for _, l := range r.LeftOut {
		n := l.Findings + l.Accepted
		total += n
		s := fmt.Sprintf("%s: %d", l.Reason, n)
		if l.Accepted > 0 {
			s += fmt.Sprintf(" (%d of them accepted)", l.Accepted)
		}
		parts = append(parts, s)
	}
	if total == 0 {
		return ""
	}
	verb := "findings are"
	if total == 1 {
		verb = "finding is"
	}
	return fmt.Sprintf("%d %s not in the matrix: %s", total, verb, strings.Join(parts, "; "))
}

func placeWords(p string) string {
	for _, s := range nonTenantPlaces {
		if s.name == p {
			return s.words
		}
	}
	return p
}

// andList joins "a", "b" and "c" as "a, b and c".
func andList(xs []string) string {
	if len(xs) <= 1 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// MaxReachWidth is the widest line Text draws; a wider matrix becomes a
// list, one line per cell.
const MaxReachWidth = 100

// MaxReachRows is the most rows (owners) Text draws a matrix with; a
// matrix of more (many tenants) becomes a list, one line per cell.
const MaxReachRows = 8

// Text renders the matrix for a terminal: a table with aligned columns
// (owners down, places across, "-" for zero, "3 (+1)" for 3 counted
// findings and 1 accepted) when it fits MaxReachWidth and MaxReachRows
// (six tenants, the operator and two places of no tenant's do), else a list
// ("beta -> alpha: 3"), then the matrix in words and what it leaves out,
// wrapped to MaxReachWidth. The console, and a Go test's failure message,
// print it.
func (r Reach) Text() string {
	var b strings.Builder
	if r.Empty() {
		b.WriteString(wrap("who reached whom: "+r.Sentence(), "  "))
		if l := r.LeftOutLine(); l != "" {
			b.WriteString(wrap("  "+l, "  "))
		}
		return b.String()
	}
	if t, ok := r.table(); ok {
		b.WriteString("who reached whom (rows: whose canary; columns: where it was found):\n")
		b.WriteString(t)
	} else {
		b.WriteString("who reached whom (whose canary -> where it was found):\n")
		for _, c := range r.Cells {
			fmt.Fprintf(&b, "  %s -> %s: %s\n", c.Owner, c.Place, textCount(c))
		}
	}
	if r.accepted() > 0 {
		b.WriteString("  (+N): N findings the known findings accept: listed, not counted by the verdict\n")
	}
	b.WriteString(wrap("  "+r.Sentence(), "  "))
	if l := r.LeftOutLine(); l != "" {
		b.WriteString(wrap("  "+l, "  "))
	}
	return b.String()
}

// wrap breaks s at spaces into lines of at most MaxReachWidth runes (a
// longer word stays whole), each after the first starting with indent.
func wrap(s, indent string) string {
	var b strings.Builder
	line := ""
	for i, w := range strings.Split(s, " ") {
		switch {
		case i == 0:
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > MaxReachWidth:
			b.WriteString(line + "\n")
			line = indent + w
		default:
			line += " " + w
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}

// textCount is a cell on the console: "3", "3 (+1)", "- (+1)" or "-".
func textCount(c ReachCell) string {
	s := "-"
	if c.Findings > 0 {
		s = fmt.Sprint(c.Findings)
	}
	if c.Accepted > 0 {
		s += fmt.Sprintf(" (+%d)", c.Accepted)
	}
	return s
}

// table draws the matrix with aligned columns, and reports whether it fits
// MaxReachRows and MaxReachWidth.
func (r Reach) table() (string, bool) {
	if len(r.Owners) > MaxReachRows {
		return "", false
	}
	rows := [][]string{append([]string{""}, r.Places...)}
	for _, o := range r.Owners {
		row := []string{o}
		for _, p := range r.Places {
			row = append(row, textCount(r.Cell(o, p)))
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, s := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		line := " "
		for i, s := range row {
			line += " " + s + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			if i < len(row)-1 {
				line += " "
			}
		}
		line = strings.TrimRight(line, " ")
		if utf8.RuneCountInString(line) > MaxReachWidth {
			return "", false
		}
		b.WriteString(line + "\n")
	}
	return b.String(), true
}

// maxMarkdownPlaces is how many columns the summary's matrix draws in
// full; with more, the tenants with nothing in their row and column are
// left out of it (and counted).
const maxMarkdownPlaces = 10

// Markdown renders the matrix as a Markdown table (owners down, places
// across, "—" for zero), then the matrix in words; only the words when
// the matrix is empty.
func (r Reach) Markdown() string {
	var b strings.Builder
	if r.Empty() {
		b.WriteString(r.Sentence() + ".\n")
		if l := r.LeftOutLine(); l != "" {
			b.WriteString("\n" + l + ".\n")
		}
		return b.String()
	}
	owners, places := r.Owners, r.Places
	hidden := 0
	if len(places) > maxMarkdownPlaces {
		owners, places, hidden = r.busy()
	}
	b.WriteString("| whose canary ↓ · found in → |")
	for _, p := range places {
		b.WriteString(" " + cell(p) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(places)) + "\n")
	for _, o := range owners {
		b.WriteString("| " + cell(o) + " |")
		for _, p := range places {
			c := r.Cell(o, p)
			s := "—"
			if c.Findings > 0 {
				s = fmt.Sprint(c.Findings)
			}
			if c.Accepted > 0 {
				s += fmt.Sprintf(" (+%d accepted)", c.Accepted)
			}
			b.WriteString(" " + s + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	if hidden > 0 {
		fmt.Fprintf(&b, "The %d tenants with nothing in their row or column are left out of the table.\n", hidden)
	}
	b.WriteString(r.Sentence() + ".\n")
	if l := r.LeftOutLine(); l != "" {
		b.WriteString("\n" + l + ".\n")
	}
	return b.String()
}

// busy is the owners and places with a cell, and how many tenants that
// leaves out.
func (r Reach) busy() (owners, places []string, hidden int) {
	in := map[string]bool{}
	for _, c := range r.Cells {
		in["o"+c.Owner], in["p"+c.Place] = true, true
	}
	for _, o := range r.Owners {
		if in["o"+o] {
			owners = append(owners, o)
		}
	}
	for _, p := range r.Places {
		if in["p"+p] {
			places = append(places, p)
		}
	}
	for _, p := range r.Places {
		if !isNonTenantPlace(p) && !in["p"+p] && !in["o"+p] {
			hidden++
		}
	}
	return owners, places, hidden
}
