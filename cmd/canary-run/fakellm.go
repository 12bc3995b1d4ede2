package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/tenantcanary/tenantcanary/tenants"
)

const fakellmUsage = "usage: canary-run fakellm --listen ADDR --tenants FILE [--out DIR] [--journal FILE] [--advertise-host H]"

// The files `canary-run fakellm` writes into --out.
const (
	stagingTenantsFile  = "tenants.json"
	stagingCanariesFile = "canaries.json"
	stagingJournalFile  = "journal.jsonl"
)

// stagingTenant is one tenant of a staging run, as the tenants file records
// it: everything a later run needs to recognise its canaries and reach its
// provider.
type stagingTenant struct {
	Name         string           `json:"name"`
	Tag          string           `json:"tag"`
	Launch       bool             `json:"launch"`
	BaseURL      string           `json:"base_url"`
	Key          string           `json:"key"`
	Model        string           `json:"model"`
	APIServerKey string           `json:"api_server_key"`
	Canaries     []tenants.Canary `json:"canaries"`
}

// stagingFile is the tenants file of a staging run.
type stagingFile struct {
	Version int             `json:"version"`
	Launch  string          `json:"launch"`
	Journal string          `json:"journal"`
	Tenants []stagingTenant `json:"tenants"`
}

// stagingFileVersion is the format of the tenants file.
const stagingFileVersion = 1

// errStagingFile: a tenants file is not one `canary-run fakellm` wrote, or
// its canaries do not follow from its tags.
var errStagingFile = errors.New("not a staging tenants file")

// readStagingFile reads and checks a tenants file: every tenant's canaries
// are the ones its name and tag make, so a later run rebuilding the
// tenants from name and tag looks for exactly these.
func readStagingFile(path string) (stagingFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stagingFile{}, fmt.Errorf("read tenants file: %w", err)
	}
	var f stagingFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("read tenants file %s: %w: %w", path, errStagingFile, err)
	}
	if f.Version != stagingFileVersion {
		return f, fmt.Errorf("read tenants file %s: version %d, want %d: %w", path, f.Version, stagingFileVersion, errStagingFile)
	}
	if len(f.Tenants) == 0 {
		return f, fmt.Errorf("read tenants file %s: no tenant: %w", path, errStagingFile)
	}
	launches := 0
	for _, t := range f.Tenants {
		if t.Launch {
			launches++
		}
		want := canariesOf(t.Name, t.Tag)
		if len(t.Canaries) < len(want) {
			return f, fmt.Errorf("read tenants file %s: tenant %s: %d canaries, want at least %d: %w", path, t.Name, len(t.Canaries), len(want), errStagingFile)
		}
		for i, c := range want {
			if t.Canaries[i] != c {
				return f, fmt.Errorf("read tenants file %s: tenant %s: canary %d is %+v, but name and tag make %+v: %w", path, t.Name, i, t.Canaries[i], c, errStagingFile)
			}
		}
		if t.Key != tenants.CanaryValue(tenants.ProviderKey, t.Name, t.Tag) || t.Model != tenants.CanaryValue(tenants.Model, t.Name, t.Tag) {
			return f, fmt.Errorf("read tenants file %s: tenant %s: key or model does not follow from its tag: %w", path, t.Name, errStagingFile)
		}
	}
	if launches != 1 {
		return f, fmt.Errorf("read tenants file %s: %d launch tenants, want 1: %w", path, launches, errStagingFile)
	}
	return f, nil
}

// canariesOf is the base canaries a tenant's name and tag make, in
// tenants.BaseKinds order.
func canariesOf(name, tag string) []tenants.Canary {
	out := make([]tenants.Canary, 0, len(tenants.BaseKinds))
	for _, k := range tenants.BaseKinds {
		out = append(out, tenants.Canary{Owner: name, Kind: k, Value: tenants.CanaryValue(k, name, tag)})
	}
	return out
}

// tenantNames is the --tenants file: a JSON array of names, or
// {"names": [...], "launch": "default"}.
type tenantNames struct {
	Names  []string `json:"names"`
	Launch string   `json:"launch"`
}

func readTenantNames(path string) (tenantNames, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tenantNames{}, fmt.Errorf("read --tenants: %w", err)
	}
	var tn tenantNames
	data = bytes.TrimSpace(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if len(data) > 0 && data[0] == '[' {
		err = dec.Decode(&tn.Names)
	} else {
		err = dec.Decode(&tn)
	}
	if err == nil && dec.More() {
		err = errors.New("trailing data")
	}
	if err != nil {
		return tn, fmt.Errorf("read --tenants %s: want a JSON array of names or {\"names\": [...], \"launch\": NAME}: %w", path, err)
	}
	if len(tn.Names) == 0 {
		return tn, fmt.Errorf("read --tenants %s: no tenant names", path)
	}
	return tn, nil
}

type fakellmOptions struct {
	listen    string
	tenants   string
	out       string
	journal   string
	advertise string
}

