package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/isolation"
	"github.com/tenantcanary/tenantcanary/plugin"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// ServeChild runs a plugin host on the given streams: it says hello, then
// serves the parent's requests until stdin closes (nil) or ctx ends (nil;
// the caller should then exit). It is what `agentd plugin-host` runs.
//
// On the process's own stdin and stdout it first becomes the host's keeper
// (see keep): it runs the host proper as its child, cleans up after it, and
// exits with the host's status without returning. A host whose launcher's
// PID namespace ends with it (Config.OwnPIDNamespace) is the host proper
// at once.
//
// When stdout is os.Stdout, the protocol moves to a private copy of file
// descriptor 1 and descriptor 1 itself is pointed at stderr, so nothing a
// plugin prints can reach the protocol stream.
func ServeChild(ctx context.Context, stdin io.Reader, stdout io.Writer, stderr io.Writer) error {
	if stdout == nil || stdin == nil {
		return errors.New("serve plugin host: stdin and stdout are required")
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if in, ok := stdin.(*os.File); ok && in == os.Stdin {
		if out, ok := stdout.(*os.File); ok && out == os.Stdout && os.Getenv(keeperEnv) == "" {
			return keep(stderr)
		}
	}
	_ = os.Unsetenv(keeperEnv) // plugins see the profile's environment only
	if f, ok := stdout.(*os.File); ok && f == os.Stdout {
		proto, err := privateStdout()
		if err != nil {
			return fmt.Errorf("serve plugin host: %w", err)
		}
		stdout = proto
	}
	if f, ok := stdin.(*os.File); ok && f == os.Stdin {
		proto, err := privateStdin()
		if err != nil {
			return fmt.Errorf("serve plugin host: %w", err)
		}
		stdin = proto
	}
	// A host never starts a host of its own: every loader here loads directly.
	if err := os.Setenv(isolation.HostProcessEnv, "1"); err != nil {
		return fmt.Errorf("serve plugin host: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &child{ctx: ctx, stderr: stderr, inflight: map[uint64]context.CancelFunc{}}
	c.conn = newConn("plugin host's parent", stdin, stdout, DefaultMaxFrame, c.handle)
	c.conn.selfRead = true
	c.conn.start()
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	defer hcancel()
	if err := c.conn.send(hctx, &Frame{Op: opHello, Body: mustJSON(helloBody{Protocol: ProtocolVersion, PID: os.Getpid()})}); err != nil {
		return fmt.Errorf("serve plugin host: say hello: %w", err)
	}
	select {
	case <-c.conn.done:
		c.conn.wait()
	case <-ctx.Done():
		// A blocking read cannot be interrupted: the reader goes with the
		// process, which is about to exit.
		c.conn.fail(ctx.Err())
		return nil
	}
	fmt.Fprintf(stderr, "plugin host %d: the connection closed (%v); exiting\n", os.Getpid(), c.conn.broken())
	if err := c.conn.broken(); err != nil && !errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
		return fmt.Errorf("serve plugin host: %w", err)
	}
	return nil
}

// privateStdout moves the protocol off descriptor 1: it returns a copy of
// it and points 1 at 2.
func privateStdout() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("copy stdout: %w", err)
	}
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, fmt.Errorf("point stdout at stderr: %w", err)
	}
	return private(fd, "plugin-host-protocol-out")
}

// privateStdin moves the protocol off descriptor 0: it returns a copy of
// it and points 0 at /dev/null, so plugin code cannot read the stream.
func privateStdin() (*os.File, error) {
	fd, err := syscall.Dup(0)
	if err != nil {
		return nil, fmt.Errorf("copy stdin: %w", err)
	}
	null, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer syscall.Close(null)
	if err := syscall.Dup3(null, 0, 0); err != nil {
		return nil, fmt.Errorf("point stdin at %s: %w", os.DevNull, err)
	}
	return private(fd, "plugin-host-protocol-in")
}

// private wraps fd as a blocking *os.File: a blocking read returns to the
// reading goroutine directly, which measured faster here than the poller.
func private(fd int, name string) (*os.File, error) {
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), name), nil
}

type child struct {
	ctx    context.Context
	conn   *conn
	stderr io.Writer

	mu       sync.Mutex
	reg      *registry
	inflight map[uint64]context.CancelFunc
}

type callKey struct{}

