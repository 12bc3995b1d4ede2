// Package dialecttest builds harness/testdata/dialectserver, a small server
// that speaks a dialect other than DESIGN.md's, and loads its target file,
// for the tests of the harness's dialect layer. It sits beside harness (as
// net/http/httptest does beside net/http) so that its import of harness
// runs down the layers: scenarios and cmd/canary-run tests import it.
package dialecttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/harness/attack"
)

// testdata is the folder of the server and its target file.
func testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Build compiles the server into dir and returns the binary's path. Its
// probe plugin is built beside it (ProbeDir): the folder a target file's
// probe_plugin.source names, with harness/attack's hostile plugin in it,
// which the probe plugin's dialect_hostile runs.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "dialectserver")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	probe := ProbeDir(bin)
	if err := os.MkdirAll(probe, 0o755); err != nil {
		return "", fmt.Errorf("build dialectprobe: %w", err)
	}
	manifest, err := os.ReadFile(filepath.Join(testdata(), "dialectprobe", "plugin.json"))
	if err == nil {
		err = os.WriteFile(filepath.Join(probe, "plugin.json"), manifest, 0o644)
	}
	if err == nil {
		// dialect_hostile runs harness/attack's hostile plugin, from here.
		err = attack.WritePlugin(probe)
	}
	if err != nil {
		return "", fmt.Errorf("build dialectprobe: %w", err)
	}
	for _, b := range [][2]string{{bin, "./dialectserver"}, {filepath.Join(probe, "dialectprobe"), "./dialectprobe"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b[0], b[1])
		cmd.Dir = testdata()
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %w\n%s", b[1], err, out)
		}
	}
	return bin, nil
}

// ProbeDir is the folder of the probe plugin Build made beside bin: its
// plugin.json and executable.
func ProbeDir(bin string) string { return filepath.Join(filepath.Dir(bin), "dialectprobe-plugin") }

// The server's target files in harness/testdata.
const (
	// File speaks JSON-RPC 2.0 on the websocket and on stdio.
	File = "dialect-target.yaml"
	// FramedFile speaks the second transport: framed websocket messages
	// first (and framed stdio), then the HTTP chat selecting the agent by
	// model.
	FramedFile = "dialect-framed-target.yaml"
	// SharedFile runs the server in its shared-config mode: one operator
	// config file with a section per agent, state apart from the homes.
	SharedFile = "dialect-shared-target.yaml"
)

// TargetFile writes the server's target file (File), with bin as its
// binary (and @PROBE@ as the probe plugin Build made beside it) and each
// edit (old, new) applied, into dir and returns its path.
func TargetFile(dir, bin string, edits ...string) (string, error) {
	return TargetFileOf(File, dir, bin, edits...)
}

// ChatFirst are the edits of FramedFile that put its chat transport first,
// so the chat drives the catalog (the framed websocket then comes second).
func ChatFirst() ([]string, error) {
	data, err := os.ReadFile(filepath.Join(testdata(), FramedFile))
	if err != nil {
		return nil, fmt.Errorf("read dialect target: %w", err)
	}
	var framed, chat string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "    - {kind: framed"):
			framed = line
		case strings.HasPrefix(line, "    - {kind: chat"):
			chat = line
		}
	}
	if framed == "" || chat == "" {
		return nil, fmt.Errorf("%s: no framed and chat transport lines to swap", FramedFile)
	}
	return []string{framed, "", chat, chat + framed}, nil
}

// TargetFileOf writes the target file name of harness/testdata, with bin
// as its binary and each edit (old, new) applied, into dir and returns its
// path.
func TargetFileOf(name, dir, bin string, edits ...string) (string, error) {
	data, err := os.ReadFile(filepath.Join(testdata(), name))
	if err != nil {
		return "", fmt.Errorf("read dialect target: %w", err)
	}
	text := strings.ReplaceAll(string(data), "@BIN@", bin)
	text = strings.ReplaceAll(text, "@PROBE@", ProbeDir(bin))
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(text, edits[i]) {
			return "", fmt.Errorf("dialect target has no %q to edit", edits[i])
		}
		text = strings.ReplaceAll(text, edits[i], edits[i+1])
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("write dialect target: %w", err)
	}
	return path, nil
}

// Target loads the server's target file (File) with bin as its binary.
func Target(dir, bin string, edits ...string) (harness.Target, error) {
	return TargetOf(File, dir, bin, edits...)
}

// TargetOf loads the target file name of harness/testdata with bin as its
// binary.
func TargetOf(name, dir, bin string, edits ...string) (harness.Target, error) {
	path, err := TargetFileOf(name, dir, bin, edits...)
	if err != nil {
		return harness.Target{}, err
	}
	return harness.LoadTarget(path)
}
