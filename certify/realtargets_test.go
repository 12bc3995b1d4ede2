package certify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/certify"
	"github.com/tenantcanary/tenantcanary/harness"
)

// hermesRuns are the parts of docs/real-targets.md that
// docs/gen-real-targets.sh writes from a Hermes run: the file as shipped,
// and its diagnostic copy (--diagnostic).
var hermesRuns = []string{"hermes-run", "hermes-diagnostic-run"}

// runMarkers are the lines around block's part of the doc.
func runMarkers(block string) (begin, end string) {
	return "<!-- BEGIN " + block + ": written by docs/gen-real-targets.sh from a run; edit the script, not this block -->",
		"<!-- END " + block + " -->"
}

// hermesRunDrift lists where the run recorded in doc's block (doc is the
// text of docs/real-targets.md) disagrees with the catalog's scenario IDs,
// in order: the run's scenario table (summary.md's, between the markers)
// must name exactly them. None: the record is current.
func hermesRunDrift(doc, block string, catalog []string) []string {
	begin, end := runMarkers(block)
	_, rest, ok := strings.Cut(doc, begin)
	part, _, closed := strings.Cut(rest, end)
	if !ok || !closed {
		return []string{"no " + block + " block (" + begin + " ... " + end + ")"}
	}
	lines := strings.Split(part, "\n")
	i := slices.Index(lines, summaryTable)
	if i < 0 {
		return []string{"no scenario table in the " + block + " block"}
	}
	var ids []string
	for _, l := range lines[i+2:] {
		m := summaryRow.FindStringSubmatch(l)
		if m == nil {
			break
		}
		ids = append(ids, m[1])
	}
	if !slices.Equal(ids, catalog) {
		return []string{fmt.Sprintf("%s: the run's scenarios %q, the catalog has %q", block, ids, catalog)}
	}
	return nil
}

// TestRealTargetsMatchesTheCatalog: the Hermes runs docs/real-targets.md
// records (written by docs/gen-real-targets.sh, by hand: it needs Hermes)
// ran today's catalog. A scenario added, removed, renamed or moved since
// fails here, until the script is run again.
func TestRealTargetsMatchesTheCatalog(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "real-targets.md"))
	require.NoError(t, err)
	doc, catalog := string(b), codeFacts().Scenarios
	for _, block := range hermesRuns {
		if drift := hermesRunDrift(doc, block, catalog); len(drift) > 0 {
			t.Fatalf("docs/real-targets.md's Hermes run is stale: run docs/gen-real-targets.sh (and with --diagnostic) against Hermes (docs/real-targets.md, Hermes)\n%s", strings.Join(drift, "\n"))
		}

		// Positive controls: the same record against a changed catalog,
		// and a doc without the block, are found stale.
		changed := map[string][]string{
			"a scenario added":   append(slices.Clone(catalog), "a-new-scenario"),
			"a scenario removed": catalog[1:],
			"a scenario renamed": append([]string{"renamed"}, catalog[1:]...),
			"a scenario moved":   slices.Concat(catalog[1:], catalog[:1]),
			"no catalog":         nil,
		}
		for name, c := range changed {
			require.NotEmpty(t, hermesRunDrift(doc, block, c), "%s, %s: the record must be found stale", block, name)
		}
		require.NotEmpty(t, hermesRunDrift("", block, catalog), "a doc without the %s block must be found stale", block)
		_, end := runMarkers(block)
		unclosed, _, _ := strings.Cut(doc, end)
		require.NotEmpty(t, hermesRunDrift(unclosed, block, catalog), "a %s block without its end must be found stale", block)
	}
}

// TestHermesTargetReachesNoNetwork keeps what docs/real-targets.md says of
// examples/targets/hermes/target.yaml: Hermes's start-up installs and its
// tirith download are off, both in every profile's config.yaml and in
// every target process's environment (as shipped, they used up Hermes's
// 30 s wait for a session's agent on a machine with no network), and the
// file offers no gateway backend (Hermes serves one profile's API per
// gateway process), so the gateway family is skipped with the reason.
func TestHermesTargetReachesNoNetwork(t *testing.T) {
	t.Parallel()
	tg, err := certify.LoadTarget(filepath.Join("..", "examples", "targets", "hermes", "target.yaml"))
	require.NoError(t, err)
	require.Equal(t, "1", tg.Env["HERMES_DISABLE_LAZY_INSTALLS"])
	require.Equal(t, "false", tg.Env["TIRITH_ENABLED"])
	security, ok := tg.Dialect.Config["security"].(map[string]any)
	require.True(t, ok, "dialect.config.security: %v", tg.Dialect.Config["security"])
	require.Equal(t, false, security["allow_lazy_installs"])
	require.Equal(t, false, security["tirith_enabled"])

	ok, why := tg.Supports(harness.BackendGateway)
	require.False(t, ok, "a gateway backend Hermes cannot serve for several profiles")
	require.Contains(t, why, "one profile's OpenAI-compatible API per gateway process", "the skip says Hermes's reason")
	for _, b := range []harness.Backend{harness.BackendStdio, harness.BackendServe} {
		ok, why := tg.Supports(b)
		require.True(t, ok, "%s: %s", b, why)
	}
}
