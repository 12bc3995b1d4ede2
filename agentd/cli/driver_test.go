package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/fakellm"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/internal/syncio"
)

// PID is the shell's pid and its PID namespace: in a sandbox two shells
// can both be pid 2, each in a namespace of its own.
const probe = "echo SNAPSHOT-BEGIN; env | sort; echo CWD=$(pwd); echo PID=$$@$(readlink /proc/self/ns/pid 2>/dev/null); echo SNAPSHOT-END"

// tenant is one profile with its own provider and canaries.
type tenant struct {
	name, profile string // profile "" is the launch profile
	home, workdir string
	key, marker   string
	model, soul   string
	shellState    string
	srv           *fakellm.Server
}

// world is a sandbox: HOME, a launch home, tenants.
type world struct {
	t        testing.TB
	root     string
	home     string
	launch   string
	managed  string
	tenants  map[string]*tenant
	extraEnv []string // added to every command run with w.run
}

func newWorld(t testing.TB) *world {
	t.Helper()
	root := t.TempDir()
	w := &world{t: t, root: root, home: filepath.Join(root, "home"), managed: filepath.Join(root, "managed"), tenants: map[string]*tenant{}}
	w.launch = filepath.Join(w.home, ".agentd")
	require.NoError(t, os.MkdirAll(w.launch, 0o700))
	require.NoError(t, os.MkdirAll(w.managed, 0o700))
	w.writeManaged("")
	return w
}

// writeManaged writes the managed (operator) scope's config.yaml: the
// workdir roots every world declares (<root>/work/{profile}: a profile's
// cwd must lie in its home or its roots), then text, whose terminal keys
// join them.
func (w *world) writeManaged(text string) {
	w.t.Helper()
	roots := "  workdir_roots: [\"" + filepath.Join(w.root, "work") + "/{profile}\"]\n"
	if rest, ok := strings.CutPrefix(text, "terminal:\n"); ok {
		text = "terminal:\n" + roots + rest
	} else {
		text = "terminal:\n" + roots + text
	}
	writeFile(w.t, filepath.Join(w.managed, "config.yaml"), text)
}

// workdirOf is a tenant's workdir: beneath its profile's workdir root.
func (w *world) workdirOf(profile, name string) string {
	if profile == "" {
		profile = "default"
	}
	return filepath.Join(w.root, "work", profile, "work-"+name)
}

func tag() string { return fmt.Sprintf("%x", time.Now().UnixNano())[6:] }

