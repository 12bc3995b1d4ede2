package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenantcanary/tenantcanary/harness/surface"
	"github.com/tenantcanary/tenantcanary/internal/hostilefile"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/invariants"
	"github.com/tenantcanary/tenantcanary/tenants"
)

// The limits of resource harm: what one tenant's hostile file may cost the
// pooled server before it is a finding (README, "Resource harm").
const (
	// HarmMemoryLimit is how far the server's resident memory may grow
	// over its size before the action (a read of a huge or endless file
	// grows it without bound).
	HarmMemoryLimit = 512 << 20
	// HarmNeighbourWithin is how soon a neighbour's call must be answered
	// while and after one tenant's hostile file is read.
	HarmNeighbourWithin = 10 * time.Second
	// harmTriggerWithin is how long the attacker's own action may take:
	// its own call hanging harms no neighbour by itself, and is recorded.
	harmTriggerWithin = 5 * time.Second
)

// attackSurfaceFiles gives every file the server read of one attacker's
// home (in an action with no tool of the tenant's) each hostile form
// (surface.Forms), replays the action that read it, and judges the
// server: alive and the same process, its memory within HarmMemoryLimit
// of where it was, a neighbour answered within HarmNeighbourWithin. The
// link forms point at the next tenant's file of the same path: what the
// server then reads of it is judged by the other invariants.
func (e *Env) attackSurfaceFiles() {
	e.T.Helper()
	st := stateOf(e, surfaceKey)
	a := e.Tenants[0]
	v := e.Tenants[1%len(e.Tenants)]
	n := e.Tenants[len(e.Tenants)-1]
	if n == a {
		e.T.Fatalf("surface: the file attacks need a neighbour")
	}
	targets := slices.DeleteFunc(serverReadsOf(&st.m, a.Name), func(tg readTarget) bool {
		return tg.dir && e.holdsAHome(filepath.Join(a.Home, filepath.FromSlash(tg.path)))
	})
	if len(targets) == 0 {
		e.skipRow(string(invariants.ResourceHarm), "discovery saw the server read no file of "+a.Name+"'s home: no file attack made")
		return
	}
	per := st.per[a.Name]
	neighbour := st.per[n.Name]
	aside := filepath.Join(a.Home, surfaceDir, "aside")
	if err := os.MkdirAll(aside, 0o755); err != nil {
		e.T.Fatalf("surface: %v", err)
	}
	tried := 0
	base := rss(e.Server.Pid())
	for _, tg := range targets {
		act, ok := surfaceActionNamed(tg.action)
		if !ok {
			continue // the cron tick reads every home: replayed by the env attack
		}
		forms := surface.Forms()
		if tg.dir {
			forms = surface.DirForms()
		}
		for _, form := range forms {
			e.keepServing(per, a)
			restore, err := surface.Plant(a.Home, tg.path, form, v.Home, aside)
			if errors.Is(err, surface.ErrNotApplicable) {
				continue
			}
			if err != nil {
				e.T.Fatalf("surface: %v", err)
			}
			tried++
			attack := "file " + string(form)
			st.m.Aim(a.Name, tg.path, attack)
			harmed := e.judgeHarm(a, n, neighbour, base, fmt.Sprintf("%s's %s as a %s (%s)", a.Name, tg.path, form, act.name), func(ctx context.Context) error {
				if act.name != "session.create" && per.sid == "" {
					if s, err := per.conn.CreateSession(ctx, profileParam(a)); err == nil {
						per.sid, per.stored = s.SessionID, s.StoredSessionID
					}
				}
				if err := act.run(ctx, e, per, a); err != nil {
					return err
				}
				return e.useWhatWasRead(ctx, per, a, act, form)
			})
			unblockFIFO(filepath.Join(a.Home, filepath.FromSlash(tg.path)), form)
			if err := restore(); err != nil {
				e.T.Fatalf("surface: put %s's %s back: %v", a.Name, tg.path, err)
			}
			if form == surface.DeviceLink || form == surface.Sparse {
				// The forms a read never finishes with, or takes long to.
				harmed = harmed || e.stillGrowing(a, base, fmt.Sprintf("%s's %s as a %s (%s)", a.Name, tg.path, form, act.name))
			}
			if harmed {
				e.noteSurface(&st.m)
				e.T.Fatalf("surface: the server was harmed by %s's %s as a %s: the file attacks stop here", a.Name, tg.path, form)
			}
		}
	}
	swaps := 0
	for _, tg := range targets {
		act, ok := surfaceActionNamed(tg.action)
		if !ok {
			continue
		}
		swaps += e.swapWhile(a, v, n, neighbour, per, tg, act, aside, base)
	}
	e.T.Logf("surface: %d hostile file(s) tried on %d path(s) of %s's home; %d swap round trips", tried, len(targets), a.Name, swaps)
	e.noteSurface(&st.m)
}

