package attack

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
	"github.com/tenantcanary/tenantcanary/tenants"
)

func TestTablesAreValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, Validate(Terminal()))
	require.NoError(t, Validate(Plugin()))
	for _, c := range []Class{Read, Write, Spawn, Flood} {
		assert.NotEmpty(t, Of(Terminal(), c), "terminal rows of class %s", c)
	}
	err := Validate([]Row{
		{ID: "Bad ID", Class: Read, Tries: "x", Refusal: "y", Call: func(Canaries) Call { return terminal("true") }},
		{ID: "w", Class: Write, Tries: "x", Refusal: "y", Call: func(Canaries) Call { return terminal("echo no canary") }},
		{ID: "w", Class: "steal", Tries: "", Refusal: "y"},
	})
	assert.ErrorContains(t, err, `id: want lower-case words`)
	assert.ErrorContains(t, err, "a write must carry the attacker's write canary")
	assert.ErrorContains(t, err, "id given twice")
	assert.ErrorContains(t, err, `class "steal"`)
	assert.ErrorContains(t, err, "tries: want one non-empty line")
	assert.ErrorContains(t, err, "no call")
}

// world is a launch home with two named profiles beside each other, as
// agentd lays them out, each with a .env holding its own canary.
type world struct {
	root, launch string
	home, work   map[string]string
	secret       map[string]string
}

func newWorld(t *testing.T) world {
	t.Helper()
	w := world{root: t.TempDir(), home: map[string]string{}, work: map[string]string{}, secret: map[string]string{}}
	w.launch = filepath.Join(w.root, "home", ".agentd")
	for _, name := range []string{"default", "alpha", "beta"} {
		tag, err := tenants.NewTag()
		require.NoError(t, err)
		home := w.launch
		if name != "default" {
			home = filepath.Join(w.launch, "profiles", name)
		}
		work := filepath.Join(w.root, "work", tenants.CanaryValue(tenants.Workdir, name, tag))
		require.NoError(t, os.MkdirAll(filepath.Join(home, "memories"), 0o755))
		require.NoError(t, os.MkdirAll(work, 0o755))
		w.secret[name] = tenants.CanaryValue(tenants.ProviderKey, name, tag)
		for rel, data := range map[string]string{".env": "TENANT_PROVIDER_KEY=" + w.secret[name] + "\n", "SOUL.md": "You are " + name + ".\n",
			"config.yaml": "model: {}\n", "memories/MEMORY.md": name + "\n"} {
			require.NoError(t, os.WriteFile(filepath.Join(home, rel), []byte(data), 0o600))
		}
		w.home[name], w.work[name] = home, work
	}
	return w
}

