package pluginload

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
	"github.com/traefik/yaegi/stdlib/syscall"
	"github.com/traefik/yaegi/stdlib/unrestricted"
	"gopkg.in/yaml.v3"

	"github.com/tenantcanary/tenantcanary/plugin"
)

// Kinds of plugin a manifest may declare.
const (
	KindGeneral       = "general"
	KindModelProvider = "model-provider"
)

// ModelProvidersDir is the folder under plugins/ that holds model-provider
// plugins.
const ModelProvidersDir = "model-providers"

// ErrNoRegister means a plugin's source defines no usable Register function.
var ErrNoRegister = errors.New("plugin defines no func Register(plugin.Context) error")

// Manifest is a plugin's plugin.yaml.
type Manifest struct {
	Name    string `yaml:"name" json:"name"`
	Version string `yaml:"version" json:"version"`
	Kind    string `yaml:"kind" json:"kind"`
}

// Found is one plugin folder found by Discover.
type Found struct {
	Manifest
	Dir string `json:"dir"`
}

// ReadManifest reads dir/plugin.yaml. A missing name defaults to the
// folder's name and a missing kind to general.
func ReadManifest(dir string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, "plugin.yaml"))
	if err != nil {
		return Manifest{}, fmt.Errorf("read plugin manifest: %w", err)
	}
	return ParseManifest(dir, b)
}

// ParseManifest parses b, the plugin.yaml of the plugin folder dir (see
// ReadManifest).
func ParseManifest(dir string, b []byte) (Manifest, error) {
	var m Manifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("parse %s: %w", filepath.Join(dir, "plugin.yaml"), err)
	}
	if m.Name == "" {
		m.Name = filepath.Base(dir)
	}
	if m.Kind == "" {
		m.Kind = KindGeneral
	}
	if m.Kind != KindGeneral && m.Kind != KindModelProvider {
		return m, fmt.Errorf("plugin %s: unknown kind %q (want %q or %q)", m.Name, m.Kind, KindGeneral, KindModelProvider)
	}
	return m, nil
}

// Discover lists the plugin folders under pluginsDir (plugins/<name>/ and
// plugins/model-providers/<name>/), sorted by name. A non-nil enabled list
// keeps only the plugins it names. A missing pluginsDir holds no plugins.
func Discover(pluginsDir string, enabled []string) ([]Found, error) {
	return DiscoverFS(os.DirFS(pluginsDir), ".", pluginsDir, enabled)
}

// DiscoverFS is Discover over fsys, where the plugins folder is named dir
// and lies at base on disk (what Found.Dir is joined to). A server that
// discovers a tenant's plugins passes the tenant's home as fsys (agentd:
// a homefs.Home, which follows no link, opens nothing that blocks and
// reads no file past its limit), so a plugin folder, a plugin.yaml that
// is a link, a FIFO or huge fails here and never reaches the server.
func DiscoverFS(fsys fs.FS, dir, base string, enabled []string) ([]Found, error) {
	var out []Found
	keep := func(name string) bool {
		return enabled == nil || slices.Contains(enabled, name)
	}
	scan := func(sub string) error {
		entries, err := fs.ReadDir(fsys, path.Join(dir, sub))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("discover plugins: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			rel := path.Join(sub, e.Name())
			b, err := fs.ReadFile(fsys, path.Join(dir, rel, "plugin.yaml"))
			if errors.Is(err, fs.ErrNotExist) {
				continue // not a plugin folder
			}
			if err != nil {
				return fmt.Errorf("read plugin manifest: %w", err)
			}
			d := filepath.Join(base, filepath.FromSlash(rel))
			m, err := ParseManifest(d, b)
			if err != nil {
				return err
			}
			if keep(m.Name) {
				out = append(out, Found{Manifest: m, Dir: d})
			}
		}
		return nil
	}
	if err := scan("."); err != nil {
		return nil, err
	}
	if err := scan(ModelProvidersDir); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SourceFiles lists the Go files of a plugin folder (tests excluded).
func SourceFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list plugin source: %w", err)
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		files = append(files, filepath.Join(dir, n))
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("plugin folder %s holds no Go source", dir)
	}
	return files, nil
}

// Limits of what Fingerprint reads of a plugin folder: a plugin is a few
// source files; a folder past these is refused (ErrTooLarge), never read
// whole.
const (
	MaxFingerprintFiles       = 1024
	MaxFingerprintBytes int64 = 32 << 20
)

// ErrNotRegular marks a plugin folder holding something that is neither
// a file nor a folder (a symlink, a FIFO, a device, a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge marks a plugin folder past MaxFingerprintFiles or
// MaxFingerprintBytes.
var ErrTooLarge = errors.New("plugin folder too large")

// Fingerprint hashes the names and contents of every file in a plugin
// folder, so a cache keyed by it goes stale when any file changes. A
// folder holding anything but files and folders is refused
// (ErrNotRegular), as is one past MaxFingerprintFiles or
// MaxFingerprintBytes (ErrTooLarge).
func Fingerprint(dir string) (string, error) {
	fp, err := FingerprintFS(os.DirFS(dir), ".")
	if err != nil {
		return "", fmt.Errorf("fingerprint plugin %s: %w", dir, err)
	}
	return fp, nil
}

