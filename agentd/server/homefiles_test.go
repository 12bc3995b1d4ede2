package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/agent"
	"github.com/tenantcanary/tenantcanary/agentd/cron"
	"github.com/tenantcanary/tenantcanary/agentd/faults"
	"github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
	"github.com/tenantcanary/tenantcanary/agentd/plugins"
	"github.com/tenantcanary/tenantcanary/agentd/profile"
	"github.com/tenantcanary/tenantcanary/agentd/rpc"
	"github.com/tenantcanary/tenantcanary/agentd/scope"
	"github.com/tenantcanary/tenantcanary/fakellm"
)

// Bounds of the hostile home files tests.
const (
	// answerWithin is how soon the server must answer an action that
	// reads a hostile file: at once, not at a deadline of its own.
	answerWithin = 5 * time.Second
	// stopWithin is how soon the server must stop once every hostile
	// action has been answered.
	stopWithin = 10 * time.Second
	// allocBound is how much the server may allocate (runtime.MemStats
	// TotalAlloc, every byte allocated, freed or not) for one action over
	// a hostile file: far below hostile.SparseSize or a device read for
	// answerWithin, and above a turn's own allocations.
	allocBound = 64 << 20
	// launchSoul is the launch profile's SOUL.md: no frame sent to the
	// attacker may hold it.
	launchSoul = "soul-of-launch-7f3a9c"
	// launchKey is the launch profile's tenant credential.
	launchKey = "tenant-key-of-launch-51be0d"
)

// homeSite is one read of a home file the server makes, and the protocol
// action that makes it: the rows a harness is pointed at.
type homeSite struct {
	file   string // in the attacker's home (profile b)
	action string
	// open runs before the plant (a session that must exist first); its
	// result is given to drive.
	open func(h *hostileHome) string
	// drive runs the action and returns what the attacker received.
	drive func(ctx context.Context, h *hostileHome, sid string) (string, error)
}