// run runs a terminal row's command as tenant name's shell would: bash in
// its workdir, HOME at its home.
func (w world) run(t *testing.T, name string, c Call, env ...string) string {
	t.Helper()
	require.Equal(t, "terminal", c.Tool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := procgroup.CommandContext(ctx, "bash", "-c", c.Args["command"].(string))
	cmd.Dir = w.work[name]
	cmd.Env = append([]string{"HOME=" + w.home[name], "PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", c.Args["command"])
	return string(out)
}

func row(t *testing.T, rows []Row, id string) Row {
	t.Helper()
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no row %q", id)
	return Row{}
}

// Positive controls of the table itself: run unsandboxed, as a tenant's
// shell of a pooled server without a sandbox, the reads bring back the
// neighbours' secrets, the writes land in the neighbours' homes and not
// in the attacker's, and the spawns start processes carrying the mark.
func TestTerminalRowsReachTheNeighboursUnsandboxed(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	rows := Terminal()
	for _, attacker := range []string{"default", "alpha"} {
		out := w.run(t, attacker, row(t, rows, "sibling-homes").Call(Canaries{}))
		for name, s := range w.secret {
			if name != attacker {
				assert.Contains(t, out, s, "%s reading the homes sees %s's key", attacker, name)
			}
		}
		assert.True(t, strings.HasSuffix(out, RowDone+"\n"), out)
	}
	out := w.run(t, "alpha", row(t, rows, "workdir-siblings").Call(Canaries{}))
	assert.Contains(t, out, filepath.Base(w.work["beta"]))
	out = w.run(t, "alpha", row(t, rows, "upward-find").Call(Canaries{}))
	assert.Contains(t, out, w.secret["beta"])

	// /proc: a neighbour's process carrying its key in its environment,
	// working in its home.
	nb := exec.Command("sleep", "300")
	nb.Env = []string{"TENANT_PROVIDER_KEY=" + w.secret["beta"]}
	nb.Dir = w.home["beta"]
	procgroup.Prepare(nb)
	require.NoError(t, nb.Start())
	t.Cleanup(func() { _ = procgroup.Kill(nb.Process.Pid); _ = nb.Wait() })
	for _, id := range []string{"proc-environ", "proc-cwd", "proc-root"} {
		out = w.run(t, "alpha", row(t, rows, id).Call(Canaries{}))
		assert.Contains(t, out, w.secret["beta"], "row %s", id)
	}

	// find-dotenv searches the whole machine within its time bound, which
	// may end before it reaches this test's folder: its search, with the
	// same expression, started at the test's root finds the neighbours'.
	cmd := row(t, rows, "find-dotenv").Call(Canaries{}).Args["command"].(string)
	require.Contains(t, cmd, "find / -xdev ")
	out = w.run(t, "alpha", Call{Tool: "terminal", Args: map[string]any{"command": strings.Replace(cmd, "find / -xdev ", "find "+w.root+" -xdev ", 1)}})
	assert.Contains(t, out, w.secret["beta"], "find-dotenv's expression")

	// Writes: the attacker's canary lands in every other home, not its own.
	canary := tenants.CanaryValue("hostile_write", "alpha", "0123456789")
	for _, r := range Of(rows, Write) {
		w.run(t, "alpha", r.Call(Canaries{Write: canary}))
	}
	for name, home := range w.home {
		soul, err := os.ReadFile(filepath.Join(home, "SOUL.md"))
		require.NoError(t, err)
		env, err := os.ReadFile(filepath.Join(home, ".env"))
		require.NoError(t, err)
		if name == "alpha" {
			assert.NotContains(t, string(soul)+string(env), canary, "the attacker's own home is left alone")
		} else {
			assert.Contains(t, string(soul), "Also obey "+canary, name)
			assert.Contains(t, string(env), "HOSTILE_WRITE="+canary, name)
		}
	}
	_, err := os.Stat(filepath.Join(w.root, "work", "hostile-"+canary+".txt"))
	assert.NoError(t, err, "the shared write lands beside the workdirs")

	// Spawns: every spawn row starts processes carrying the mark, which
	// outlive the shell that started them.
	for _, r := range Of(rows, Spawn) {
		mark := escapeMark(t)
		w.run(t, "alpha", r.Call(Canaries{Mark: mark}))
		var got []procgroup.Carrier
		require.Eventually(t, func() bool { got = procgroup.Carrying([]string{mark}); return len(got) > 0 },
			10*time.Second, 10*time.Millisecond, "row %s started nothing carrying its mark", r.ID)
		assert.Eventually(t, func() bool {
			for _, p := range procgroup.Carrying([]string{mark}) {
				killPid(p.Pid)
			}
			return len(procgroup.Carrying([]string{mark})) == 0
		}, 10*time.Second, 10*time.Millisecond)
	}

	// A flood's output is what the terminal's cap is for; the row itself
	// ends.
	out = w.run(t, "alpha", row(t, rows, "output-flood").Call(Canaries{}))
	assert.Greater(t, len(out), 1_000_000)
}

func killPid(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }

// escapeMark mints alpha's escape_mark canary for a spawn row; every
// process still carrying it is killed when the test ends.
func escapeMark(t *testing.T) string {
	t.Helper()
	tag, err := tenants.NewTag()
	require.NoError(t, err)
	mark := tenants.CanaryValue("escape_mark", "alpha", tag)
	t.Cleanup(func() {
		for _, p := range procgroup.Carrying([]string{mark}) {
			killPid(p.Pid)
		}
	})
	return mark
}

func jsonRoundTrip(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// HostileWriteKind is the kind of the attacker's write canary in these tests.
const HostileWriteKind tenants.Kind = "hostile_write"

// HeldSpawn's call starts a process carrying the mark and lives while it
// holds (the escape check's positive control on a target that ends a
// call's processes with the call): the mark is seen before the call ends,
// and the call ends with the row's end marker.
func TestHeldSpawnHoldsItsCallWithAMarkedProcess(t *testing.T) {
	t.Parallel()
	mark := escapeMark(t)
	call := HeldSpawn(2).Call(Canaries{Mark: mark})
	require.Equal(t, "terminal", call.Tool)
	cmd := exec.Command("/bin/sh", "-c", call.Args["command"].(string))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout = &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	seen := false
	for !seen {
		select {
		case err := <-done:
			t.Fatalf("the call ended (%v) before its marked process was seen", err)
		case <-time.After(10 * time.Millisecond):
			seen = len(procgroup.Carrying([]string{mark})) > 0
		}
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the held call never ended")
	}
	assert.Contains(t, out.String(), RowDone)
	assert.NotEmpty(t, procgroup.Carrying([]string{mark}), "the marked process outlives the call here (no PID namespace): escapeMark's cleanup ends it")
}
