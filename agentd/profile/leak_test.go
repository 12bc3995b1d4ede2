package profile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A parse error names the file, the line and at most the variable: never
// the line's text, which may be a secret or, through a link, another
// file's bytes.
func TestParseErrorsQuoteNoContent(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"OK=1\ncanary-secret-line\n",
		"OK=1\ncanary secret=1\n",
		"K='canary-secret\n",
		"K=\"canary-secret\n",
		"K='x' canary-secret\n",
	} {
		_, err := ParseEnv("/h/.env", []byte(text))
		require.ErrorIs(t, err, ErrBadEnv)
		require.ErrorContains(t, err, "/h/.env:")
		require.NotContains(t, err.Error(), "canary", "%q", text)
	}
	home := t.TempDir()
	p := Profile{Name: "p", Home: home}
	for _, text := range []string{
		"model: {default: [canary-secret]}\n",
		"model:\n  context_length: canary-secret\n",
		"canary-secret: [\n",
		"a: 1\na: \"canary-secret\"\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(home, "config.yaml"), []byte(text), 0o600))
		_, err := p.LoadConfig()
		require.ErrorIs(t, err, ErrBadConfig, "%q", text)
		require.NotContains(t, err.Error(), "canary", "%q", text)
	}
}
