package certificate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// Findings of every kind of owner and place.
var (
	operatorFinding = invariants.Finding{Invariant: invariants.OperatorSecret, Tenant: "alpha", Owner: invariants.OperatorOwner,
		Kind: "serve_token", Where: invariants.Where{Label: "request #2 on alpha's provider"}}
	tempFinding = invariants.Finding{Invariant: invariants.SharedPlace, Owner: "beta", Kind: "provider_key",
		Where: invariants.Where{Path: "/tmp/agentd-cache/x.json"}}
	serverLogFinding = invariants.Finding{Invariant: invariants.Text, Owner: "beta", Kind: "provider_key",
		Where: invariants.Where{Label: "log of agentd"}}
	operatorConnFinding = invariants.Finding{Invariant: invariants.RPC, Owner: "beta", Kind: "memory",
		Where: invariants.Where{Label: "operator connection", Frame: intp(4)}}
	storeFinding = invariants.Finding{Invariant: invariants.SharedStore, Owner: "beta", Kind: "provider_key",
		Where: invariants.Where{Path: "data/gw.db", Part: "keys row 3 secret"}}
	escapeFinding = invariants.Finding{Invariant: invariants.ProcessEscape, Tenant: "beta", Owner: "beta", Kind: "provider_key",
		Where: invariants.Where{Label: "pid 4242 (sh)", Part: "environment"}, Detail: "the process outlived session s-1 of beta closed"}
	floodFinding = invariants.Finding{Invariant: invariants.Availability, Tenant: "alpha", Owner: "beta", Kind: "flood",
		Detail: "alpha's p99 grew 9x while beta flooded"}
	unrefusedFinding = invariants.Finding{Invariant: invariants.Authz, Tenant: "alpha",
		Where: invariants.Where{Label: "session.get"}, Detail: "a call naming beta's session was not refused"}
)

// everyKind is a certificate whose findings cover every row and column
// kind: beta's data in alpha (twice, one repeated), in a temp file, the
// server's log, an operator's connection, the shared store and a process
// that outlived its session; alpha's in beta; the operator's secret in
// alpha; one finding of beta's in alpha accepted, one expired (counted
// again); and findings the matrix leaves out.
func everyKind() *Certificate {
	second := leakFinding
	second.Where.Request = intp(4)
	r := leaking("every-kind")
	r.Phases[1].Findings = append(r.Phases[1].Findings, second, operatorFinding, tempFinding, serverLogFinding,
		operatorConnFinding, storeFinding, escapeFinding, controlFinding, floodFinding, unrefusedFinding)
	expired := authzFinding
	expired.Where.Label = "route \"old logs\""
	r.Phases[0].Findings = []invariants.Finding{expired}
	c := sample(r)
	c.Accepted = []AcceptedFinding{
		{Scenario: "every-kind", Phase: "cron", Finding: authzFinding, Reason: "upstream issue 123", Expires: "2030-01-31"},
		// The same accepted twice (the phase held it twice): once in the matrix.
		{Scenario: "every-kind", Phase: "cron", Finding: authzFinding, Reason: "upstream issue 123", Expires: "2030-01-31"},
		{Scenario: "every-kind", Phase: "turns", Finding: expired, Reason: "was fixed", Expires: "2020-01-31", Expired: true},
	}
	return c
}

