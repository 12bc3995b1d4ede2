package scancmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Usage is the command's synopsis.
const Usage = "usage: canary-run scan --canaries FILE [--json] [--ignore-own [--home DIR] [--launch NAME]] [--allow-special] PATH..."

// Exit codes.
const (
	ExitClean = 0 // nothing found
	ExitFound = 1 // at least one canary found
	ExitError = 2 // usage error, or something could not be read
)

// MaxCanariesBytes is the largest --canaries file read: a list of canaries
// for thousands of tenants is a few megabytes.
const MaxCanariesBytes = 16 << 20

// MaxSpecialBytes is how much of a named pipe or device (--allow-special)
// is read before the scan stops there and says so.
const MaxSpecialBytes = 1 << 30

// specialBytes is MaxSpecialBytes; a test lowers it.
var specialBytes int64 = MaxSpecialBytes

// JSONFinding is one line of --json output.
type JSONFinding struct {
	Owner     string `json:"owner"`
	Kind      string `json:"kind"`
	Encoding  string `json:"encoding"`
	Path      string `json:"path"`
	Offset    int64  `json:"offset"`
	Container string `json:"container,omitempty"`
	Row       string `json:"row,omitempty"`
	Excerpt   string `json:"excerpt"`
}

type options struct {
	canaries     string
	json         bool
	ignoreOwn    bool
	home         string
	launch       string
	launchDir    string
	profilesDir  string
	allowSpecial bool
	paths        []string
}

// errHelp is parse's answer to --help.
var errHelp = errors.New("help requested")

func flags(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("canary-run scan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.canaries, "canaries", "", "the `FILE` of canaries to look for: a JSON array of {owner, kind, value}, or a roster (tenants.json as canary-run fakellm writes it); a regular file of at most 16 MiB")
	fs.BoolVar(&o.json, "json", false, "print findings as JSON lines")
	fs.BoolVar(&o.ignoreOwn, "ignore-own", false, "a tenant's canaries inside its own home are not findings (counted on stderr): a path is the launch tenant's under the launch home and <name>'s under its profiles folder's <name>")
	fs.StringVar(&o.home, "home", "", "with --ignore-own: the launch home `DIR` (default: the deepest path component named --launch-dir)")
	fs.StringVar(&o.launch, "launch", "", "with --ignore-own: the launch tenant's `NAME` (default: the roster's, else \"default\")")
	fs.StringVar(&o.launchDir, "launch-dir", tenants.AgentdLayout().LaunchDir, "with --ignore-own and no --home: the name of the launch home's folder")
	fs.StringVar(&o.profilesDir, "profiles-dir", tenants.AgentdLayout().ProfilesDir, "with --ignore-own: the folder of named profiles under the launch home")
	fs.BoolVar(&o.allowSpecial, "allow-special", false, "read a named pipe or device given as PATH as a stream (up to 1 GiB; an interrupt ends it) instead of refusing it")
	return fs
}

// parse accepts the flags anywhere among the paths; "--" ends the flags.
func parse(args []string) (options, error) {
	var o options
	fs := flags(&o)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, errHelp
			}
			return o, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			o.paths = append(o.paths, rest...)
			break
		}
		o.paths = append(o.paths, rest[0])
		args = rest[1:]
	}
	if o.canaries == "" {
		return o, errors.New("--canaries FILE is required")
	}
	if len(o.paths) == 0 {
		return o, errors.New("no PATH to scan")
	}
	if !o.ignoreOwn && (o.home != "" || o.launch != "") {
		return o, errors.New("--home and --launch say whose home a path is: they need --ignore-own")
	}
	return o, nil
}