// addTenant makes a tenant; launch=true puts it in the launch home.
func (w *world) addTenant(name string, launch bool) *tenant {
	t := w.t
	t.Helper()
	tg := tag()
	tn := &tenant{name: name, key: "sk-prov-" + name + "-" + tg, marker: "envmark-" + name + "-" + tg,
		model: "model-" + name + "-" + tg, soul: "soul-canary-" + name + "-" + tg, shellState: "shellstate-" + name + "-" + tg}
	if launch {
		tn.home = w.launch
	} else {
		tn.profile = name
		tn.home = filepath.Join(w.launch, "profiles", name)
	}
	tn.workdir = w.workdirOf(tn.profile, name)
	require.NoError(t, os.MkdirAll(tn.workdir, 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(tn.home, "memories"), 0o700))
	srv, err := fakellm.New(fakellm.Options{Keys: []string{tn.key}, Model: tn.model, Responder: tn.respond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	tn.srv = srv
	writeFile(t, filepath.Join(tn.home, "config.yaml"), fmt.Sprintf(
		"model:\n  provider: custom\n  base_url: %s\n  default: %s\n  key_env: TENANT_PROVIDER_KEY\nagent:\n  api_max_retries: 1\nterminal:\n  backend: local\n  cwd: %s\nmemory:\n  memory_enabled: true\n",
		srv.BaseURL, tn.model, tn.workdir))
	writeFile(t, filepath.Join(tn.home, ".env"), fmt.Sprintf("# tenant %s\nTENANT_PROVIDER_KEY=%s\nexport ENV_MARKER=%q\n", name, tn.key, tn.marker))
	writeFile(t, filepath.Join(tn.home, "SOUL.md"), "You are "+tn.soul+".\n")
	writeFile(t, filepath.Join(tn.home, "memories", "MEMORY.md"), "memory-canary-"+name+"-"+tg+"\n")
	w.tenants[name] = tn
	return tn
}

// alphaBetaWorld is the world most tests start from: tenant alpha in the
// launch profile and tenant beta in the named profile beta.
func alphaBetaWorld(t testing.TB) (*world, *tenant, *tenant) {
	t.Helper()
	w := newWorld(t)
	return w, w.addTenant("alpha", true), w.addTenant("beta", false)
}

// defendedAndSeeded runs body as two parallel subtests: "defended", with
// no fault (seeded false, env nil), and one named after fault, with env the
// server environment that seeds it (the positive control).
func defendedAndSeeded(t *testing.T, fault string, body func(t *testing.T, seeded bool, env []string)) {
	t.Helper()
	for _, seeded := range []bool{false, true} {
		name, env := "defended", []string(nil)
		if seeded {
			name, env = fault, []string{"AGENTD_FAULTS=" + fault, "AGENTD_ALLOW_FAULTS=1"}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body(t, seeded, env)
		})
	}
}

// respond: a user turn runs the probe, a tool result gets the answer.
func (tn *tenant) respond(r fakellm.Record) fakellm.Response {
	msgs := r.Messages()
	if len(msgs) > 0 && msgs[len(msgs)-1]["role"] == "tool" {
		return fakellm.Text("probe done for " + tn.name)
	}
	return fakellm.ToolCall("terminal", map[string]string{"command": probe + "; export TENANT_SHELL_STATE=" + tn.shellState})
}

// installPlugin writes the plugin name (plugin.yaml and src as its
// plugin.go) into the home of each of tns.
func installPlugin(t testing.TB, name, src string, tns ...*tenant) {
	t.Helper()
	for _, tn := range tns {
		dir := filepath.Join(tn.home, "plugins", name)
		writeFile(t, filepath.Join(dir, "plugin.yaml"), "name: "+name+"\nversion: \"1.0\"\n")
		writeFile(t, filepath.Join(dir, "plugin.go"), src)
	}
}

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
}

// env is the hermetic environment of an agentd child.
func (w *world) env(extra ...string) []string {
	return append([]string{
		"AGENTD_TEST_MAIN=1",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + w.home,
		"AGENTD_HOME=" + w.launch,
		"AGENTD_MANAGED_DIR=" + w.managed,
		"AGENTD_SHUTDOWN_GRACE=5s",
		"LANG=C",
		// Credential-shaped variables of agentd's own environment must never
		// reach a tool: these are the positive control for the scrub.
		"OPENAI_API_KEY=sk-agentd-process-secret",
		"SERVER_ONLY_TOKEN=server-token-secret",
	}, extra...)
}

// run runs one agentd command to completion.
func (w *world) run(args ...string) (stdout, stderr string, code int) {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	procgroup.Prepare(cmd)
	cmd.Env = w.env(w.extraEnv...)
	cmd.Dir = w.root
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "run agentd %v: %v", args, err)
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// agentd is a running `agentd tui` child.
type agentd struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncio.Buffer
	pid    int

	write     func(line string) error // sends one frame
	closeConn func()                  // closes a websocket connection
	describe  func() string           // what to show when the peer is gone

	mu      sync.Mutex
	frames  []map[string]any
	raw     []string
	change  chan struct{}
	eof     bool
	nextID  int
	exited  chan struct{}
	waitErr error
}

func (w *world) startTUI(extraEnv ...string) *agentd {
	t := w.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "tui")
	procgroup.Prepare(cmd)
	cmd.Env = w.env(extraEnv...)
	cmd.Dir = w.root
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	a := &agentd{t: t, cmd: cmd, stdin: stdin, stderr: &syncio.Buffer{}, change: make(chan struct{}), exited: make(chan struct{})}
	a.write = func(line string) error {
		_, err := io.WriteString(stdin, line+"\n")
		return err
	}
	a.describe = func() string { return fmt.Sprintf("agentd exited (%v); stderr:\n%s", a.waitErr, a.stderr.String()) }
	cmd.Stderr = a.stderr
	require.NoError(t, cmd.Start())
	a.pid = cmd.Process.Pid
	go a.read(stdout)
	t.Cleanup(func() {
		_ = procgroup.Kill(a.pid)
		<-a.exited
		if t.Failed() {
			t.Logf("agentd %d stderr:\n%s", a.pid, a.stderr.String())
		}
	})
	ready := a.waitFor("gateway.ready event", func(m map[string]any) bool { return eventType(m) == "gateway.ready" })
	require.Equal(t, float64(a.pid), ready["params"].(map[string]any)["payload"].(map[string]any)["pid"])
	return a
}

