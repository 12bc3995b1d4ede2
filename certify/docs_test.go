package certify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/version"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// sampleFacts is what docs/sample-summary.md must agree with: the catalog's
// scenario IDs in order, the seeded faults' names and the release.
type sampleFacts struct {
	Scenarios []string
	Faults    []string
	Version   string // "v" + version.Semver
}

// codeFacts are the facts as the code has them today.
func codeFacts() sampleFacts {
	var faults []string
	for _, f := range scenarios.Faults() {
		faults = append(faults, f.Name)
	}
	var ids []string // in catalog order, as a run reports them
	for _, s := range scenarios.Default().All() {
		ids = append(ids, s.ID)
	}
	return sampleFacts{Scenarios: ids, Faults: faults, Version: "v" + version.Semver}
}

var (
	summaryRow   = regexp.MustCompile(`^\| ([^|]+?) \| [^|]+ \|`)
	powerLine    = regexp.MustCompile(`Detection power of this build: (\d+) of (\d+) seeded faults caught\.`)
	toolVersion  = regexp.MustCompile(`tenantcanary (v\S+) \(`)
	faultHeader  = regexp.MustCompile(`^FAULT\s+SCENARIO\s+EXPECTED\b`)
	verdictLine  = regexp.MustCompile(`(?m)^verdict: certified`)
	summaryTable = "| scenario | result | phases | requests | snapshots | findings | duration |"
)

// sampleDrift lists where the sample (docs/sample-summary.md's text)
// disagrees with want: its summary table's scenarios, its console's
// self-test table's faults, the fault count of its detection power line
// and the release its tool line names. None: the sample is current.
func sampleDrift(sample string, want sampleFacts) []string {
	var drift []string
	lines := strings.Split(sample, "\n")

	// The summary's scenario table: the header, its rule, then one row per
	// scenario.
	var ids []string
	if i := slices.Index(lines, summaryTable); i < 0 {
		drift = append(drift, "no scenario table in the summary")
	} else {
		for _, l := range lines[i+2:] {
			m := summaryRow.FindStringSubmatch(l)
			if m == nil {
				break
			}
			ids = append(ids, m[1])
		}
	}
	if !slices.Equal(ids, want.Scenarios) {
		drift = append(drift, fmt.Sprintf("scenarios %q, the catalog has %q", ids, want.Scenarios))
	}

	// The console's self-test table: one row per fault, up to the
	// "detection power:" line.
	var faults []string
	for i, l := range lines {
		if !faultHeader.MatchString(l) {
			continue
		}
		for _, r := range lines[i+1:] {
			f := strings.Fields(r)
			if len(f) == 0 || strings.HasPrefix(r, "detection power:") || strings.HasPrefix(r, "```") {
				break
			}
			faults = append(faults, f[0])
		}
		break
	}
	gotFaults, wantFaults := slices.Sorted(slices.Values(faults)), slices.Sorted(slices.Values(want.Faults))
	if !slices.Equal(gotFaults, wantFaults) {
		drift = append(drift, fmt.Sprintf("self-test faults %q, the fault table has %q", gotFaults, wantFaults))
	}
	if m := powerLine.FindStringSubmatch(sample); m == nil {
		drift = append(drift, "no detection power line in the summary")
	} else if m[2] != fmt.Sprint(len(want.Faults)) {
		drift = append(drift, fmt.Sprintf("%s seeded faults, the fault table has %d", m[2], len(want.Faults)))
	}

	if m := toolVersion.FindStringSubmatch(sample); m == nil {
		drift = append(drift, "no tenantcanary version in the summary")
	} else if m[1] != want.Version {
		drift = append(drift, fmt.Sprintf("made by tenantcanary %s, this is %s", m[1], want.Version))
	}
	if !verdictLine.MatchString(sample) {
		drift = append(drift, "the console's verdict is not certified")
	}
	return drift
}

// TestSampleSummaryMatchesTheCatalog: docs/sample-summary.md, written by
// docs/gen-sample.sh from a real run, shows today's catalog, fault table
// and release. A scenario or fault added (or the version bumped) without
// running the script again fails here.
func TestSampleSummaryMatchesTheCatalog(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "sample-summary.md"))
	require.NoError(t, err, "docs/gen-sample.sh writes it")
	sample, want := string(b), codeFacts()
	if drift := sampleDrift(sample, want); len(drift) > 0 {
		t.Fatalf("docs/sample-summary.md is stale: run docs/gen-sample.sh\n%s", strings.Join(drift, "\n"))
	}

	// Positive controls: the same sample against a changed catalog, fault
	// table or release is found stale.
	changed := map[string]func(*sampleFacts){
		"a scenario added":     func(f *sampleFacts) { f.Scenarios = append(slices.Clone(f.Scenarios), "a-new-scenario") },
		"a scenario moved":     func(f *sampleFacts) { f.Scenarios = slices.Concat(f.Scenarios[1:], f.Scenarios[:1]) },
		"a fault added":        func(f *sampleFacts) { f.Faults = append(slices.Clone(f.Faults), "a-new-fault") },
		"a fault renamed":      func(f *sampleFacts) { f.Faults = append([]string{"renamed"}, f.Faults[1:]...) },
		"the version bumped":   func(f *sampleFacts) { f.Version = "v99.0.0" },
		"no catalog in a file": func(f *sampleFacts) { f.Scenarios = nil },
	}
	for name, change := range changed {
		f := want
		change(&f)
		require.NotEmpty(t, sampleDrift(sample, f), "%s: the sample must be found stale", name)
	}
	require.NotEmpty(t, sampleDrift("", want), "an empty sample must be found stale")
}

// TestReadmeNamesTheRelease: the README's release, and the action's tag in
// the workflows of the README and docs/, are the code's version (a release
// tag is "v" + Semver).
func TestReadmeNamesTheRelease(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`This is release (\S+) `).FindStringSubmatch(string(b))
	require.NotNil(t, m, "README.md says which release it is (\"This is release X.Y.Z ...\")")
	require.Equal(t, version.Semver, m[1], "README.md's release")

	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	tag := regexp.MustCompile(`tenantcanary/tenantcanary@(v[^\s]+)|\bref: (v[^\s]+)`)
	seen := 0
	for _, file := range append([]string{filepath.Join("..", "README.md")}, docs...) {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range tag.FindAllStringSubmatch(string(b), -1) {
			seen++
			require.Equal(t, "v"+version.Semver, m[1]+m[2], "%s: the action's tag", file)
		}
	}
	require.NotZero(t, seen, "the README's workflows use the action at a tag")
}
