package scenarios

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"

	"github.com/tenantcanary/tenantcanary/harness"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// Serve is the pooled websocket backend of a run: started by the harness, or
// the staging server a target file names.
type Serve struct {
	Proc  *harness.Proc // nil for a running (staging) server
	Base  string        // http://host:port
	Token string
	// Replica is its number among the target's replicas (1 to
	// Target.ReplicaCount; StartReplicas), 1 for the first or only one.
	Replica int
}

// Name is how the scenario names the server: "replica N" of a cluster.
func (s *Serve) Name() string { return fmt.Sprintf("replica %d", max(s.Replica, 1)) }

// Pid is the server's pid, or 0 for a staging server.
func (s *Serve) Pid() int {
	if s.Proc == nil {
		return 0
	}
	return s.Proc.Pid()
}

// CronInterval is the serve backend's tick in scenarios.
const CronInterval = "500ms"

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StartServe starts the pooled server (or adopts the staging one) and waits
// for its ready line.
func (e *Env) StartServe() *Serve {
	e.T.Helper()
	tg := e.Box.Target
	if tg.URL != "" {
		if e.remoteStopped {
			e.startRemote()
			e.remoteStopped = false
		}
		e.Server = &Serve{Base: tg.URL, Token: tg.Token, Replica: 1}
		e.noteOperatorSecret("serve_token", tg.Token)
		e.Box.NoteServe(tg.URL, tg.Token)
		return e.Server
	}
	e.Server = e.startServeReplica(1, newToken())
	e.Box.NoteServe(e.Server.Base, e.Server.Token)
	return e.Server
}

// StartReplicas starts every serve process of the target's cluster
// (Target.Replicas; the first is Env.Server, started here if it is not
// yet), each its own process on the sandbox's one set of homes and stores,
// with its number as {replica} and the first's operator token, and waits
// for each to be ready and healthy. They are stopped with the sandbox,
// their logs scanned with every process's. A staging server is its one
// replica.
func (e *Env) StartReplicas() []*Serve {
	e.T.Helper()
	if e.Server == nil {
		e.StartServe()
	}
	if len(e.Replicas) > 0 {
		return e.Replicas
	}
	out := []*Serve{e.Server}
	for n := 2; n <= e.Box.Target.ReplicaCount(); n++ {
		if e.Box.Target.URL != "" {
			out = append(out, e.reachServeReplica(n))
			continue
		}
		out = append(out, e.startServeReplica(n, e.Server.Token))
	}
	e.Replicas = out
	return out
}

// startServeReplica starts serve process n of the target (1-based) with
// the operator token token and waits until it is ready and healthy.
func (e *Env) startServeReplica(n int, token string) *Serve {
	e.T.Helper()
	tg := e.Box.Target
	port := e.portFor(tg.Serve)
	argv := harness.Expand(tg.Serve, map[string]string{"host": "127.0.0.1", "port": port, "cron_interval": CronInterval, "replica": strconv.Itoa(n)})
	ctx, cancel := e.ctx(e.Times.Ready)
	defer cancel()
	env := e.Box.ReplicaEnv(n)
	env[tg.TokenVar] = token
	if port != "0" {
		env["PORT"] = port // the port it was given, for a server that reads it there
	}
	name, what := "serve", "serve backend"
	if n > 1 {
		name, what = fmt.Sprintf("serve-%d", n), fmt.Sprintf("serve backend (replica %d)", n)
	}
	p, addr := e.startReady(ctx, name, what, argv, env)
	s := &Serve{Proc: p, Base: "http://" + addr, Token: token, Replica: n}
	e.noteOperatorSecret("serve_token", token)
	if err := tg.WaitHealthy(ctx, s.Base, token); err != nil {
		p.Kill()
		e.targetCannotStart(harness.BackendServe, err)
		e.T.Fatalf("%s not healthy: %v", what, err)
	}
	return s
}

// reachServeReplica is a running server's replica n (replica_urls),
// with the operator token of its first, once its health answers.
func (e *Env) reachServeReplica(n int) *Serve {
	e.T.Helper()
	tg := e.Box.Target
	s := &Serve{Base: tg.ReplicaURL(n), Token: e.Server.Token, Replica: n}
	ctx, cancel := e.ctx(e.Times.Ready)
	defer cancel()
	if err := tg.ReplicaHealthy(ctx, n); err != nil {
		e.targetCannotStart(harness.BackendServe, err)
		e.T.Fatalf("the running server's replica is not healthy: %v", err)
	}
	return s
}