func (a *agentd) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		a.deliver(sc.Text())
	}
	a.waitErr = a.cmd.Wait()
	a.end()
	close(a.exited)
}

// deliver records one frame received.
func (a *agentd) deliver(line string) {
	var m map[string]any
	err := json.Unmarshal([]byte(line), &m)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.raw = append(a.raw, line)
	if err != nil {
		m = map[string]any{"__bad_frame__": line}
	}
	a.frames = append(a.frames, m)
	close(a.change)
	a.change = make(chan struct{})
}

// end records that no more frames will come.
func (a *agentd) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.eof = true
	close(a.change)
	a.change = make(chan struct{})
}

func eventType(m map[string]any) string {
	if m["method"] != "event" {
		return ""
	}
	p, _ := m["params"].(map[string]any)
	s, _ := p["type"].(string)
	return s
}

// waitFor returns the first frame matching pred, waiting up to 60s.
func (a *agentd) waitFor(what string, pred func(map[string]any) bool) map[string]any {
	a.t.Helper()
	return a.waitScan(what, func(frames []map[string]any) map[string]any {
		for _, m := range frames {
			if pred(m) {
				return m
			}
		}
		return nil
	})
}

// waitScan waits until scan, run over every frame so far, returns one.
func (a *agentd) waitScan(what string, scan func([]map[string]any) map[string]any) map[string]any {
	a.t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		if m := scan(a.frames); m != nil {
			a.mu.Unlock()
			return m
		}
		ch, eof := a.change, a.eof
		n := len(a.frames)
		tail := a.raw[max(0, len(a.raw)-10):]
		a.mu.Unlock()
		if eof {
			a.t.Fatalf("connection ended before %s; last frames:\n%s\n%s", what, strings.Join(tail, "\n"), a.describe())
		}
		select {
		case <-ch:
		case <-deadline.C:
			a.t.Fatalf("timed out waiting for %s (%d frames); last frames:\n%s", what, n, strings.Join(tail, "\n"))
		}
	}
}

func (a *agentd) send(line string) {
	a.t.Helper()
	require.NoError(a.t, a.write(line))
}

// fire sends a request without waiting (reply waits for its answer)
// and returns its id.
func (a *agentd) fire(method string, params any) int {
	a.t.Helper()
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	a.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(a.t, err)
	a.send(string(b))
	return id
}

// call sends a request and returns its reply frame.
func (a *agentd) call(method string, params any) map[string]any {
	a.t.Helper()
	id := a.fire(method, params)
	return a.waitFor(fmt.Sprintf("reply to %s #%d", method, id), func(m map[string]any) bool {
		return m["id"] == float64(id) && m["method"] == nil
	})
}

// ok calls and requires a result.
func (a *agentd) ok(method string, params any) map[string]any {
	a.t.Helper()
	r := a.call(method, params)
	require.Nil(a.t, r["error"], "%s %v", method, params)
	res, _ := r["result"].(map[string]any)
	require.NotNil(a.t, res, "%s: %v", method, r)
	return res
}

// errCode calls and requires an error, returning its code.
func (a *agentd) errCode(method string, params any) int {
	a.t.Helper()
	r := a.call(method, params)
	e, ok := r["error"].(map[string]any)
	require.True(a.t, ok, "%s %v: want an error, got %v", method, params, r)
	return int(e["code"].(float64))
}

// create opens a session in a profile and returns its live id.
func (a *agentd) create(profile string) (string, map[string]any) {
	a.t.Helper()
	params := map[string]any{}
	if profile != "" {
		params["profile"] = profile
	}
	res := a.ok("session.create", params)
	return res["session_id"].(string), res
}

// events returns the events of a session so far.
func (a *agentd) events(sid string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, m := range a.frames {
		if p, _ := m["params"].(map[string]any); m["method"] == "event" && p["session_id"] == sid {
			out = append(out, p)
		}
	}
	return out
}

// completes counts a session's message.complete events.
func (a *agentd) completes(sid string) int {
	n := 0
	for _, e := range a.events(sid) {
		if e["type"] == "message.complete" {
			n++
		}
	}
	return n
}

