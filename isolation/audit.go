package isolation

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// SDKImportPath is the import path of the plugin SDK.
const SDKImportPath = "github.com/tenantcanary/tenantcanary/plugin"

// Report is the audit's verdict on one plugin folder.
type Report struct {
	Plugin   string    `json:"plugin"`
	Dir      string    `json:"dir"`
	Verdict  Verdict   `json:"verdict"`
	Reasons  []string  `json:"reasons"`
	Findings []Finding `json:"findings"`
}

// AuditDir reads the Go source of the plugin folder dir with go/parser,
// never running it, and judges it with the boundary tables the runtime
// enforces. Only calls on values of type plugin.Context count.
func AuditDir(dir string) (Report, error) {
	rep := Report{Plugin: filepath.Base(dir), Dir: dir}
	var findings []Finding
	nfiles, err := eachGoFile(dir, func(_ string, _ *token.FileSet, f *ast.File) {
		findings = append(findings, auditFile(f)...)
	})
	if err != nil {
		return rep, fmt.Errorf("audit plugin %s: %w", dir, err)
	}
	if nfiles == 0 {
		return rep, fmt.Errorf("audit plugin %s: no Go source in the folder", dir)
	}
	rep.Findings = Normalize(findings)
	rep.Verdict, rep.Reasons = Judge(rep.Findings)
	return rep, nil
}

func auditFile(f *ast.File) []Finding {
	pkgName := importName(f, SDKImportPath, "plugin")
	if pkgName == "" || pkgName == "_" {
		return nil
	}
	isContext := func(t ast.Expr) bool {
		s, ok := t.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == pkgName && s.Sel.Name == "Context"
	}
	ctxNames := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if isContext(n.Type) {
				for _, id := range n.Names {
					ctxNames[id.Name] = true
				}
			}
		case *ast.ValueSpec:
			if n.Type != nil && isContext(n.Type) {
				for _, id := range n.Names {
					ctxNames[id.Name] = true
				}
			}
		}
		return true
	})
	var out []Finding
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		recv, ok := sel.X.(*ast.Ident)
		if !ok || !ctxNames[recv.Name] {
			return true
		}
		if fd, ok := CheckMethod(sel.Sel.Name); ok {
			out = append(out, fd)
		}
		if sel.Sel.Name == "RegisterHook" && len(call.Args) > 0 {
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if ev, err := strconv.Unquote(lit.Value); err == nil {
					if fd, ok := CheckHook(ev); ok {
						out = append(out, fd)
					}
				}
			}
		}
		return true
	})
	return out
}

// ErrUsage means the audit command was called wrongly.
var ErrUsage = errors.New("usage: agentd plugins audit DIR [--json]")

// RunAuditCommand runs `agentd plugins audit DIR [--json]` (args are what
// follows "audit"). DIR is one plugin folder, or a plugins folder whose
// subfolders are audited each. It returns the exit code: 0 when every
// plugin was judged, 1 when one could not be read, 2 on bad usage.
func RunAuditCommand(args []string, stdout, stderr io.Writer) int {
	var dir string
	asJSON := false
	for _, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(stderr, "unknown flag %q\n%v\n", a, ErrUsage)
			return 2
		case dir != "":
			fmt.Fprintf(stderr, "more than one DIR (%q, %q)\n%v\n", dir, a, ErrUsage)
			return 2
		default:
			dir = a
		}
	}
	if dir == "" {
		fmt.Fprintln(stderr, ErrUsage)
		return 2
	}
	dirs, err := auditTargets(dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	var reports []Report
	code := 0
	for _, d := range dirs {
		r, err := AuditDir(d)
		if err != nil {
			fmt.Fprintln(stderr, err)
			code = 1
			continue
		}
		reports = append(reports, r)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return code
	}
	for _, r := range reports {
		fmt.Fprintf(stdout, "%s: %s\n", r.Plugin, r.Verdict)
		for _, reason := range r.Reasons {
			fmt.Fprintf(stdout, "  - %s\n", reason)
		}
	}
	return code
}

func auditTargets(dir string) ([]string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("audit %s: not a folder (want a plugin folder or a plugins folder)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "plugin.yaml")); err == nil {
		return []string{dir}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(dir, e.Name(), "plugin.yaml")); err == nil {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("audit %s: no plugin.yaml in it or its subfolders", dir)
	}
	return out, nil
}
