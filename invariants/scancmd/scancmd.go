package scancmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tenantcanary/tenantcanary/invariants/scan"
)

// Usage is the command's synopsis.
const Usage = "usage: canary-run scan --canaries FILE [--json] PATH..."

// Exit codes.
const (
	ExitClean = 0 // nothing found
	ExitFound = 1 // at least one canary found
	ExitError = 2 // usage error, or something could not be read
)

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
	canaries string
	json     bool
	paths    []string
}

// parse accepts the flags anywhere among the paths; "--" ends the flags.
func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("canary-run scan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.canaries, "canaries", "", "JSON array of {owner, kind, value}")
	fs.BoolVar(&o.json, "json", false, "print findings as JSON lines")
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, errors.New("help requested")
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
	return o, nil
}

// ReadCanaries reads a canaries file: a JSON array of {"owner","kind","value"}.
func ReadCanaries(path string) ([]scan.Pattern, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read canaries: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var pats []scan.Pattern
	if err := dec.Decode(&pats); err != nil {
		return nil, fmt.Errorf("read canaries %s: want a JSON array of {\"owner\",\"kind\",\"value\"}: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("read canaries %s: trailing data after the JSON array", path)
	}
	if len(pats) == 0 {
		return nil, fmt.Errorf("read canaries %s: the array is empty: nothing to look for", path)
	}
	for i, p := range pats {
		if p.Owner == "" || p.Kind == "" || p.Value == "" {
			return nil, fmt.Errorf("read canaries %s: entry %d (%+v) needs a non-empty owner, kind and value", path, i, p)
		}
	}
	return pats, nil
}

// Run runs `canary-run scan` with args (those after "scan") and returns
// the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n%s\n", err, Usage)
		return ExitError
	}
	pats, err := ReadCanaries(o.canaries)
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n", err)
		return ExitError
	}
	m, err := scan.Compile(pats)
	if err != nil {
		fmt.Fprintf(stderr, "canary-run scan: %v\n", err)
		return ExitError
	}
	code := ExitClean
	enc := json.NewEncoder(stdout)
	for _, p := range o.paths {
		r := m.Tree(ctx, p)
		for _, h := range r.Hits {
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
	}
	return code
}