// turn submits a prompt and waits for that session's next message.complete.
// probeIn opens a session of profile ("" the launch profile) and runs one
// probe turn in it; it returns the session id.
func (a *agentd) probeIn(profile string) string {
	a.t.Helper()
	sid, _ := a.create(profile)
	a.turn(sid, "probe")
	return sid
}

func (a *agentd) turn(sid, text string) map[string]any {
	a.t.Helper()
	before := a.completes(sid)
	a.submit(sid, text)
	return a.waitComplete(sid, before+1)
}

func (a *agentd) submit(sid, text string) {
	a.t.Helper()
	res := a.ok("prompt.submit", map[string]any{"session_id": sid, "text": text})
	require.Equal(a.t, "streaming", res["status"])
}

// waitComplete waits for a session's n-th message.complete and returns its payload.
func (a *agentd) waitComplete(sid string, n int) map[string]any {
	a.t.Helper()
	m := a.waitScan(fmt.Sprintf("message.complete #%d of %s", n, sid), func(frames []map[string]any) map[string]any {
		count := 0
		for _, m := range frames {
			if p, _ := m["params"].(map[string]any); eventType(m) == "message.complete" && p["session_id"] == sid {
				if count++; count == n {
					return m
				}
			}
		}
		return nil
	})
	return m["params"].(map[string]any)["payload"].(map[string]any)
}

// close ends stdin and waits for a clean exit.
func (a *agentd) close() {
	a.t.Helper()
	require.NoError(a.t, a.stdin.Close())
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		a.t.Fatalf("agentd %d did not exit after stdin closed", a.pid)
	}
	require.NoError(a.t, a.waitErr, "agentd exits 0 after stdin EOF; stderr:\n%s", a.stderr.String())
}

// toolResults returns the tool messages a provider received, in order of
// arrival, deduplicated (later requests resend history).
func toolResults(srv *fakellm.Server) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range srv.RequestsOf(fakellm.KindMain) {
		for _, m := range r.Messages() {
			if m["role"] != "tool" {
				continue
			}
			id, _ := m["tool_call_id"].(string)
			c, _ := m["content"].(string)
			if !seen[id+c] {
				seen[id+c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// snapshot cuts the probe's output out of a tool result.
func snapshot(t *testing.T, result string) (env map[string]string, cwd string, shell string) {
	t.Helper()
	i := strings.Index(result, "SNAPSHOT-BEGIN\n")
	j := strings.Index(result, "SNAPSHOT-END")
	require.True(t, i >= 0 && j > i, "no snapshot in %q", result)
	env = map[string]string{}
	for _, line := range strings.Split(result[i+len("SNAPSHOT-BEGIN\n"):j], "\n") {
		switch {
		case strings.HasPrefix(line, "CWD="):
			cwd = strings.TrimPrefix(line, "CWD=")
		case strings.HasPrefix(line, "PID="):
			shell = strings.TrimPrefix(line, "PID=")
		default:
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
	}
	return env, cwd, shell
}

// tenantProcs lists the live processes carrying the tenant's ENV_MARKER
// (its shells, plugin hosts and all they started), read from /proc, which
// sees through the sandboxes' PID namespaces.
func tenantProcs(tn *tenant) []int {
	// A plugin host's own environment holds its home's path, not the
	// profile's variables (they reach it over the protocol).
	pids := procgroup.WithEnv("ENV_MARKER=" + tn.marker)
	for _, p := range procgroup.WithEnv("AGENTD_HOME=" + tn.home) {
		if !slices.Contains(pids, p) {
			pids = append(pids, p)
		}
	}
	return pids
}

// forget drops the frames seen so far (benchmarks keep scans short).
func (a *agentd) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.frames = nil
	a.raw = nil
}

// toolThenText is a provider for key that answers a prompt with one tool
// call (call makes its name and arguments from the prompt) and the tool's
// result with done: a turn that runs one tool.
func toolThenText(t *testing.T, key, done string, call func(prompt any) (string, any)) *fakellm.Server {
	t.Helper()
	srv, err := fakellm.New(fakellm.Options{Keys: []string{key}, Responder: func(r fakellm.Record) fakellm.Response {
		msgs := r.Messages()
		if msgs[len(msgs)-1]["role"] == "tool" {
			return fakellm.Text(done)
		}
		tool, args := call(msgs[len(msgs)-1]["content"])
		return fakellm.ToolCall(tool, args)
	}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}