type loadBody struct {
	Gen     uint64             `json:"gen"`
	Plugins []pluginload.Found `json:"plugins"`
	// Limits are set before any plugin loads.
	Limits Limits `json:"limits"`
	// Env is the profile's environment, set (applyEnv) before any plugin
	// loads: it never is the host process's own (see Config.Env).
	Env []string `json:"env,omitempty"`
	// Started is the environment agentd started the host's process (its
	// launcher) with: what a launcher added or changed is the rest.
	Started []string `json:"started,omitempty"`
}

type loadReply struct {
	Plugins []PluginStatus `json:"plugins"`
}

type loadingBody struct {
	Name string `json:"name"`
}

type callBody struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

type resultBody struct {
	Result string `json:"result"`
}

type hookBody struct {
	Ref     Ref            `json:"ref"`
	Payload map[string]any `json:"payload"`
}

type schemaBody struct {
	Plugin string `json:"plugin"`
}

type extractBody struct {
	Plugin  pluginload.Found `json:"plugin"`
	Limits  Limits           `json:"limits"`
	Env     []string         `json:"env,omitempty"`
	Started []string         `json:"started,omitempty"`
}

type extractReply struct {
	Profiles []plugin.ModelProfile `json:"profiles"`
}

type facadeBody struct {
	Facade string   `json:"facade"`
	Method string   `json:"method"`
	Args   []string `json:"args"`
}

func (c *child) registry() (*registry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reg == nil {
		return nil, fmt.Errorf("no plugins loaded yet: %w", ErrUnavailable)
	}
	return c.reg, nil
}

// callCtx is the context a request runs in: its deadline, its session, and
// its id so nested calls name the call they belong to.
func (c *child) callCtx(f *Frame) (context.Context, func()) {
	ctx := c.ctx
	var cancel context.CancelFunc
	if f.TimeoutMS > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(f.TimeoutMS)*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	ctx = plugin.WithSession(ctx, f.Session)
	ctx = context.WithValue(ctx, callKey{}, f.ID)
	ctx = withReadToken(ctx, f)
	c.mu.Lock()
	c.inflight[f.ID] = cancel
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.inflight, f.ID)
		c.mu.Unlock()
		cancel()
	}
}

func decode(f *Frame, v any) error {
	if err := decodeBody(f.Body, v); err != nil {
		return fmt.Errorf("decode %q request: %v: %w", f.Op, err, ErrProtocol)
	}
	return nil
}

// withBody decodes f's body as a B and answers with do's answer to it.
func withBody[B any](f *Frame, do func(B) (any, error)) (any, error) {
	var b B
	if err := decode(f, &b); err != nil {
		return nil, err
	}
	return do(b)
}

// extract loads one plugin in a registry of its own, only to read the
// model profiles its providers declare.
func (c *child) extract(b extractBody) (any, error) {
	if err := applyEnv(b.Env, b.Started); err != nil {
		return nil, err
	}
	if err := b.Limits.apply(); err != nil {
		return nil, err
	}
	g := newRegistry(0, true, c, c.stderr)
	st := g.load(b.Plugin)
	if st.Error != "" {
		return nil, fmt.Errorf("extract model provider %s: %s: %w", b.Plugin.Name, st.Error, ErrPlugin)
	}
	var r extractReply
	for _, p := range st.Providers {
		if p.Kind == KindModel && p.Profile != nil {
			r.Profiles = append(r.Profiles, *p.Profile)
		}
	}
	return r, nil
}

// resultOf is the text of a result reply, raw; what says, for errors,
// whose reply it is.
func resultOf(raw []byte, what string) (string, error) {
	var r resultBody
	if err := decodeBody(raw, &r); err != nil {
		return "", fmt.Errorf("%s: %v: %w", what, err, ErrProtocol)
	}
	return r.Result, nil
}