func TestReachOfCountsByOwnerAndPlace(t *testing.T) {
	t.Parallel()
	r := ReachOf(everyKind())
	require.Equal(t, []string{"default", "alpha", "beta", "operator"}, r.Owners)
	require.Equal(t, []string{"default", "alpha", "beta",
		PlaceShared, PlaceSharedLog, PlaceSharedConnection, PlaceSharedStore, PlaceStrayProcess}, r.Places)
	require.Equal(t, []ReachCell{
		{Owner: "alpha", Place: "beta", Findings: 1},
		// Two request findings (one repeated, counted once) and the
		// expired acceptance; the accepted one apart.
		{Owner: "beta", Place: "alpha", Findings: 3, Accepted: 1},
		{Owner: "beta", Place: PlaceShared, Findings: 1},
		{Owner: "beta", Place: PlaceSharedLog, Findings: 1},
		{Owner: "beta", Place: PlaceSharedConnection, Findings: 1},
		{Owner: "beta", Place: PlaceSharedStore, Findings: 1},
		{Owner: "beta", Place: PlaceStrayProcess, Findings: 1},
		{Owner: "operator", Place: "alpha", Findings: 1},
	}, r.Cells)
	require.Equal(t, []ReachLeftOut{
		{Reason: leftNotLeak, Findings: 1},
		{Reason: leftAvailability, Findings: 1},
		{Reason: leftNoOwner, Findings: 1},
	}, r.LeftOut)
	require.Equal(t, ReachCell{Owner: "default", Place: "alpha"}, r.Cell("default", "alpha"), "an empty cell is zero")
	require.Equal(t, "alpha's data reached beta; "+
		"beta's data reached alpha, a shared place, a shared log, a shared connection, the shared store and a stray process; "+
		"the operator's secrets reached alpha; no other tenant's data left its tenant; "+
		"accepted by the known findings (listed, not counted): beta's data reached alpha", r.Sentence())
	require.Equal(t, "3 findings are not in the matrix: not a leak (harness, control, liveness): 1; "+
		"availability (a tenant's load, not its data): 1; no canary's owner named (a call not refused, a guessable id): 1", r.LeftOutLine())

	// Every finding the verdict counted is in a cell or left out, counted.
	c := everyKind()
	counted := 0
	for _, rep := range c.Scenarios {
		for _, p := range rep.Phases {
			counted += len(invariants.Dedup(p.Findings))
		}
	}
	sum := 0
	for _, cell := range r.Cells {
		sum += cell.Findings
	}
	for _, l := range r.LeftOut {
		sum += l.Findings
	}
	require.Equal(t, counted, sum)
}

func TestReachSaysWhoDidNotLeak(t *testing.T) {
	t.Parallel()
	only := func(fs ...invariants.Finding) Reach {
		r := leaking("x")
		r.Phases[1].Findings = fs
		return ReachOf(sample(r))
	}
	// The picture: beta's data reached alpha, and no one else's.
	r := only(leakFinding)
	require.Equal(t, "beta's data reached alpha; no other tenant's data left its tenant", r.Sentence())
	require.Empty(t, r.LeftOutLine())
	// Only the operator's: no tenant's data left its tenant.
	require.Equal(t, "the operator's secrets reached alpha; no tenant's data left its tenant", only(operatorFinding).Sentence())
	// Every tenant's data left it: no "no other" clause.
	all := leakFinding
	all.Owner, all.Tenant = "default", "beta"
	require.Equal(t, "default's data reached beta; alpha's data reached beta; beta's data reached alpha",
		only(leakFinding, fileFinding, all).Sentence())
	// Nothing but what the matrix leaves out.
	r = only(controlFinding)
	require.True(t, r.Empty())
	require.Equal(t, "1 finding is not in the matrix: not a leak (harness, control, liveness): 1", r.LeftOutLine())
}

func TestReachWithNoFindings(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]*Certificate{
		"certified":   sample(passing("a"), passing("b")),
		"nothing ran": sample(),
	} {
		r := ReachOf(c)
		require.True(t, r.Empty(), name)
		require.Empty(t, r.Cells, name)
		require.Empty(t, r.LeftOut, name)
		want := "no finding shows a tenant's data (or the operator's secrets) reaching another tenant or a shared place"
		require.Equal(t, want, r.Sentence(), name)
		require.Equal(t, "who reached whom: no finding shows a tenant's data (or the operator's secrets) reaching another\n"+
			"  tenant or a shared place\n", r.Text(), name)
		require.Equal(t, want+".\n", r.Markdown(), name)
	}
	// The console shows no matrix when there is nothing in it: the verdict
	// line says it.
	var table, md bytes.Buffer
	c := sample(passing("a"))
	require.NoError(t, c.WriteTable(&table))
	require.NotContains(t, table.String(), "who reached whom")
	require.NoError(t, c.WriteMarkdown(&md))
	require.Contains(t, md.String(), "\n### Who reached whom\n\nno finding shows a tenant's data (or the operator's secrets) reaching another tenant or a shared place.\n")
}

