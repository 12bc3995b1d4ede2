package certify_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeShowsTheExample: the README's "Certifying from go test" shows
// the example module's test as it is: its Go block equals the file the
// section names (examples/gotest/..._test.go).
func TestReadmeShowsTheExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## Certifying from go test\n")
	require.True(t, ok, "README.md has no section \"Certifying from go test\"")
	section, _, _ = strings.Cut(section, "\n## ")
	file := regexp.MustCompile("`(examples/gotest/[^`]+_test\\.go)`").FindStringSubmatch(section)
	require.NotNil(t, file, "the section names the example's test file (examples/gotest/..._test.go)")
	block := regexp.MustCompile("(?s)\n```go\n(.*?)```\n").FindStringSubmatch(section)
	require.NotNil(t, block, "the section has a Go code block")
	want, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(file[1])))
	if os.IsNotExist(err) {
		t.Skipf("%s does not exist yet: the README's block cannot be checked against it", file[1])
	}
	require.NoError(t, err)
	require.Equal(t, string(want), block[1], "README.md's block in \"Certifying from go test\" must equal %s", file[1])
}
