package main

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsageListsEveryFlag: the usage --help prints (one source: the
// commands' synopses) names every flag of the run, of merge and of
// fakellm, so no copy of it can lag behind a new flag.
func TestUsageListsEveryFlag(t *testing.T) {
	t.Parallel()
	code, help, _ := runCLI(t, "--help")
	require.Equal(t, 0, code)
	usage, _, ok := strings.Cut(help, "\nflags of a run:")
	require.True(t, ok, "--help prints the usage, then the run's flags:\n%s", help)
	run, _ := certifyFlags()
	merge, _ := mergeFlags()
	fakellm, _ := fakellmFlags()
	for _, fs := range []*flag.FlagSet{run, merge, fakellm} {
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			n++
			require.Regexp(t, named(f.Name), usage, "%s --%s is not in --help's usage", fs.Name(), f.Name)
		})
		require.Positive(t, n, fs.Name())
	}
	require.Contains(t, usage, "--seed N", "the copy that lacked --seed")
	require.Contains(t, usage, "canary-run target check", "the copy that lacked target")
	// The usage error of a run names every flag too.
	run.VisitAll(func(f *flag.Flag) { require.Regexp(t, named(f.Name), runUsage) })
}

// named matches flag name in a usage line: --name, then a space, a
// bracket or the end.
func named(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)(^|[\[ ])--` + regexp.QuoteMeta(name) + `([\] ]|$)`)
}