// PrintHelp writes the synopsis and every flag.
func PrintHelp(w io.Writer) {
	var o options
	fs := flags(&o)
	fmt.Fprintf(w, "%s\n\nLook for canaries in files and trees, in every encoding and inside archives.\n"+
		"Findings go to stdout, errors to stderr. Exit 0: nothing found; 1: found; 2: a usage error or\n"+
		"something could not be read or was refused (the scan is incomplete there).\n\nflags:\n", Usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// Canaries is what a --canaries file says: the patterns, and the launch
// tenant when the file is a roster.
type Canaries struct {
	Patterns []scan.Pattern
	Launch   string
}

// ReadCanaries reads a canaries file: a JSON array of
// {"owner","kind","value"}, or a roster. It must be a regular file of at
// most MaxCanariesBytes; ctx ends the read.
func ReadCanaries(ctx context.Context, path string) (Canaries, error) {
	data, err := readBounded(ctx, path, MaxCanariesBytes)
	if err != nil {
		return Canaries{}, fmt.Errorf("read canaries: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		r, err := tenants.DecodeRoster(path, data)
		if err != nil {
			return Canaries{}, fmt.Errorf("read canaries %s: want a JSON array of {\"owner\",\"kind\",\"value\"} or a roster, and this object is no roster: %w", path, err)
		}
		c := Canaries{Launch: r.Launch}
		for _, t := range r.Tenants {
			for _, k := range t.Canaries {
				c.Patterns = append(c.Patterns, scan.Pattern{Owner: k.Owner, Kind: string(k.Kind), Value: k.Value})
			}
		}
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var pats []scan.Pattern
	if err := dec.Decode(&pats); err != nil {
		return Canaries{}, fmt.Errorf("read canaries %s: want a JSON array of {\"owner\",\"kind\",\"value\"} or a roster: %w", path, err)
	}
	if dec.More() {
		return Canaries{}, fmt.Errorf("read canaries %s: trailing data after the JSON array", path)
	}
	if len(pats) == 0 {
		return Canaries{}, fmt.Errorf("read canaries %s: the array is empty: nothing to look for", path)
	}
	for i, p := range pats {
		if p.Owner == "" || p.Kind == "" || p.Value == "" {
			return Canaries{}, fmt.Errorf("read canaries %s: entry %d (%+v) needs a non-empty owner, kind and value", path, i, p)
		}
	}
	return Canaries{Patterns: pats}, nil
}

// readBounded reads a regular file of at most limit bytes, checking ctx
// between reads. It opens without blocking, so a named pipe is refused
// rather than waited on, and a device (/dev/zero) is refused rather than
// read without end.
func readBounded(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file", path, scan.Special(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte bound", path, st.Size(), limit)
	}
	var buf bytes.Buffer
	chunk := make([]byte, 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		n, err := f.Read(chunk)
		buf.Write(chunk[:n])
		if int64(buf.Len()) > limit {
			return nil, fmt.Errorf("%s grew past the %d-byte bound while read", path, limit)
		}
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// owners says whose home a path is in, for --ignore-own.
type owners struct {
	home        string // the launch home, absolute; "" to find it by launchDir
	launch      string
	launchDir   string
	profilesDir string
}

// of returns the tenant whose home holds path, or "".
func (o owners) of(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	parts := strings.Split(filepath.ToSlash(abs), "/")
	rest := -1 // index of the first component under the launch home
	if o.home != "" {
		rel, err := filepath.Rel(o.home, abs)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return ""
		}
		parts = strings.Split(filepath.ToSlash(rel), "/")
		if rel == "." {
			parts = nil
		}
		rest = 0
	} else {
		for i := len(parts) - 1; i >= 0; i-- {
			if parts[i] == o.launchDir {
				rest = i + 1
				break
			}
		}
		if rest < 0 {
			return ""
		}
	}
	under := parts[rest:]
	if len(under) >= 2 && under[0] == o.profilesDir {
		return under[1]
	}
	if len(under) == 1 && under[0] == o.profilesDir {
		return "" // the profiles folder itself is no one's
	}
	return o.launch
}

// Run runs `canary-run scan` with args (those after "scan") and returns
// the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if errors.Is(err, errHelp) {
		PrintHelp(stdout)
		return ExitClean
	}
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n%s\n", err, Usage)
		return ExitError
	}
	// Every PATH is checked before anything is scanned.
	special := map[string]bool{}
	for _, p := range o.paths {
		st, err := os.Lstat(p)
		if err != nil || st.IsDir() || st.Mode().IsRegular() || st.Mode()&fs.ModeSymlink != 0 {
			continue // missing or unreadable: reported by the scan
		}
		if !o.allowSpecial {
			fmt.Fprintf(stderr, "canary-run scan: %s is %s, not a regular file or folder: reading it might never end (--allow-special reads it as a stream, up to 1 GiB)\n", p, scan.Special(st.Mode()))
			return ExitError
		}
		special[p] = true
	}
	c, err := ReadCanaries(ctx, o.canaries)
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n", err)
		return ExitError
	}
	m, err := scan.Compile(c.Patterns)
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n", err)
		return ExitError
	}
	own := owners{launch: o.launch, launchDir: o.launchDir, profilesDir: o.profilesDir}
	if own.launch == "" {
		own.launch = c.Launch
	}
	if own.launch == "" {
		own.launch = "default"
	}
	if o.home != "" {
		if own.home, err = filepath.Abs(o.home); err != nil {
			fmt.Fprintf(stderr, "canary-run scan: --home %s: %v\n", o.home, err)
			return ExitError
		}
	}

	code, ignored := ExitClean, 0
	enc := json.NewEncoder(stdout)
	for _, p := range o.paths {
		var r scan.Report
		if special[p] {
			r = scanSpecial(ctx, m, p)
		} else {
			r = m.Tree(ctx, p)
		}
		for _, h := range r.Hits {
			if o.ignoreOwn && own.of(h.Path) == h.Pattern.Owner {
				ignored++
				continue
			}
			code = max(code, ExitFound)
			if o.json {
				if err := enc.Encode(JSONFinding{Owner: h.Pattern.Owner, Kind: h.Pattern.Kind, Encoding: string(h.Encoding),
					Path: h.Path, Offset: h.Start, Container: h.Container, Row: h.Row, Excerpt: h.Excerpt}); err != nil {
					fmt.Fprintf(stderr, "canary-run scan: write output: %v\n", err)
					return ExitError
				}
				continue
			}
			if _, err := fmt.Fprintf(stdout, "%s %s %s %s\n", h.Pattern.Owner, h.Pattern.Kind, h.Encoding, h.Location()); err != nil {
				fmt.Fprintf(stderr, "canary-run scan: write output: %v\n", err)
				return ExitError
			}
		}
		for _, s := range r.Skipped {
			code = ExitError
			fmt.Fprintf(stderr, "canary-run scan: not scanned: %s: %s\n", s.Path, s.Reason)
		}
		if err := ctx.Err(); err != nil {
			fmt.Fprintf(stderr, "canary-run scan: stopped: %v\n", err)
			return ExitError
		}
	}
	if o.ignoreOwn {
		fmt.Fprintf(stderr, "canary-run scan: %d canaries in their owner's own home ignored (--ignore-own)\n", ignored)
	}
	return code
}

