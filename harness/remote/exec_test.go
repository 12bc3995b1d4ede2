package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileWords are values a command line must carry as they are: every
// character a POSIX shell gives a meaning to, and the ways out of a
// single-quoted word.
var hostileWords = []string{
	"", " ", "plain", "it's", "'", "''", `'\''`, `"`, `"$HOME"`, "$HOME", "${HOME}", "$(id)", "`id`",
	`\`, `\\'`, "a\nb", "\n", "\t", "*", "/proc/[0-9]*", "~", "-n", "--", "a;b", "a && b", "a | b",
	"a > /tmp/x", "#comment", "!", "{a,b}", "\x01\x7f\xff", "héllo", "$'\\x41'", "%s%n",
}

// Every hostile word, quoted, reaches a real sh as itself: sh -c
// 'printf %s <quoted>' prints exactly the word, and nothing the word
// holds runs (a marker file a "$(touch ...)" would make stays absent).
func TestQuoteCarriesHostileWordsThroughARealShell(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	words := append(hostileWords, "$(touch "+marker+")", "`touch "+marker+"`", "'; touch "+marker+"; '")
	spec := &Spec{Exec: []string{"sh", "-c", "{command}"}}
	require.NoError(t, spec.Validate())
	for _, w := range words {
		out, err := spec.Shell(t.Context(), MustCommand("printf", "%s", w), nil, nil)
		require.NoError(t, err, "%q", w)
		assert.Equal(t, w, out, "the word %q came out changed", w)
	}
	// Several words in one command line stay apart.
	out, err := spec.Shell(t.Context(), MustCommand("printf", "[%s]", "a b", "", "c'd")+" && "+MustCommand("printf", "%s", "|"), nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "[a b][][c'd]|", out)
	assert.NoFileExists(t, marker, "nothing inside a quoted word ran")

	_, err = Quote("a\x00b")
	assert.ErrorIs(t, err, ErrNUL)
	_, err = spec.Shell(t.Context(), "printf x\x00", nil, nil)
	assert.ErrorIs(t, err, ErrNUL)
}

// remote.exec takes {command} as one whole element, and nothing else of
// a placeholder; the check of a transport that splits the command line
// (ssh joins its arguments: sh -c then gets the first word alone) fails
// and says why.
func TestExecIsValidatedAndChecked(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{
		{"ssh", "host"},
		{"ssh", "host", "sudo {command}"},
		{"sh", "-c", "{command}", "{command}"},
		{"ssh", "{path}", "{command}"},
		{"ssh", "host", "{Command}"},
	} {
		err := (&Spec{Exec: bad}).Validate()
		assert.Error(t, err, "%q", bad)
		if err != nil {
			assert.Contains(t, err.Error(), "remote.exec", "%q", bad)
		}
	}
	good := &Spec{Exec: []string{"sh", "-c", "{command}"}}
	require.NoError(t, good.Validate())
	require.NoError(t, good.CheckExec(t.Context()))
	assert.Equal(t, "", good.Lacks("exec"))
	assert.Contains(t, (&Spec{}).Lacks("exec"), FieldExec)

	// sh -c with the command line split into words, as ssh HOST sh -c
	// {command} does on the far side: the first word alone runs.
	split := &Spec{Exec: []string{"sh", "-c", `eval "set -- $0"; sh -c "$@"`, "{command}"}}
	require.NoError(t, split.Validate())
	err := split.CheckExec(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "as one argument")

	// A failing command is an error naming the field and its stderr.
	_, err = good.Shell(t.Context(), "echo no such host >&2; exit 3", nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), FieldExec)
	assert.Contains(t, err.Error(), "no such host")
	_, err = (&Spec{}).Shell(t.Context(), "true", nil, nil)
	assert.True(t, errors.Is(err, ErrNoCommand), "%v", err)
}

// Stdin reaches the command: a file written through exec holds the bytes
// sent, whatever its path holds.
func TestShellWritesStdinToAQuotedPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "it's a $dir")
	spec := &Spec{Exec: []string{"sh", "-c", "{command}"}}
	cmd := MustCommand("mkdir", "-p", dir) + " && cat > " + MustCommand(filepath.Join(dir, "f"))
	_, err := spec.Shell(t.Context(), cmd, strings.NewReader("body\x00bytes"), nil)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "body\x00bytes", string(got))
}
