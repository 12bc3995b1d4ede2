package placeholder

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/golden"
)

var update = flag.Bool("update", false, "rewrite docs/placeholders.md from the vocabularies")

func TestStringFillsKnownNamesOnly(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"root": "/r", "port": "0", "x1": "y"}
	assert.Equal(t, "/r/a:0 {nope} {Root} {\"json\": 1} y", String("{root}/a:{port} {nope} {Root} {\"json\": 1} {x1}", vars))
	assert.Equal(t, "no braces", String("no braces", vars))
	// A value is never filled again.
	assert.Equal(t, "{port}", String("{root}", map[string]string{"root": "{port}", "port": "0"}))
	assert.Equal(t, []string{"srv", "--root", "/r"}, Strings([]string{"srv", "--root", "{root}"}, vars))
	assert.Equal(t, []string{"a", "b", "a"}, Names("{a}{b} {a} {B}"))
	assert.Equal(t, "a", Sole("{a}"))
	assert.Empty(t, Sole(" {a}"))
	assert.Empty(t, Sole("{a}{b}"))
}

func TestValueKeepsTypesAndDropsAbsentSolePlaceholders(t *testing.T) {
	t.Parallel()
	vars := map[string]any{"env": map[string]any{"A": "1"}, "launch": true, "n": 3, "empty": "", "s": "v"}
	in := map[string]any{
		"env": "{env}", "launch": "{launch}", "mixed": "n={n} s={s}", "gone": "{missing}", "blank": "{empty}",
		"list": []any{"{s}", "{missing}", 7}, "keep": "{missing} too",
	}
	out, keep := Value(in, vars)
	require.True(t, keep)
	assert.Equal(t, map[string]any{
		"env": map[string]any{"A": "1"}, "launch": true, "mixed": "n=3 s=v",
		"list": []any{"v", 7}, "keep": "{missing} too",
	}, out)
	_, keep = Value("{missing}", vars)
	assert.False(t, keep)
}

func TestCheckNamesWhatIsUnknown(t *testing.T) {
	t.Parallel()
	require.NoError(t, Argv.Check([]string{"srv", "--host", "{host}", "--port={port}", `{"json": 1}`}))
	err := Argv.Check([]string{"srv", "{hots}", "{Root}", "{cron-interval}", "{hots}"})
	require.Error(t, err)
	assert.Equal(t, "unknown placeholder(s) {Root} {cron-interval} {hots} in a command line (known: {host} {port} {cron_interval} {root} {redis_url} {postgres_url} {replica} {<name>_url})", err.Error())
	require.NoError(t, Config.Check(map[string]any{"a": []any{"{model}", map[string]any{"b": "{root}/x"}}}))
	assert.ErrorContains(t, Config.Check(map[string]any{"a": []any{"{modle}"}}), "{modle}")
	require.NoError(t, Route.Check("/v1/sessions/{session_id}/files/{file_id}"))
	assert.ErrorContains(t, Route.Check("/v1/{session}/{_id}"), "unknown placeholder(s) {session} in an llm_gateway route (known: {<name>_id})")
	require.NoError(t, Chain.With("job").Check("cp {victim}/{soul} {home}/{job}"))
	assert.ErrorContains(t, Chain.Check("{job}"), "{job}")
}

// TestVocabulariesAreWellFormed: every name is a placeholder name, given
// once per vocabulary, with a one-line doc.
func TestVocabulariesAreWellFormed(t *testing.T) {
	t.Parallel()
	for _, v := range Vocabularies {
		require.NotEmpty(t, v.Of)
		seen := map[string]bool{}
		for _, x := range v.Vars {
			assert.Equal(t, x.Name, Sole("{"+x.Name+"}"), "%s: %q is no placeholder name", v.Of, x.Name)
			assert.False(t, seen[x.Name], "%s: {%s} twice", v.Of, x.Name)
			seen[x.Name] = true
			assert.NotEmpty(t, x.Doc, "%s: {%s} has no doc", v.Of, x.Name)
			assert.NotContains(t, x.Doc, "\n")
			assert.NotContains(t, x.Doc, "|")
		}
		assert.True(t, len(v.Vars) > 0 || v.Suffix != "", "%s: admits nothing", v.Of)
	}
}

// TestPlaceholdersDocIsCurrent: docs/placeholders.md is the vocabularies,
// rendered. Regenerate it with
// `go test ./internal/placeholder -run TestPlaceholdersDocIsCurrent -update`.
func TestPlaceholdersDocIsCurrent(t *testing.T) {
	golden.Check(t, filepath.Join("..", ".."), "docs/placeholders.md", renderDoc(), *update,
		"go test ./internal/placeholder -run TestPlaceholdersDocIsCurrent -update")
}

func renderDoc() string {
	var b strings.Builder
	b.WriteString("# Placeholders\n\n")
	b.WriteString("<!-- Generated from internal/placeholder's vocabularies by `go test ./internal/placeholder -run TestPlaceholdersDocIsCurrent -update`: edit the vocabularies, not this file. -->\n\n")
	b.WriteString("A template names a value as `{name}` (lower-case letters, digits and `_`, starting with a letter).\n")
	b.WriteString("Each kind of template has its own names, listed below. Filling leaves a name it has no value for\n")
	b.WriteString("as written. In a YAML template (dialect.config, a shared config's sections, a probe plugin's\n")
	b.WriteString("install config) a string that is exactly one placeholder becomes the value itself (a mapping, a\n")
	b.WriteString("boolean), and is dropped when the value is absent or empty. A target file that names an unknown\n")
	b.WriteString("placeholder in a command line, a config template or a route is refused when it is loaded.\n")
	for _, v := range Vocabularies {
		fmt.Fprintf(&b, "\n## %s\n\n", v.Of)
		if v.Suffix != "" {
			fmt.Fprintf(&b, "Any `{<name>%s}`.\n", v.Suffix)
			if len(v.Vars) > 0 {
				b.WriteString("\n")
			}
		}
		if len(v.Vars) > 0 {
			b.WriteString("| placeholder | value |\n|---|---|\n")
			for _, x := range v.Vars {
				fmt.Fprintf(&b, "| `{%s}` | %s |\n", x.Name, x.Doc)
			}
		}
	}
	return b.String()
}