func TestReachOfAcceptedOnly(t *testing.T) {
	t.Parallel()
	c := New(Target{Name: "testgw"}, []Tenant{{Name: "alpha"}, {Name: "beta"}}, []scenarios.Report{passing("gateway-tenants"), gatewayLeak()}, 0)
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	c.Accept(ks, c.Date)
	require.Equal(t, Certified, c.Verdict)
	r := ReachOf(c)
	require.False(t, r.Empty(), "an accepted finding is listed, never hidden")
	require.Equal(t, []ReachCell{{Owner: "beta", Place: "alpha", Accepted: 1}}, r.Cells)
	require.Equal(t, "no counted finding shows a tenant's data (or the operator's secrets) reaching another tenant or a shared place; "+
		"accepted by the known findings (listed, not counted): beta's data reached alpha", r.Sentence())
	require.Contains(t, r.Text(), "\n         alpha   beta\n  alpha  -       -\n  beta   - (+1)  -\n")
	require.Contains(t, r.Text(), "(+N): N findings the known findings accept")
	require.Contains(t, r.Markdown(), "| beta | — (+1 accepted) | — |\n")
}

func TestReachInCertificateJSON(t *testing.T) {
	t.Parallel()
	c := everyKind()
	var buf bytes.Buffer
	require.NoError(t, c.WriteJSON(&buf))
	require.Contains(t, buf.String(), "\n  \"reach\": {\n    \"owners\": [\n")
	var js struct {
		Reach *Reach `json:"reach"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &js))
	require.NotNil(t, js.Reach)
	require.Equal(t, ReachOf(c), *js.Reach)

	// The certificate reads back whole, and gives the same matrix.
	back, err := ReadJSON(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, c, back)
	require.Equal(t, *js.Reach, ReachOf(back))

	// A certificate from an older build (no "reach") reads, and its
	// matrix comes from its findings.
	var old map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &old))
	delete(old, "reach")
	data, err := json.Marshal(old)
	require.NoError(t, err)
	back, err = ReadJSON(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, *js.Reach, ReachOf(back))

	// The JSON says the matrix as it is when written: after Accept, not
	// before.
	c = New(Target{Name: "testgw"}, []Tenant{{Name: "alpha"}, {Name: "beta"}}, []scenarios.Report{gatewayLeak()}, 0)
	ks, err := LoadKnownFindings(writeKnown(t, knownLogs))
	require.NoError(t, err)
	c.Accept(ks, c.Date)
	buf.Reset()
	require.NoError(t, c.WriteJSON(&buf))
	require.NoError(t, json.Unmarshal(buf.Bytes(), &js))
	require.Equal(t, []ReachCell{{Owner: "beta", Place: "alpha", Accepted: 1}}, js.Reach.Cells)
}

func TestReachMarkdownOpensTheFindings(t *testing.T) {
	t.Parallel()
	c := everyKind()
	var buf bytes.Buffer
	require.NoError(t, c.WriteMarkdown(&buf))
	md := buf.String()
	want := "\n### Who reached whom\n\n" +
		"| whose canary ↓ · found in → | default | alpha | beta | (shared place) | (shared log) | (shared connection) | (shared store) | (stray process) |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
		"| default | — | — | — | — | — | — | — | — |\n" +
		"| alpha | — | — | 1 | — | — | — | — | — |\n" +
		"| beta | — | 3 (+1 accepted) | — | 1 | 1 | 1 | 1 | 1 |\n" +
		"| operator | — | 1 | — | — | — | — | — | — |\n" +
		"\n" +
		"alpha's data reached beta; beta's data reached alpha, a shared place, a shared log, a shared connection, the shared store and a stray process; " +
		"the operator's secrets reached alpha; no other tenant's data left its tenant; " +
		"accepted by the known findings (listed, not counted): beta's data reached alpha.\n" +
		"\n" +
		"3 findings are not in the matrix: not a leak (harness, control, liveness): 1; availability (a tenant's load, not its data): 1; " +
		"no canary's owner named (a call not refused, a guessable id): 1.\n" +
		"\n### Leaks ("
	require.Contains(t, md, want)
	// After the scenarios' table, before every list of findings.
	at := strings.Index(md, "### Who reached whom")
	require.Less(t, strings.Index(md, "| scenario |"), at)
	for _, h := range []string{"### Leaks", "### Accepted findings", "### Harness, target"} {
		require.Less(t, at, strings.Index(md, h), h)
	}
}

// manyTenants is a certificate of n tenants t00, t01, ... where t01's
// data reached t00 (twice, one accepted) and a shared place, and the
// operator's secret reached t02.
func manyTenants(n int) *Certificate {
	var ts []Tenant
	for i := range n {
		ts = append(ts, Tenant{Name: fmt.Sprintf("t%02d", i)})
	}
	r := leaking("many")
	in00 := leakFinding
	in00.Owner, in00.Tenant = "t01", "t00"
	temp := tempFinding
	temp.Owner = "t01"
	op := operatorFinding
	op.Tenant = "t02"
	r.Phases[1].Findings = []invariants.Finding{in00, temp, op}
	c := New(Target{Name: "agentd"}, ts, []scenarios.Report{r}, 0)
	accepted := in00
	accepted.Where.Request = intp(9)
	c.Accepted = []AcceptedFinding{{Scenario: "many", Phase: "cron", Finding: accepted, Reason: "r", Expires: "2030-01-01"}}
	return c
}

func TestReachTextOnTheConsole(t *testing.T) {
	t.Parallel()
	// A few tenants: a table, aligned, after the scenarios' table and
	// before the verdict.
	r := leaking("few")
	second := leakFinding
	second.Where.Request = intp(4)
	r.Phases[1].Findings = append(r.Phases[1].Findings, second, operatorFinding, tempFinding, escapeFinding, controlFinding)
	var table bytes.Buffer
	require.NoError(t, sample(r).WriteTable(&table))
	require.Contains(t, table.String(), "\n"+
		"who reached whom (rows: whose canary; columns: where it was found):\n"+
		"            default  alpha  beta  (shared place)  (stray process)\n"+
		"  default   -        -      -     -               -\n"+
		"  alpha     -        -      1     -               -\n"+
		"  beta      -        2      -     1               1\n"+
		"  operator  -        1      -     -               -\n"+
		"  alpha's data reached beta; beta's data reached alpha, a shared place and a stray process; the\n"+
		"  operator's secrets reached alpha; no other tenant's data left its tenant\n"+
		"  1 finding is not in the matrix: not a leak (harness, control, liveness): 1\n"+
		"why few: ", table.String())
	require.Less(t, strings.Index(table.String(), "SCENARIO"), strings.Index(table.String(), "who reached whom"))
	require.Less(t, strings.Index(table.String(), "who reached whom"), strings.Index(table.String(), "verdict: "))
}

func TestReachTextFitsTheConsole(t *testing.T) {
	t.Parallel()
	fits := func(t *testing.T, text string) {
		t.Helper()
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			require.LessOrEqual(t, utf8.RuneCountInString(l), MaxReachWidth, l)
		}
	}
	// Six tenants (the names a tenant set gives), the operator, two
	// places of no tenant's, accepted findings: still a table within 100
	// columns.
	var ts []Tenant
	for _, n := range []string{"default", "alpha", "beta", "gamma", "delta", "epsilon"} {
		ts = append(ts, Tenant{Name: n})
	}
	r := leaking("six")
	r.Phases[1].Findings = []invariants.Finding{leakFinding, tempFinding, escapeFinding, operatorFinding}
	c := New(Target{Name: "agentd"}, ts, []scenarios.Report{r}, 0)
	for range 12 {
		c.Accepted = append(c.Accepted, AcceptedFinding{Scenario: "six", Phase: "cron", Finding: authzFinding, Reason: "r", Expires: "2030-01-01"})
		c.Accepted[len(c.Accepted)-1].Finding.Detail += strings.Repeat("x", len(c.Accepted))
	}
	text := ReachOf(c).Text()
	t.Log("\n" + text)
	require.Contains(t, text, "(rows: whose canary; columns: where it was found)")
	require.Regexp(t, `(?m)^  beta\s+-\s+1 \(\+12\)\s+-\s+-\s+-\s+-\s+1\s+1$`, text)
	fits(t, text)

	// Twelve tenants: a list, one line per cell, and the words.
	text = ReachOf(manyTenants(12)).Text()
	t.Log("\n" + text)
	require.Equal(t, "who reached whom (whose canary -> where it was found):\n"+
		"  t01 -> t00: 1 (+1)\n"+
		"  t01 -> (shared place): 1\n"+
		"  operator -> t02: 1\n"+
		"  (+N): N findings the known findings accept: listed, not counted by the verdict\n"+
		"  t01's data reached t00 and a shared place; the operator's secrets reached t02; no other tenant's\n"+
		"  data left its tenant; accepted by the known findings (listed, not counted): t01's data reached t00\n", text)
	fits(t, text)

	// Few tenants with long names: too wide for a table, a list.
	c = manyTenants(3)
	for i := range c.Tenants {
		c.Tenants[i].Name += strings.Repeat("-long", 6)
	}
	text = ReachOf(c).Text()
	require.Contains(t, text, "(whose canary -> where it was found)")
	require.Contains(t, text, "\n  t01 -> (shared place): 1\n")
	fits(t, text)
}

func TestReachMarkdownWithManyTenants(t *testing.T) {
	t.Parallel()
	md := ReachOf(manyTenants(30)).Markdown()
	// Only the rows and columns with a count.
	require.True(t, strings.HasPrefix(md, "| whose canary ↓ · found in → | t00 | t02 | (shared place) |\n"+
		"|---|---:|---:|---:|\n"+
		"| t01 | 1 (+1 accepted) | — | 1 |\n"+
		"| operator | — | 1 | — |\n"+
		"\nThe 27 tenants with nothing in their row or column are left out of the table.\n"), md)
	// Few tenants: every one of them, empty rows included.
	md = ReachOf(manyTenants(4)).Markdown()
	require.Contains(t, md, "| whose canary ↓ · found in → | t00 | t01 | t02 | t03 | (shared place) |\n")
	require.Contains(t, md, "| t03 | — | — | — | — | — |\n")
}

// TestMergeMergesTheReach: the merged certificate's matrix is the sum of
// its shards' matrices, in its summary and in its JSON.
func TestMergeMergesTheReach(t *testing.T) {
	t.Parallel()
	one := leaking("a") // beta -> alpha, alpha -> beta
	two := leaking("b")
	two.Phases[1].Findings = []invariants.Finding{leakFinding, operatorFinding, tempFinding, controlFinding}
	s1 := shardOf(1, 2, one, passing("c"))
	s2 := shardOf(2, 2, two)
	s2.Accepted = []AcceptedFinding{{Scenario: "b", Phase: "cron", Finding: authzFinding, Reason: "r", Expires: "2030-01-31"}}
	m, err := Merge([]*Certificate{s2, s1})
	require.NoError(t, err)

	type key struct{ owner, place string }
	sum := map[key]ReachCell{}
	left := map[string]int{}
	for _, s := range []*Certificate{s1, s2} {
		r := ReachOf(s)
		for _, c := range r.Cells {
			k := key{c.Owner, c.Place}
			x := sum[k]
			x.Owner, x.Place = c.Owner, c.Place
			x.Findings += c.Findings
			x.Accepted += c.Accepted
			sum[k] = x
		}
		for _, l := range r.LeftOut {
			left[l.Reason] += l.Findings
		}
	}
	r := ReachOf(m)
	require.Len(t, r.Cells, len(sum))
	for _, c := range r.Cells {
		require.Equal(t, sum[key{c.Owner, c.Place}], c)
	}
	for _, l := range r.LeftOut {
		require.Equal(t, left[l.Reason], l.Findings, l.Reason)
	}
	require.Equal(t, ReachCell{Owner: "beta", Place: "alpha", Findings: 2, Accepted: 1}, r.Cell("beta", "alpha"),
		"one from each shard, and the second's accepted one")
	require.Equal(t, ReachCell{Owner: "operator", Place: "alpha", Findings: 1}, r.Cell("operator", "alpha"))

	var buf bytes.Buffer
	require.NoError(t, m.WriteJSON(&buf))
	var js struct {
		Reach Reach `json:"reach"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &js))
	require.Equal(t, r, js.Reach)
	buf.Reset()
	require.NoError(t, m.WriteMarkdown(&buf))
	require.Contains(t, buf.String(), "| beta | — | 2 (+1 accepted) | — | 1 |\n")
}

// TestReachHasAnAnonymousColumn: a tenant's data a gateway route gave a
// caller with no credentials (the route findings' tenant
// scenarios.Anonymous) has a column of its own, named in the sentence.
func TestReachHasAnAnonymousColumn(t *testing.T) {
	t.Parallel()
	require.Equal(t, scenarios.Anonymous, PlaceAnonymous)
	c := &Certificate{Scenarios: []scenarios.Report{{ID: "gateway-routes", Phases: []scenarios.PhaseReport{{Name: "anonymous-routes",
		Findings: []invariants.Finding{{Invariant: invariants.Authz, Tenant: scenarios.Anonymous, Owner: "alpha", Kind: "model"}}}}}}}
	r := ReachOf(c)
	require.Equal(t, []ReachCell{{Owner: "alpha", Place: PlaceAnonymous, Findings: 1}}, r.Cells)
	require.Contains(t, r.Places, PlaceAnonymous)
	require.Contains(t, r.Sentence(), "alpha's data reached an anonymous caller")
}
