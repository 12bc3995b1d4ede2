package isolation

import (
	"fmt"
	"go/ast"
	"go/token"
	"sort"
)

// InProcessRefused are constructs refused in plugin code loaded in-process,
// each with its reason: they run plugin code on a goroutine of its own,
// where the interpreter re-raises a panic and no recover of the server's
// can reach it, so one panic would end the server and every tenant's
// sessions. In a plugin host the same panic ends only that profile's host.
var InProcessRefused = map[string]string{
	"go statement":   "a goroutine's panic cannot be recovered by the server and would end the server process",
	"time.AfterFunc": "its function runs on a goroutine of its own, whose panic would end the server process",
}

// InProcessHazards reads the Go source of the plugin folder dir (never
// running it) and lists every use of an InProcessRefused construct, as
// "file:line: construct: reason".
func InProcessHazards(dir string) ([]string, error) {
	var out []string
	_, err := eachGoFile(dir, func(n string, fset *token.FileSet, f *ast.File) {
		timeName := importName(f, "time", "time")
		add := func(pos token.Pos, what string) {
			p := fset.Position(pos)
			out = append(out, fmt.Sprintf("%s:%d: %s: %s", n, p.Line, what, InProcessRefused[what]))
		}
		ast.Inspect(f, func(node ast.Node) bool {
			switch node := node.(type) {
			case *ast.GoStmt:
				add(node.Pos(), "go statement")
			case *ast.SelectorExpr:
				if x, ok := node.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && node.Sel.Name == "AfterFunc" {
					add(node.Pos(), "time.AfterFunc")
				}
			}
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("check plugin %s for goroutines: %w", dir, err)
	}
	sort.Strings(out)
	return out, nil
}