// homeSites is every read of a tenant's home file the server makes
// itself, by the action that makes it.
var homeSites = []homeSite{
	{file: ".env", action: "connect with another tenant's token", drive: driveConnect},
	{file: ".env", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
	{file: ".env", action: "model.save_key", drive: driveCall("model.save_key", map[string]any{"profile": "b", "slug": "x", "api_key": "k"})},
	{file: "config.yaml", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
	{file: "config.yaml", action: "config.set", drive: driveCall("config.set", map[string]any{"profile": "b", "key": "prompt", "value": "p"})},
	{file: "SOUL.md", action: "prompt.submit", open: openSession, drive: driveTurn},
	{file: "memories/MEMORY.md", action: "prompt.submit", open: openSession, drive: driveTurn},
	{file: "plugins/p/plugin.yaml", action: "prompt.submit", open: withPlugin("p", ""), drive: driveTurn},
	{file: "plugins/model-providers/m/plugin.yaml", action: "prompt.submit (model.provider plugin:m)", open: withPlugin("model-providers/m", "m"), drive: driveTurn},
	{file: "plugins/model-providers/m/m.go", action: "prompt.submit (model.provider plugin:m)", open: withPlugin("model-providers/m", "m"), drive: driveTurn},
	{file: "cron/jobs.json", action: "cron.list", drive: driveCall("cron.list", map[string]any{"profile": "b"})},
	{file: "cron/jobs.json", action: "cron.create", drive: driveCall("cron.create", map[string]any{"profile": "b", "prompt": "p", "every": "every 1h"})},
	{file: "cron/jobs.json", action: "cron.trigger", drive: driveCall("cron.trigger", map[string]any{"profile": "b", "id": "abcdef012345"})},
	{file: "cron/jobs.json", action: "cron tick", drive: driveTick},
	{file: "cron/jobs.lock", action: "cron.create", drive: driveCall("cron.create", map[string]any{"profile": "b", "prompt": "p", "every": "every 1h"})},
	{file: "logs/agent.log", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
	{file: "state.db", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
	{file: "state.db-wal", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
	{file: "state.db-shm", action: "session.create", drive: driveCall("session.create", map[string]any{"profile": "b"})},
}

// hostileHome is a server whose profile b (the attacker) plants files in
// its own home, and whose launch profile (the victim) must be served.
type hostileHome struct {
	*fixture
	atk, victim *memConn
	bHome       string
	ids         atomic.Int64 // request ids, apart from the fixture's
}

func newHostileHome(t *testing.T, fs faults.Set) *hostileHome {
	t.Helper()
	var backend *Server
	f := newFixtureWith(t, func(fakellm.Record) fakellm.Response { return fakellm.Text("ok") }, func(o *Options) {
		o.Faults, o.Homes.Faults = fs, fs // the server's, and its homes' (as agentd's cli sets them)
		// A turn's tools are its profile's plugins too, as agentd's cli
		// makes them: the server discovers them. No plugin host can run
		// here (this test binary is none): one that starts fails.
		o.Tools = func(sc *scope.Scope) *agent.Registry {
			reg, _ := plugins.Registry(context.Background(), sc, []agent.Tool{agent.TerminalTool{}}, plugins.Options{
				Command: []string{"/nonexistent/agentd-plugin-host"}, Backend: backend, Pooled: true, Faults: fs, Self: o.Self})
			return reg
		}
	})
	backend = f.srv
	lp, err := f.homes.Get("")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lp.File("SOUL.md"), []byte(launchSoul), 0o600))
	require.NoError(t, lp.SetEnv(TenantKeyEnv, launchKey))
	bHome, err := f.homes.Path("b")
	require.NoError(t, err)
	return &hostileHome{fixture: f, atk: newConn("atk"), victim: newConn("victim"), bHome: bHome}
}

// request dispatches a request from conn and waits for its reply until
// ctx ends.
func (h *hostileHome) request(ctx context.Context, conn *memConn, method string, params any) (map[string]any, error) {
	id := 1<<20 + h.ids.Add(1)
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	go h.d.Dispatch(context.Background(), conn, b)
	return conn.waitCtx(ctx, func(m map[string]any) bool { return m["id"] == float64(id) })
}

// waitCtx is wait with a context instead of a fixed deadline.
func (c *memConn) waitCtx(ctx context.Context, pred func(map[string]any) bool) (map[string]any, error) {
	return c.waitN(ctx, 0, 1, pred)
}

// framesText is everything conn received.
func (c *memConn) framesText() string { return c.text() }

func driveCall(method string, params map[string]any) func(context.Context, *hostileHome, string) (string, error) {
	return func(ctx context.Context, h *hostileHome, _ string) (string, error) {
		m, err := h.request(ctx, h.atk, method, params)
		b, _ := json.Marshal(m)
		return string(b), err
	}
}

func openSession(h *hostileHome) string {
	res := h.call(h.atk, "session.create", map[string]any{"profile": "b"})
	require.Equal(h.t, 0, code(res), "%v", res)
	return res["result"].(map[string]any)["session_id"].(string)
}

// withPlugin gives b a plugin in plugins/<rel> (a model provider its
// model.provider names, when provider is set), then opens a session.
func withPlugin(rel, provider string) func(h *hostileHome) string {
	return func(h *hostileHome) string {
		dir := filepath.Join(h.bHome, "plugins", filepath.FromSlash(rel))
		require.NoError(h.t, os.MkdirAll(dir, 0o700))
		manifest := "name: " + filepath.Base(rel) + "\n"
		if provider != "" {
			manifest += "kind: model-provider\n"
			bp, err := h.homes.Get("b")
			require.NoError(h.t, err)
			require.NoError(h.t, bp.SetConfig("model.provider", profile.PluginProviderPrefix+provider))
		}
		require.NoError(h.t, os.WriteFile(filepath.Join(dir, "plugin.yaml"), []byte(manifest), 0o600))
		require.NoError(h.t, os.WriteFile(filepath.Join(dir, filepath.Base(rel)+".go"), []byte("package p\n"), 0o600))
		return openSession(h)
	}
}

// driveTurn submits a prompt and waits for the turn's end (or the
// refusal of the submit).
func driveTurn(ctx context.Context, h *hostileHome, sid string) (string, error) {
	m, err := h.request(ctx, h.atk, "prompt.submit", map[string]any{"session_id": sid, "text": "hi"})
	if err != nil || code(m) != 0 {
		b, _ := json.Marshal(m)
		return string(b), err
	}
	done, err := h.atk.waitCtx(ctx, completes(sid))
	b, _ := json.Marshal(done)
	return string(b), err
}

// driveConnect is the victim's connect while the attacker's .env is
// hostile: TenantOf goes over every profile's credential.
func driveConnect(ctx context.Context, h *hostileHome, _ string) (string, error) {
	type res struct {
		name string
		ok   bool
	}
	got := make(chan res, 1)
	go func() { n, ok := h.srv.TenantOf(launchKey); got <- res{n, ok} }()
	select {
	case r := <-got:
		if !r.ok || r.name != profile.LaunchName {
			return "", fmt.Errorf("the launch profile's token opened %q (ok %v)", r.name, r.ok)
		}
		return "", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// driveTick is one cron tick over every profile.
func driveTick(ctx context.Context, h *hostileHome, _ string) (string, error) {
	got := make(chan string, 1)
	go func() {
		res, err := h.srv.TickCron(ctx, time.Now())
		got <- fmt.Sprint(res, err)
	}()
	select {
	case s := <-got:
		return s, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// victimServed is the launch profile's own session and turn: served
// beside the attacker's hostile files.
func (h *hostileHome) victimServed(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
	defer cancel()
	res, err := h.request(ctx, h.victim, "session.create", map[string]any{})
	require.NoError(t, err, "the victim's session.create")
	require.Equal(t, 0, code(res), "%v", res)
	sid := res["result"].(map[string]any)["session_id"].(string)
	_, err = h.request(ctx, h.victim, "prompt.submit", map[string]any{"session_id": sid, "text": "hi"})
	require.NoError(t, err)
	done, err := h.victim.waitCtx(ctx, completes(sid))
	require.NoError(t, err, "the victim's turn")
	require.Equal(t, "complete", done["params"].(map[string]any)["payload"].(map[string]any)["status"])
}

// stops shuts the server down within stopWithin.
func (h *hostileHome) stops(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(stopWithin + 2*time.Second):
		t.Fatalf("the server did not stop within %s", stopWithin)
	}
}

// allocated is the bytes allocated so far by this process.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestHostileHomeFilesAreRefusedPromptly plants each hostile kind at
// each file the server reads from a home (homeSites) and drives the
// action that reads it: the server answers within answerWithin (an error,
// or the file ignored), allocates less than allocBound meanwhile, quotes
// no other tenant's data to the attacker, still serves the launch
// profile, and stops within stopWithin. Not parallel: the allocation
// bound is the process's.
func TestHostileHomeFilesAreRefusedPromptly(t *testing.T) {
	for _, s := range homeSites {
		for _, k := range hostile.Kinds {
			t.Run(s.file+"/"+s.action+"/"+string(k), func(t *testing.T) {
				h := newHostileHome(t, nil)
				var sid string
				if s.open != nil {
					sid = s.open(h)
				}
				hostile.Plant(t, filepath.Join(h.bHome, s.file), k)
				ctx, cancel := context.WithTimeout(context.Background(), answerWithin)
				defer cancel()
				before := allocated()
				got, err := s.drive(ctx, h, sid)
				grew := allocated() - before
				t.Logf("the attacker's answer: %.400s", got)
				require.NoError(t, err, "%s with a %s %s: no answer within %s", s.action, k, s.file, answerWithin)
				require.Less(t, grew, uint64(allocBound), "%s with a %s %s allocated %d bytes", s.action, k, s.file, grew)
				require.NotContains(t, got+h.atk.framesText(), launchSoul, "another tenant's data in the attacker's answer")
				require.NotContains(t, got+h.atk.framesText(), launchKey)
				refusedAsTheTenants(t, got, s.file, k)
				h.victimServed(t)
				h.stops(t)
			})
		}
	}
}

// refusedAsTheTenants requires an error reply to a hostile file to be
// 4013 (the tenant's own doing, the file and the rule named), not an
// internal error; a 20 GiB state.db is SQLite's to refuse (it is a
// regular file: "file is not a database").
func refusedAsTheTenants(t *testing.T, got, file string, k hostile.Kind) {
	t.Helper()
	var reply map[string]any
	if json.Unmarshal([]byte(got), &reply) != nil || reply["error"] == nil {
		return
	}
	if file == "state.db" && k == hostile.Sparse {
		return
	}
	require.Equal(t, rpc.CodeLinkOut, code(reply), "%v", reply)
	require.Contains(t, reply["error"].(map[string]any)["message"], "home file "+file)
}

// TestStopWhileEveryHomeFileIsHostile: every file of the attacker's home
// at once is hostile (one kind per file, in turn), its actions all sent
// and none awaited; the server still stops within stopWithin.
func TestStopWhileEveryHomeFileIsHostile(t *testing.T) {
	for _, k := range hostile.Kinds {
		t.Run(string(k), func(t *testing.T) {
			h := newHostileHome(t, nil)
			sid := openSession(h)
			for _, s := range homeSites {
				hostile.Plant(t, filepath.Join(h.bHome, s.file), k)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for _, s := range homeSites {
				go func() { _, _ = s.drive(ctx, h, sid) }()
			}
			h.stops(t)
		})
	}
}

// TestHomeSpecialFilesFaultHarms is the positive control of the checks:
// with the home-special-files fault a FIFO for .env hangs the attacker's
// own session.create and the victim's connect (a read of every
// profile's credential), each caught by a deadline and then freed by a
// writer; and a .env of twice allocBound (sparse) is read whole.
func TestHomeSpecialFilesFaultHarms(t *testing.T) {
	h := newHostileHome(t, faults.Set{faults.HomeSpecialFiles: true})
	env := filepath.Join(h.bHome, ".env")
	hostile.Plant(t, env, hostile.FIFO)
	results := make(chan error, 2)
	go func() {
		_, err := driveCall("session.create", map[string]any{"profile": "b"})(context.Background(), h, "")
		results <- err
	}()
	go func() { _, err := driveConnect(context.Background(), h, ""); results <- err }()
	select {
	case err := <-results:
		t.Fatalf("an action over a FIFO .env returned (%v) under the fault: it should hang", err)
	case <-time.After(time.Second): // the harm shown: no answer within a second
	}
	for n := 0; n < 2; {
		hostile.Release(env)
		select {
		case <-results:
			n++
		case <-time.After(20 * time.Millisecond): // a reader between two opens
		}
	}

	hostile.PlantSparse(t, env, 2*allocBound)
	before := allocated()
	_, err := driveConnect(context.Background(), h, "")
	require.NoError(t, err)
	require.Greater(t, allocated()-before, uint64(2*allocBound), "the fault reads the whole .env")
	h.stops(t)
}

// TestHeldCronLockHoldsNoTick: b's terminal holds its own cron/jobs.lock
// (flock) with a job due: the tick over every profile gives b up within
// the lock's wait, runs the launch profile's due job, and the server stops.
func TestHeldCronLockHoldsNoTick(t *testing.T) {
	h := newHostileHome(t, nil)
	for _, name := range []string{"b", profile.LaunchName} {
		res := h.call(h.atk, "cron.create", map[string]any{"profile": name, "prompt": "p", "every": "every 1h"})
		require.Equal(t, 0, code(res), "%v", res)
		id := res["result"].(map[string]any)["job"].(map[string]any)["id"]
		require.Equal(t, 0, code(h.call(h.atk, "cron.trigger", map[string]any{"profile": name, "id": id})))
	}
	lock, err := os.OpenFile(filepath.Join(h.bHome, "cron", "jobs.lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))

	ctx, cancel := context.WithTimeout(context.Background(), 3*answerWithin)
	defer cancel()
	got := make(chan []cron.Result, 1)
	go func() { res, _ := h.srv.TickCron(ctx, time.Now()); got <- res }()
	select {
	case res := <-got:
		ran := map[string]error{}
		for _, r := range res {
			ran[r.Profile] = r.Err
		}
		require.ErrorIs(t, ran["b"], cron.ErrLocked)
		require.Contains(t, ran, profile.LaunchName)
		require.NoError(t, ran[profile.LaunchName], "the launch profile's job ran")
	case <-ctx.Done():
		t.Fatal("a tick waited on b's held jobs.lock")
	}
	h.stops(t)
}