// holdsAHome says whether dir is, or holds, another tenant's home (a
// profile's home below the launch home's profiles folder, or that
// folder): the operator's layout, which no
// tenant's shell can move (its sandbox hides or pins it), so no attack.
func (e *Env) holdsAHome(dir string) bool {
	for _, t := range e.Box.Set.Tenants {
		if rel, err := filepath.Rel(dir, t.Home); err == nil && filepath.IsLocal(rel) {
			return true
		}
	}
	return false
}

// useWhatWasRead follows a link form's replay of an action that sends
// nothing to the tenant's provider (a session's open, a settings write)
// with a turn: what the server took in through the link (another home's
// folder listed as the tenant's own, say) shows where the invariants
// look, before the link is gone. Judged again after the trigger that
// would use it.
func (e *Env) useWhatWasRead(ctx context.Context, per *surfaceTenant, a *tenants.Tenant, act surfaceAction, form surface.Form) error {
	if (form != surface.LinkOut && form != surface.MiddleLink) || strings.HasPrefix(act.name, "prompt.submit") || per.sid == "" {
		return nil
	}
	turn, _ := surfaceActionNamed("prompt.submit (no tools)")
	return turn.run(ctx, e, per, a)
}

// swapRounds is how many times the action is replayed while a path flips
// between the tenant's file and a link to the victim's: a race, so a rate.
const swapRounds = 5

// swapWhile replays act swapRounds times while tg's path flips between the
// attacker's own file and a link to the victim's (surface.StartSwap): a
// server that checks a file, then opens it again by name, reads the
// victim's some of the time, and the other invariants see it. It returns
// the flips made.
func (e *Env) swapWhile(a, v, n *tenants.Tenant, neighbour, per *surfaceTenant, tg readTarget, act surfaceAction, aside string, base int64) int {
	e.T.Helper()
	e.keepServing(per, a)
	sw, err := surface.StartSwap(a.Home, tg.path, v.Home, aside)
	if errors.Is(err, surface.ErrNotApplicable) {
		return 0
	}
	if err != nil {
		e.T.Fatalf("surface: %v", err)
	}
	st := stateOf(e, surfaceKey)
	st.m.Aim(a.Name, tg.path, "swap")
	what := fmt.Sprintf("%s's %s swapped with a link to %s's (%s)", a.Name, tg.path, v.Name, act.name)
	harmed := false
	for i := 0; i < swapRounds && !harmed; i++ {
		harmed = e.judgeHarm(a, n, neighbour, base, what, func(ctx context.Context) error {
			if act.name != "session.create" && per.sid == "" {
				if s, err := per.conn.CreateSession(ctx, profileParam(a)); err == nil {
					per.sid, per.stored = s.SessionID, s.StoredSessionID
				}
			}
			return act.run(ctx, e, per, a)
		})
	}
	flips, err := sw.Stop()
	if err != nil {
		e.T.Logf("surface: the swap of %s stopped early after %d flips: %v", tg.path, flips, err)
	}
	if harmed {
		e.noteSurface(&st.m)
		e.T.Fatalf("surface: the server was harmed by %s: the file attacks stop here", what)
	}
	return flips
}

// keepServing opens t's connection (and a session) again when the server
// no longer serves it: a hostile form read in place of its .env (a FIFO
// read to its end: no credential in it) revokes the connection, and a
// revoked one is refused before the server reads anything: every later
// form would go unread. Called with t's own files in place.
func (e *Env) keepServing(per *surfaceTenant, t *tenants.Tenant) {
	e.T.Helper()
	c, s, _ := e.stillServing(per.conn, t, "before a hostile form")
	per.conn, per.sid, per.stored = c, s.SessionID, s.StoredSessionID
}

// readTarget is a path the server read (a file) or listed (a folder), and
// the first action that did it that the attacks can replay.
type readTarget struct {
	path, action string
	dir          bool
}

// serverReadsOf lists the files of tenant's home the server read and the
// folders it listed, each with the first replayable action that did; the
// surface folder, the logs (the server's own output) and the folders
// that hold them are left out.
func serverReadsOf(m *surface.Map, tenant string) []readTarget {
	var out []readTarget
	seen := map[string]bool{}
	for _, a := range m.Actions {
		if _, ok := surfaceActionNamed(a.Name); a.Tenant != tenant || !ok {
			continue
		}
		for _, f := range a.ServerReads() {
			if seen[f.Path] || f.Path == surfaceDir || f.Path == "logs" || strings.HasPrefix(f.Path, surfaceDir+"/") || strings.HasPrefix(f.Path, "logs/") ||
				strings.HasSuffix(f.Path, "-wal") || strings.HasSuffix(f.Path, "-shm") || strings.HasSuffix(f.Path, "-journal") {
				continue
			}
			seen[f.Path] = true
			out = append(out, readTarget{path: f.Path, action: a.Name, dir: f.Dir})
		}
	}
	return out
}