// FingerprintFS is Fingerprint of the folder dir of fsys (see DiscoverFS
// for a tenant's home as fsys).
func FingerprintFS(fsys fs.FS, dir string) (string, error) {
	h := sha256.New()
	files, total := 0, int64(0)
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			// A link, a FIFO, a device, a socket: nothing a plugin is made
			// of, and what a loader would follow or block on.
			return fmt.Errorf("%s in plugin folder %s: %w", p, dir, ErrNotRegular)
		}
		if files++; files > MaxFingerprintFiles {
			return fmt.Errorf("%s holds more than %d files: %w", dir, MaxFingerprintFiles, ErrTooLarge)
		}
		if info, err := d.Info(); err == nil && info.Size() > MaxFingerprintBytes-total {
			return fmt.Errorf("%s: plugin folder %s would hold more than %d bytes: %w", p, dir, MaxFingerprintBytes, ErrTooLarge)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if total += int64(len(b)); total > MaxFingerprintBytes {
			return fmt.Errorf("%s holds more than %d bytes: %w", dir, MaxFingerprintBytes, ErrTooLarge)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		if dir == "." {
			rel = p
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.FromSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Options says how Load interprets a plugin.
type Options struct {
	// Out receives what the plugin prints (nil discards it).
	Out io.Writer
	// Unrestricted gives the plugin the real os.Exit, os/exec and syscall
	// and the real environment, as a plugin host does: there a plugin may
	// take down only its own host. Restricted (in-process), os.Exit panics
	// into an error and the environment is Env.
	Unrestricted bool
	// Env is a restricted plugin's environment.
	Env []string
}

// Load interprets the plugin in dir and calls its Register with pctx. A
// panic in the plugin becomes an error. Load runs user code in the calling
// process: every caller asks isolation.MayLoadInProcess first.
func Load(dir string, pctx plugin.Context, opt Options) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plugin %s panicked while loading: %v", pctx.Name(), r)
		}
	}()
	files, err := SourceFiles(dir)
	if err != nil {
		return err
	}
	pkg, imports, err := importsOf(files)
	if err != nil {
		return fmt.Errorf("parse plugin %s: %w", pctx.Name(), err)
	}
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	i := interp.New(interp.Options{Stdout: out, Stderr: out, Unrestricted: opt.Unrestricted, Env: opt.Env})
	if err := i.Use(only(stdlib.Symbols, imports)); err != nil {
		return fmt.Errorf("load plugin %s: %w", pctx.Name(), err)
	}
	if opt.Unrestricted {
		if err := i.Use(only(unrestricted.Symbols, imports)); err != nil {
			return fmt.Errorf("load plugin %s: %w", pctx.Name(), err)
		}
		if err := i.Use(only(syscall.Symbols, imports)); err != nil {
			return fmt.Errorf("load plugin %s: %w", pctx.Name(), err)
		}
	}
	if err := i.Use(Symbols); err != nil {
		return fmt.Errorf("load plugin %s: %w", pctx.Name(), err)
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("load plugin %s: %w", pctx.Name(), err)
		}
		if _, err := i.Eval(string(src)); err != nil {
			return fmt.Errorf("interpret plugin %s (%s): %w", pctx.Name(), filepath.Base(name), err)
		}
	}
	v, err := i.Eval(pkg + ".Register")
	if err != nil {
		return fmt.Errorf("plugin %s: %w", pctx.Name(), ErrNoRegister)
	}
	if !v.IsValid() || v.Kind() != reflect.Func {
		return fmt.Errorf("plugin %s: %w", pctx.Name(), ErrNoRegister)
	}
	register, ok := v.Interface().(func(plugin.Context) error)
	if !ok {
		return fmt.Errorf("plugin %s: Register is %s: %w", pctx.Name(), v.Type(), ErrNoRegister)
	}
	if err := register(pctx); err != nil {
		return fmt.Errorf("plugin %s: register: %w", pctx.Name(), err)
	}
	return nil
}

// importsOf reads the plugin's package name (its first file's) and the
// import paths of all its files.
func importsOf(files []string) (pkg string, paths map[string]bool, err error) {
	paths = map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			return "", nil, err
		}
		if pkg == "" {
			pkg = f.Name.Name
		}
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return "", nil, fmt.Errorf("%s: import %s: %w", filepath.Base(name), im.Path.Value, err)
			}
			paths[p] = true
		}
	}
	return pkg, paths, nil
}

// always are the packages every interpreter gets whatever the plugin
// imports: yaegi's Use treats a set holding fmt as the standard library,
// and only then confines os (a restricted plugin's Getenv, Environ and
// Setenv see its own environment, not the process's), fmt's and log's
// output and flag, and compiles the generic packages (slices, maps, cmp,
// sync/atomic's types), which import cmp and math/bits; "." (the key "."
// itself) carries the wrappers of the interfaces fmt and others look for.
var always = map[string]bool{".": true, "fmt": true, "cmp": true, "math/bits": true}

// only is the packages of exports that the plugin imports, and those
// always given (a key is the import path, a slash and the package's
// name). Use copies every symbol it is given, and yaegi's standard library
// has thousands: a plugin host loads its plugins at every start. A
// package the plugin does not import it cannot reach.
func only(exports interp.Exports, imports map[string]bool) interp.Exports {
	out := interp.Exports{}
	for key, syms := range exports {
		if dir := path.Dir(key); imports[dir] || always[dir] {
			out[key] = syms
		}
	}
	return out
}