// scanSpecial reads a named pipe or device as a stream, up to
// MaxSpecialBytes, until its end or ctx's: a read blocked on a pipe is
// woken by a deadline when ctx ends.
func scanSpecial(ctx context.Context, m *scan.Matcher, path string) scan.Report {
	f, err := openSpecial(ctx, path)
	if err != nil {
		return scan.Report{Skipped: []scan.Skip{{Path: path, Reason: err.Error(), Err: err}}}
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	lr := &io.LimitedReader{R: f, N: specialBytes}
	r := m.Stream(ctx, path, lr)
	if lr.N == 0 {
		err := fmt.Errorf("stopped after %d bytes (the bound for a pipe or device): %w", specialBytes, scan.ErrTooLarge)
		r.Skipped = append(r.Skipped, scan.Skip{Path: path, Reason: err.Error(), Err: err})
	}
	return r
}

// openSpecial opens a named pipe or device for reading. Opening a pipe
// waits for its writer; when ctx ends first, the wait is ended by opening
// the pipe for writing (and closing it at once).
func openSpecial(ctx context.Context, path string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		return o.f, o.err
	case <-ctx.Done():
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		if o := <-ch; o.f != nil {
			o.f.Close()
		}
		return nil, fmt.Errorf("open %s: waited for a writer: %w", path, ctx.Err())
	}
}