func parseFakeLLM(args []string) (fakellmOptions, error) {
	var o fakellmOptions
	fs := flag.NewFlagSet("canary-run fakellm", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", "", "HOST:PORT every provider listens on (port 0: one free port each)")
	fs.StringVar(&o.tenants, "tenants", "", "JSON file of tenant names")
	fs.StringVar(&o.out, "out", "canary-out", "write tenants.json and canaries.json (and the journal by default) here")
	fs.StringVar(&o.journal, "journal", "", "journal every request to this file (default DIR/journal.jsonl)")
	fs.StringVar(&o.advertise, "advertise-host", "", "host the target reaches the providers at, in the printed base URLs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelp
		}
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if o.listen == "" {
		errs = append(errs, errors.New("--listen ADDR is required (e.g. 0.0.0.0:0)"))
	} else if _, port, err := net.SplitHostPort(o.listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: want HOST:PORT: %w", o.listen, err))
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: port %q is not a number", o.listen, port))
	}
	if o.tenants == "" {
		errs = append(errs, errors.New("--tenants FILE is required"))
	}
	if o.out == "" {
		errs = append(errs, errors.New("--out is empty"))
	}
	return o, errors.Join(errs...)
}

// closeGrace bounds how long the providers may take to close once
// interrupted.
const closeGrace = 10 * time.Second

// lockedWriter serialises the journal lines of many providers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runFakeLLM serves one provider per tenant until ctx ends.
func runFakeLLM(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "canary-run fakellm"
	o, err := parseFakeLLM(args)
	if errors.Is(err, errHelp) {
		fmt.Fprintln(stdout, fakellmUsage)
		return 0
	}
	if err != nil {
		return usageError(stderr, cmd, err, fakellmUsage)
	}
	names, err := readTenantNames(o.tenants)
	if err != nil {
		return usageError(stderr, cmd, err, fakellmUsage)
	}
	if _, port, _ := net.SplitHostPort(o.listen); port != "0" && len(names.Names) > 1 {
		return usageError(stderr, cmd, fmt.Errorf("--listen %s: a fixed port serves one provider, and there are %d tenants: use port 0", o.listen, len(names.Names)), fakellmUsage)
	}
	// The sandbox root only holds the workdirs tenants.Build makes; the
	// target is elsewhere.
	root, err := os.MkdirTemp("", "canary-fakellm-")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}
	defer os.RemoveAll(root)
	set, err := tenants.Build(root, tenants.Options{
		Names: names.Names, Launch: names.Launch, ProviderAddr: o.listen, AdvertiseHost: o.advertise,
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}
	defer set.Close()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return usageError(stderr, cmd, fmt.Errorf("--out: %w", err), fakellmUsage)
	}
	if o.journal == "" {
		o.journal = filepath.Join(o.out, stagingJournalFile)
	}
	if o.journal, err = filepath.Abs(o.journal); err != nil {
		return usageError(stderr, cmd, fmt.Errorf("--journal: %w", err), fakellmUsage)
	}
	jf, err := os.OpenFile(o.journal, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Fprintf(stderr, "%s: open journal: %v\n", cmd, err)
		return exitUsage
	}
	defer jf.Close()

	journal := &lockedWriter{w: jf}
	for _, t := range set.Tenants {
		t.Provider.Journal(journal)
	}

	sf := stagingFile{Version: stagingFileVersion, Launch: set.Launch().Name, Journal: o.journal}
	var canaries []tenants.Canary
	for _, t := range set.Tenants {
		sf.Tenants = append(sf.Tenants, stagingTenant{
			Name: t.Name, Tag: t.Tag, Launch: t.Launch, BaseURL: t.Provider.BaseURL,
			Key: t.ProviderKey(), Model: t.Model(), APIServerKey: t.APIServerKey(), Canaries: t.Canaries(),
		})
		canaries = append(canaries, t.Canaries()...)
	}
	tenantsPath, canariesPath := filepath.Join(o.out, stagingTenantsFile), filepath.Join(o.out, stagingCanariesFile)
	if err := writeJSON(tenantsPath, sf); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}
	if err := writeJSON(canariesPath, canaries); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}

	for _, t := range sf.Tenants {
		launch := ""
		if t.Launch {
			launch = " launch"
		}
		fmt.Fprintf(stdout, "%s: base_url=%s key=%s model=%s%s\n", t.Name, t.BaseURL, t.Key, t.Model, launch)
	}
	fmt.Fprintf(stdout, "tenants file: %s\ncanaries file: %s\njournal: %s\n", tenantsPath, canariesPath, o.journal)
	fmt.Fprintf(stdout, "serving %d providers until interrupted\n", len(sf.Tenants))

	<-ctx.Done()
	code, requests := 0, 0
	closeCtx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	for _, t := range set.Tenants {
		if err := t.Provider.CloseContext(closeCtx); err != nil {
			fmt.Fprintf(stderr, "%s: close provider of %s: %v\n", cmd, t.Name, err)
			code = exitUsage
		}
		if err := t.Provider.JournalErr(); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			code = exitUsage
		}
		requests += len(t.Provider.Requests())
	}
	if err := jf.Sync(); err != nil {
		fmt.Fprintf(stderr, "%s: sync journal: %v\n", cmd, err)
		code = exitUsage
	}
	if err := jf.Close(); err != nil {
		fmt.Fprintf(stderr, "%s: close journal: %v\n", cmd, err)
		code = exitUsage
	}
	fmt.Fprintf(stdout, "stopped: %d requests journaled to %s\n", requests, o.journal)
	return code
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
