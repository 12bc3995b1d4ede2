package certify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

var (
	// mdLink is a Markdown link's or image's target: the (...) after ].
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeSpan is an inline code span, of any number of backticks.
	codeSpan = regexp.MustCompile("(`+)[^`]*?(`+)")
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose is a Markdown text's lines outside fenced code blocks, with inline
// code spans removed: where links and headings are.
func prose(md string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, codeSpan.ReplaceAllString(l, ""))
		}
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, every character but
// letters, digits, spaces, hyphens and underscores dropped, spaces as
// hyphens.
func slug(text string) string {
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors is every heading anchor of a Markdown file, a repeated heading's
// as GitHub numbers them (x, x-1, x-2).
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		m := heading.FindStringSubmatch(l)
		if fenced || m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// brokenLinks checks every relative link of the Markdown files (paths
// relative to root): its file or folder exists inside root, and its
// #anchor, if any, is a heading of that Markdown file. It returns one line
// per broken link.
func brokenLinks(root string, files []string) ([]string, error) {
	var broken []string
	anchorsOf := map[string]map[string]bool{}
	read := func(rel string) (map[string]bool, error) {
		if a, ok := anchorsOf[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", rel, err)
		}
		anchorsOf[rel] = anchors(string(b))
		return anchorsOf[rel], nil
	}
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		for n, line := range prose(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue // a URL: not this repository's to check
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.ToSlash(filepath.Join(filepath.Dir(file), filepath.FromSlash(path)))
					if dest == ".." || strings.HasPrefix(dest, "../") || filepath.IsAbs(path) {
						broken = append(broken, fmt.Sprintf("%s: %s: outside the repository", file, target))
						continue
					}
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
						broken = append(broken, fmt.Sprintf("%s: %s: no such file or folder %s", file, target, dest))
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					broken = append(broken, fmt.Sprintf("%s: %s: an anchor in %s, which is not Markdown", file, target, dest))
					continue
				}
				a, err := read(dest)
				if err != nil {
					return nil, err
				}
				if !a[anchor] {
					broken = append(broken, fmt.Sprintf("%s (prose line %d): %s: %s has no heading #%s", file, n+1, target, dest, anchor))
				}
			}
		}
	}
	return broken, nil
}

// TestDocsLinksResolve: every relative link in README.md and docs/*.md
// names a file or folder of this repository that exists, and every anchor
// a heading of its file.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "docs/*.md")
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	broken, err := brokenLinks("..", files)
	require.NoError(t, err)
	require.Empty(t, broken, "broken links")
}

// TestBrokenLinksFindsBrokenLinks is the link check's positive control: a
// missing file, a missing anchor (here and in another file) and a path out
// of the repository are each found; good links and links in code are not.
func TestBrokenLinksFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs", "sub"), 0o755))
	write := func(rel, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(root, filepath.FromSlash(rel)), []byte(text), 0o644))
	}
	write("README.md", strings.Join([]string{
		"# Top",
		"## Here: `it`, again's",
		"[ok](docs/b.md#real-one) [ok dir](docs/sub) [ok self](#here-it-agains) [url](https://example.com/x#y)",
		"[ok repeated](docs/b.md#twice-1) [ok image](docs/b.md)",
		"[missing](docs/missing.md) [bad anchor](docs/b.md#nope) [bad self](#gone) [escape](../outside.md)",
		"`[in code](nothere.md)`",
		"```",
		"[in a block](nothere.md)",
		"```",
	}, "\n"))
	write("docs/b.md", "# B\n## Real one\n## Twice\n## Twice\n```\n## not a heading\n```\n")
	broken, err := brokenLinks(root, []string{"README.md", "docs/b.md"})
	require.NoError(t, err)
	require.Len(t, broken, 4, "broken: %q", broken)
	for i, want := range []string{"docs/missing.md", "#nope", "#gone", "outside the repository"} {
		require.Contains(t, broken[i], want)
	}
	for _, b := range broken {
		require.NotContains(t, b, "nothere", "a link in code is no link")
		require.NotContains(t, b, "not-a-heading")
	}
}