// harmGrowth is how much the server may still grow once the attacker's
// call has ended and its file is back: more, and a read of the hostile
// file goes on without the call (a link to /dev/zero read to its end). It
// has until harmSettle to come to rest (less than harmGrowth/4 in a
// harmQuiet window).
const (
	harmGrowth = 64 << 20
	harmSettle = 3 * time.Second
	harmQuiet  = 300 * time.Millisecond
)

// judgeHarm runs trigger (the attacker's action on a hostile file) while it
// watches the server, then asks the neighbour n for a session; it records
// a ResourceHarm finding and reports true when the server died, grew past
// HarmMemoryLimit over base, its size when the attacks began (then it is
// killed, before it takes the machine), or the neighbour was not answered
// in time.
func (e *Env) judgeHarm(a, n *tenants.Tenant, neighbour *surfaceTenant, base int64, what string, trigger func(context.Context) error) bool {
	e.T.Helper()
	pid := e.Server.Pid()
	ctx, cancel := e.ctx(harmTriggerWithin)
	done := make(chan error, 1)
	go func() { done <- trigger(ctx) }()
	peak, grown := base, false
	tick := time.NewTicker(20 * time.Millisecond)
watch:
	for {
		select {
		case <-done:
			break watch
		case <-tick.C:
			if r := rss(pid); r > peak {
				peak = r
			}
			if peak-base > HarmMemoryLimit {
				grown = true
				break watch
			}
		}
	}
	tick.Stop()
	cancel()
	find := func(detail string) {
		e.Find(invariants.Finding{Invariant: invariants.ResourceHarm, Tenant: a.Name,
			Where: invariants.Where{Label: "the server (pid " + strconv.Itoa(pid) + ")"}, Place: "the server",
			Detail: what + ": " + detail + " (" + n.Name + " is served by the same process)"})
	}
	if grown {
		find(fmt.Sprintf("the server's memory grew from %d MiB to %d MiB (limit: %d MiB more); it was killed before it took the machine", base>>20, peak>>20, HarmMemoryLimit>>20))
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
		return true
	}
	if !procgroup.Alive(pid) {
		find("the server died")
		return true
	}
	nctx, ncancel := e.ctx(HarmNeighbourWithin)
	defer ncancel()
	if _, err := neighbour.conn.CreateSession(nctx, profileParam(n)); err != nil {
		find(fmt.Sprintf("%s's session.create was not answered within %v: %v", n.Name, HarmNeighbourWithin, err))
		return true
	}
	return false
}

// harmFound records one tenant's harm to the server.
func (e *Env) harmFound(a *tenants.Tenant, pid int, what, detail string) {
	e.Find(invariants.Finding{Invariant: invariants.ResourceHarm, Tenant: a.Name,
		Where: invariants.Where{Label: "the server (pid " + strconv.Itoa(pid) + ")"}, Place: "the server",
		Detail: what + ": " + detail})
}

// stillGrowing watches the server once the attacker's call has ended and
// its file is back, until it comes to rest (harmQuiet with little growth)
// or harmSettle passes: growth past harmGrowth (or past HarmMemoryLimit
// over base) is a read of the hostile file that goes on without the call;
// the server is then killed and the harm recorded. A server still growing
// at harmSettle is judged as harmed too: the next form must not be blamed
// for this one's read.
func (e *Env) stillGrowing(a *tenants.Tenant, base int64, what string) bool {
	pid := e.Server.Pid()
	start := rss(pid)
	quietFrom, quietAt := start, time.Now()
	deadline := time.Now().Add(harmSettle)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		now := rss(pid)
		if now-start > harmGrowth || now-base > HarmMemoryLimit {
			e.harmFound(a, pid, what, fmt.Sprintf("the server kept growing after the call ended and the file was put back (%d MiB, then %d MiB; %d MiB when the attacks began): a read of the hostile file goes on; it was killed before it took the machine",
				start>>20, now>>20, base>>20))
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return true
		}
		if !procgroup.Alive(pid) {
			e.harmFound(a, pid, what, "the server died after the call ended")
			return true
		}
		if now-quietFrom > harmGrowth/4 {
			quietFrom, quietAt = now, time.Now() // still moving: the quiet window starts again
		} else if time.Since(quietAt) >= harmQuiet {
			return false
		}
		if time.Now().After(deadline) {
			e.harmFound(a, pid, what, fmt.Sprintf("the server was still growing %v after the call ended and the file was put back (%d MiB, then %d MiB): a read of the hostile file goes on; it was killed", harmSettle, start>>20, now>>20))
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return true
		}
		select {
		case <-e.Ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// rss is pid's resident memory in bytes (0 when unreadable).
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// unblockFIFO frees a reader the server left blocked opening a planted
// FIFO (it gets an end of file), so no goroutine of the server stays held
// by the attack.
func unblockFIFO(p string, form surface.Form) {
	if form == surface.FIFO {
		hostilefile.Release(p)
	}
}