// StopServe stops the harness's server (SIGTERM, then kill after the
// grace); it must exit cleanly.
func (e *Env) StopServe(s *Serve) {
	e.T.Helper()
	if s.Proc == nil && e.Box.Target.RemoteRestarts() {
		e.Box.NoteServe("", "")
		e.stopRemote()
		e.remoteStopped = true
		return
	}
	if s.Proc == nil {
		e.T.Fatalf("stop serve: the staging server is not the harness's to stop: %s", e.Box.Target.RemoteLacks("restart"))
	}
	e.Box.NoteServe("", "")
	if err := s.Proc.StopServer(e.Times.Stop); err != nil {
		e.T.Fatalf("stop serve backend: %v", err)
	}
}

// Dial opens a websocket connection owned by owner: every frame on it
// belongs to owner, and a foreign canary on it is a leak. It holds owner's
// tenant credential when the target takes them (Target.TenantCredentials),
// else the operator's token.
func (e *Env) Dial(s *Serve, owner *tenants.Tenant) *harness.Conn {
	e.T.Helper()
	return e.dialAs(s, owner, "websocket "+owner.Name)
}

// dialAs is Dial with the connection's label (the scans name it).
func (e *Env) dialAs(s *Serve, owner *tenants.Tenant, label string) *harness.Conn {
	e.T.Helper()
	ctx, cancel := e.ctx(e.Times.Call)
	defer cancel()
	token := s.Token
	if e.Box.Target.TenantCredentials {
		token = owner.APIServerKey()
	}
	c, err := harness.DialWebsocket(ctx, s.Base, token, e.Box.DialOptions()...)
	if err != nil {
		e.T.Fatalf("connect %s (%s): %v", label, s.Name(), err)
	}
	e.T.Cleanup(c.Close)
	e.own(owner, label, c)
	return c
}

// Gateway is the HTTP gateway of a run.
type Gateway struct {
	Proc   *harness.Proc
	Client *harness.GatewayClient
}

// StartGateway starts the gateway (or adopts the staging one).
func (e *Env) StartGateway() *Gateway {
	e.T.Helper()
	tg := e.Box.Target
	if tg.GatewayURL != "" {
		return &Gateway{Client: &harness.GatewayClient{Base: tg.GatewayURL}}
	}
	port := e.portFor(tg.Gateway)
	argv := harness.Expand(tg.Gateway, map[string]string{"host": "127.0.0.1", "port": port})
	ctx, cancel := e.ctx(e.Times.Ready)
	defer cancel()
	var env map[string]string
	if port != "0" {
		env = map[string]string{"PORT": port}
	}
	p, addr := e.startReady(ctx, "gateway", "gateway", argv, env)
	return &Gateway{Proc: p, Client: &harness.GatewayClient{Base: "http://" + addr}}
}

// startReady starts the target's process name (what, in messages) from
// argv with env added, and waits, until ctx ends, for its ready line;
// it returns the process and the address the line names. A process
// that cannot start or never gets ready is the target's failure to start
// (targetCannotStart), and is killed.
func (e *Env) startReady(ctx context.Context, name, what string, argv []string, env map[string]string) (*harness.Proc, string) {
	e.T.Helper()
	tg := e.Box.Target
	p, err := e.Box.Start(e.Ctx, name, argv, false, env)
	if err != nil {
		e.targetCannotStart(backendOf(name), err)
		e.T.Fatalf("start %s: %v", what, err)
	}
	m, err := p.WaitLine(ctx, tg.ReadyRE())
	if err != nil {
		p.Kill()
		e.targetCannotStart(backendOf(name), err)
		e.T.Fatalf("%s not ready: %v", what, err)
	}
	e.targetReady()
	if port := env["PORT"]; port != "" {
		// The port the harness picked: the ready line names none.
		return p, net.JoinHostPort("127.0.0.1", port)
	}
	return p, tg.ReadyAddr(m, "127.0.0.1")
}

// portFor is the port a backend started from argv is given: one the
// harness picks when the command takes {port} and the ready line names
// none (Target.PicksPort), else 0 (the backend picks and prints it).
func (e *Env) portFor(argv []string) string {
	e.T.Helper()
	if !e.Box.Target.PicksPort(argv) {
		return "0"
	}
	port, err := harness.FreePort()
	if err != nil {
		e.T.Fatalf("%v", err)
	}
	return port
}
