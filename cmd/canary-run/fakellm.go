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
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
	"github.com/tenantcanary/tenantcanary/tenants"
)

const fakellmUsage = "usage: canary-run fakellm --listen ADDR --tenants FILE [--out DIR] [--journal FILE] [--advertise-host H] [--homes DIR [--layout agentd|FILE]]"

const fakellmAbout = `Serve one fake LLM provider per tenant for a staging server, journaling every
request, until interrupted. It writes the roster (DIR/tenants.json: tenants,
tags, base URLs, keys, models, workdirs, canaries), DIR/canaries.json and the
journal; with --homes it also writes every tenant's home, ready for the
server to serve: config.yaml (provider, base URL, model, key variable,
workdir) and .env (the provider key, API_SERVER_KEY, TENANT_MARKER and the
tenant's own CANARY_ variable), with memory and soul. The launch tenant's
home is HOMES/home/<launch folder>, the others HOMES/home/<launch
folder>/profiles/NAME: start the server with HOME=HOMES/home.`

// The files `canary-run fakellm` writes into --out.
const (
	stagingTenantsFile  = "tenants.json"
	stagingCanariesFile = "canaries.json"
	stagingJournalFile  = "journal.jsonl"
)

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
	homes     string
	layout    string
}

func fakellmFlags() (*flag.FlagSet, *fakellmOptions) {
	o := &fakellmOptions{}
	fs := flag.NewFlagSet("canary-run fakellm", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", "", "`HOST:PORT` every provider listens on (port 0: one free port each)")
	fs.StringVar(&o.tenants, "tenants", "", "JSON `FILE` of tenant names: [\"default\", \"alpha\"] or {\"names\": [...], \"launch\": NAME}")
	fs.StringVar(&o.out, "out", "canary-out", "write tenants.json and canaries.json (and the journal by default) into this `DIR`")
	fs.StringVar(&o.journal, "journal", "", "journal every request to this `FILE` (default DIR/journal.jsonl)")
	fs.StringVar(&o.advertise, "advertise-host", "", "`HOST` the target reaches the providers at, in the printed base URLs")
	fs.StringVar(&o.homes, "homes", "", "also write every tenant's home under this new `DIR` (HOME=DIR/home), ready for the staging server")
	fs.StringVar(&o.layout, "layout", "agentd", "the homes' layout: `agentd`, or a target FILE whose layout: names the server's")
	return fs, o
}

func parseFakeLLM(args []string) (fakellmOptions, error) {
	fs, o := fakellmFlags()
	errs, err := parseFlags(fs, args, "")
	if err != nil {
		return *o, err
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
	if o.homes == "" && o.layout != "agentd" {
		errs = append(errs, errors.New("--layout applies to --homes, which is not given"))
	}
	if o.homes != "" {
		if entries, err := os.ReadDir(o.homes); err == nil && len(entries) > 0 {
			errs = append(errs, fmt.Errorf("--homes %s: not empty: give a new folder, so no earlier tenant's home is mixed in", o.homes))
		}
		if _, err := homesLayout(o.layout); err != nil {
			errs = append(errs, err)
		}
	}
	return *o, errors.Join(errs...)
}

// homesLayout is the layout --layout names: agentd's, or a target file's.
func homesLayout(name string) (tenants.Layout, error) {
	if name == "agentd" {
		return tenants.AgentdLayout(), nil
	}
	t, err := harness.LoadTarget(name)
	if err != nil {
		return tenants.Layout{}, fmt.Errorf("--layout: %w", err)
	}
	return t.Layout.WithDefaults(), nil
}

// closeGrace bounds how long the providers may take to close once
// interrupted.
const closeGrace = 10 * time.Second

// runFakeLLM serves one provider per tenant until ctx ends.
func runFakeLLM(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "canary-run fakellm"
	o, err := parseFakeLLM(args)
	if errors.Is(err, errHelp) {
		fs, _ := fakellmFlags()
		printCommandHelp(stdout, fakellmUsage, fakellmAbout, fs)
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
	if o.out, err = filepath.Abs(o.out); err != nil {
		return usageError(stderr, cmd, fmt.Errorf("--out: %w", err), fakellmUsage)
	}
	// Without --homes the sandbox root holds nothing the target reads; the
	// workdirs the roster names go under --out/work, for a target on this
	// host (a remote one makes the same paths on its host). With --homes,
	// the root is that folder and the homes are written into it.
	layout, _ := homesLayout(o.layout) // checked by parseFakeLLM
	root := o.homes
	if root == "" {
		if root, err = os.MkdirTemp("", "canary-fakellm-"); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return exitUsage
		}
		defer os.RemoveAll(root)
	}
	set, err := tenants.Build(root, tenants.Options{
		Names: names.Names, Launch: names.Launch, ProviderAddr: o.listen, AdvertiseHost: o.advertise,
		WorkRoot: filepath.Join(o.out, "work"), Layout: layout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
	}
	defer set.Close()
	if o.homes != "" {
		if err := set.WriteHomes(tenants.HomeExtras{}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return exitUsage
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return exitUsage
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

	journal := &syncio.Writer{W: jf}
	for _, t := range set.Tenants {
		t.Provider.Journal(journal)
	}

	sf := set.Roster(o.journal)
	canaries := set.Canaries()
	tenantsPath, canariesPath := filepath.Join(o.out, stagingTenantsFile), filepath.Join(o.out, stagingCanariesFile)
	if err := tenants.WriteRoster(tenantsPath, sf); err != nil {
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
	if o.homes != "" {
		fmt.Fprintf(stdout, "homes: HOME=%s (launch home %s, %s=%s)\n", set.Home, set.LaunchHome, set.Layout.HomeVar, set.LaunchHome)
	}
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