func (c *child) handle(f *Frame) {
	if f.Op == opCancel {
		var b cancelBody
		if decode(f, &b) == nil {
			c.mu.Lock()
			cancel := c.inflight[b.ID]
			c.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
		return
	}
	if f.ID == 0 {
		return // an unknown notification
	}
	ctx, done := c.callCtx(f)
	defer done()
	body, err := c.serve(ctx, f)
	c.conn.reply(ctx, f.ID, body, err)
}

func (c *child) serve(ctx context.Context, f *Frame) (any, error) {
	switch f.Op {
	case opLoad:
		return withBody(f, func(b loadBody) (any, error) { return c.load(ctx, b) })
	case opExtract:
		return withBody(f, c.extract)
	}
	g, err := c.registry()
	if err != nil {
		return nil, err
	}
	switch f.Op {
	case opCall:
		return withBody(f, func(b callBody) (any, error) {
			out, err := g.callTool(ctx, b.Tool, b.Args)
			if err != nil {
				return nil, err
			}
			return resultBody{out}, nil
		})
	case opHook:
		return withBody(f, func(b hookBody) (any, error) { return nil, g.runHook(ctx, b.Ref, b.Payload) })
	case opProvider:
		return withBody(f, func(b providerArgs) (any, error) { return g.callProvider(ctx, b) })
	case opSchema:
		return withBody(f, func(b schemaBody) (any, error) { return g.schema(ctx, b.Plugin) })
	}
	return nil, fmt.Errorf("operation %q: %w", f.Op, ErrUnsupported)
}

func (c *child) load(ctx context.Context, b loadBody) (any, error) {
	c.mu.Lock()
	if c.reg != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("plugins are already loaded in this host: %w", ErrUnsupported)
	}
	if err := applyEnv(b.Env, b.Started); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if err := b.Limits.apply(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	g := newRegistry(b.Gen, true, c, c.stderr)
	c.reg = g
	c.mu.Unlock()
	for _, p := range b.Plugins {
		// The parent must know which plugin was loading if this host dies.
		if _, err := c.conn.request(ctx, &Frame{Op: opLoading, Body: mustJSON(loadingBody{p.Name})}, ""); err != nil {
			return nil, fmt.Errorf("announce loading plugin %s: %w", p.Name, err)
		}
		g.load(p)
	}
	return loadReply{Plugins: g.plugins()}, nil
}

// dispatch and facade make child a reach: a plugin's Context calls into
// the server over the wire, naming the call it is nested in.
func (c *child) dispatch(ctx context.Context, tool string, args map[string]any) (string, error) {
	b, err := c.upcall(ctx, opDispatch, callBody{Tool: tool, Args: args})
	if err != nil {
		return "", fmt.Errorf("dispatch %s to the server: %w", tool, err)
	}
	return b, nil
}

func (c *child) facade(ctx context.Context, facade, method string, args []string) (string, error) {
	b, err := c.upcall(ctx, opFacade, facadeBody{Facade: facade, Method: method, Args: args})
	if err != nil {
		return "", fmt.Errorf("%s.%s on the server: %w", facade, method, err)
	}
	return b, nil
}

func (c *child) upcall(ctx context.Context, op string, body any) (string, error) {
	// The body carries what a plugin passed (tool arguments): a value JSON
	// cannot carry is the plugin's error, not a dead host.
	enc, err := encodeBody(body)
	if err != nil {
		return "", fmt.Errorf("encode the call's arguments: %w", err)
	}
	f := &Frame{Op: op, Body: enc}
	f.Parent, _ = ctx.Value(callKey{}).(uint64)
	if dl, ok := ctx.Deadline(); ok {
		f.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	raw, err := c.conn.request(ctx, f, "")
	if err != nil {
		return "", err
	}
	return resultOf(raw, "decode "+op+" reply")
}

// applyEnv makes env (the profile's, from the parent's request) this
// host's environment, before any plugin loads: plugins, and every process
// they start, see it and not the environment agentd started the host's
// process with (started: outerenv's allow-list and agentd's markers).
// What the launcher set or changed over started wins over the profile's,
// as when it was the launcher's own environment: bwrap's --setenv TMPDIR
// /tmp, the Landlock launcher's private tmp, an operator's env(1)
// prefix. isolation.HostProcessEnv is 1; keeperEnv is agentd's alone, a
// profile's value of it is dropped. A host of a parent that sends no
// environment keeps its process's.
func applyEnv(env, started []string) error {
	if env == nil {
		return nil
	}
	agentds := map[string]bool{}
	for _, kv := range started {
		agentds[kv] = true
	}
	var launchers []string
	for _, kv := range os.Environ() {
		if !agentds[kv] {
			launchers = append(launchers, kv)
		}
	}
	os.Clearenv()
	for _, kv := range append(append(env, launchers...), isolation.HostProcessEnv+"=1") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || name == keeperEnv {
			continue
		}
		if err := os.Setenv(name, value); err != nil {
			return fmt.Errorf("set the profile's environment in the plugin host: %s: %w", name, err)
		}
	}
	return nil
}
