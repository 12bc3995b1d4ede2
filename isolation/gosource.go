package isolation

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// eachGoFile parses every non-test .go file of the plugin folder dir (never
// running it) into one file set and calls fn with each file's name; it
// returns how many it parsed. Its errors are unwrapped: the caller names
// what it was doing.
func eachGoFile(dir string, fn func(name string, fset *token.FileSet, f *ast.File)) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return n, err
		}
		n++
		fn(name, fset, f)
	}
	return n, nil
}

// importName is the name f uses for the package of import path (its last
// import of it): def, or the name it is imported as; "" when f does not
// import it.
func importName(f *ast.File, path, def string) string {
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != path {
			continue
		}
		name = def
		if imp.Name != nil {
			name = imp.Name.Name
		}
	}
	return name
}
