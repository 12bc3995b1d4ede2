package surface

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/harness/attack"
	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

func homes(t *testing.T) (string, map[string]string) {
	t.Helper()
	root := t.TempDir()
	hs := map[string]string{}
	for _, n := range []string{"alpha", "beta"} {
		h := filepath.Join(root, n)
		require.NoError(t, os.MkdirAll(filepath.Join(h, "memories"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(h, "SOUL.md"), []byte("soul of "+n), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(h, ".env"), []byte("SECRET_"+n+"=value-"+n+"-0123456789\n"), 0o644))
		hs[n] = h
	}
	return root, hs
}

// startTree starts sh with env, which runs script; it is killed and reaped
// at cleanup, and no pid of its tree survives.
func startTree(t *testing.T, env []string, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		pids := append(procgroup.Descendants(cmd.Process.Pid), cmd.Process.Pid)
		_ = procgroup.Kill(cmd.Process.Pid)
		_ = cmd.Wait()
		for _, p := range pids {
			assert.Eventually(t, func() bool { return !procgroup.Alive(p) }, 10*time.Second, 5*time.Millisecond, "pid %d survived", p)
		}
	})
	return cmd
}

// TestRecorderSeesReadsWritesAndUnconfinedCarriers: a server stand-in (a
// shell) reads alpha's SOUL.md, writes a memory, and starts a child that
// carries alpha's variable; the window holds each, and nothing of beta.
func TestRecorderSeesReadsWritesAndUnconfinedCarriers(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	vars := Vars{"alpha": {"SECRET_alpha": "value-alpha-0123456789"}, "beta": {"SECRET_beta": "value-beta-0123456789"}}
	rec, err := NewRecorder(hs, vars, t.TempDir())
	require.NoError(t, err)
	defer rec.Close()

	ready := filepath.Join(t.TempDir(), "ready")
	srv := startTree(t, []string{"PATH=/usr/bin:/bin"}, "sleep 600 & wait")
	require.NoError(t, rec.Begin("turn", "alpha", false, func() []int { return []int{srv.Process.Pid} }))
	child := exec.Command("/bin/sh", "-c", "cat \"$1\" >/dev/null; echo hi >\"$2\"; touch \"$3\"; exec sleep 600", "sh",
		filepath.Join(hs["alpha"], "SOUL.md"), filepath.Join(hs["alpha"], "memories", "new.md"), ready)
	child.Env = []string{"PATH=/usr/bin:/bin", "CARRIED=value-alpha-0123456789"}
	// The child hangs below the server stand-in's tree: adopt it there by
	// sampling it as a root.
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 5*time.Millisecond)
	// Sample the child explicitly (it is not the stand-in's descendant).
	ref, err := nsOf(srv.Process.Pid)
	require.NoError(t, err)
	sampleTree([]int{child.Process.Pid}, ref, vars, map[identity]Proc{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	act, err := rec.End(ctx)
	require.NoError(t, err)
	assert.Empty(t, act.Incomplete)

	byPath := map[string]FileUse{}
	for _, f := range act.Files {
		assert.Equal(t, "alpha", f.Tenant, "beta was not touched: %+v", f)
		byPath[f.Path] = f
	}
	require.Contains(t, byPath, "SOUL.md")
	assert.True(t, byPath["SOUL.md"].Reads(), "%+v", byPath["SOUL.md"])
	require.Contains(t, byPath, "memories/new.md")
	assert.Contains(t, byPath["memories/new.md"].Ops, Created)
	assert.False(t, byPath["memories/new.md"].Reads())
	reads := act.ServerReads()
	assert.True(t, slices.ContainsFunc(reads, func(f FileUse) bool { return f.Path == "SOUL.md" }))

	var server *Proc
	for i := range act.Procs {
		if act.Procs[i].Server {
			server = &act.Procs[i]
		}
	}
	require.NotNil(t, server, "the root is in the record: %+v", act.Procs)
	assert.False(t, server.Confined, "a plain child is outside every sandbox: %s", server.How)
	assert.Contains(t, strings.Join(programs(act.Procs), " "), "sleep", "the stand-in's child was sampled")
}

func programs(ps []Proc) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Program)
	}
	return out
}

// TestCarriedFindsTenantVariables: a tenant's variable by its name and
// value, or its long value under any name; not another value by the name.
func TestCarriedFindsTenantVariables(t *testing.T) {
	t.Parallel()
	vars := Vars{"alpha": {"K": "value-alpha-0123456789", "SHORT": "1"}}
	got := carried([]string{"K=value-alpha-0123456789", "OTHER=value-alpha-0123456789", "K=else", "SHORT=1", "X=1"}, vars)
	assert.ElementsMatch(t, []Carried{{"alpha", "K"}, {"alpha", "OTHER"}, {"alpha", "SHORT"}}, got)
}

// TestSampleTreeCarriesAndConfinement: a child carrying alpha's variable is
// recorded with it, outside every sandbox; one under no_new_privs (setpriv)
// counts as confined.
func TestSampleTreeCarriesAndConfinement(t *testing.T) {
	t.Parallel()
	vars := Vars{"alpha": {"K": "value-alpha-0123456789"}}
	ready := filepath.Join(t.TempDir(), "ready")
	srv := startTree(t, []string{"PATH=/usr/bin:/bin", "K=value-alpha-0123456789"}, "touch "+ready+"; exec sleep 600")
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 5*time.Millisecond)
	ref, err := nsOf(os.Getpid())
	require.NoError(t, err)
	seen := map[identity]Proc{}
	sampleTree([]int{srv.Process.Pid}, ref, vars, seen)
	var root *Proc
	for _, p := range seen {
		if p.PID == srv.Process.Pid {
			root = &p
		}
	}
	require.NotNil(t, root, "the root is sampled: %v", seen)
	assert.False(t, root.Confined)
	assert.Equal(t, []Carried{{"alpha", "K"}}, root.Carries)

	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv here to start a process with no_new_privs")
	}
	ready2 := filepath.Join(t.TempDir(), "ready")
	nnp := startTree(t, []string{"PATH=/usr/bin:/bin"}, "touch "+ready2+"; exec "+setpriv+" --no-new-privs sleep 600")
	require.Eventually(t, func() bool {
		seen := map[identity]Proc{}
		sampleTree([]int{nnp.Process.Pid}, ref, vars, seen)
		for _, p := range seen {
			if p.Program == "sleep" {
				return p.Confined && strings.Contains(p.How, "no_new_privs")
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
}

// TestPlantAndRestoreEveryForm: each form stands where the file was, and
// restore puts the original back, byte for byte.
func TestPlantAndRestoreEveryForm(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	aside := t.TempDir()
	for _, f := range Forms() {
		rel := "SOUL.md"
		if f == MiddleLink {
			rel = "memories/MEMORY.md"
			require.NoError(t, os.WriteFile(filepath.Join(hs["alpha"], rel), []byte("mine"), 0o644))
		}
		restore, err := Plant(hs["alpha"], rel, f, hs["beta"], aside)
		require.NoError(t, err, "%s", f)
		fi, err := os.Lstat(filepath.Join(hs["alpha"], strings.Split(rel, "/")[0]))
		require.NoError(t, err)
		switch f {
		case FIFO:
			assert.Equal(t, os.ModeNamedPipe, fi.Mode().Type())
		case DeviceLink, LinkOut, MiddleLink:
			assert.Equal(t, os.ModeSymlink, fi.Mode().Type())
		case Sparse:
			assert.EqualValues(t, HugeSize, fi.Size())
		case Directory:
			assert.True(t, fi.IsDir())
		case Socket:
			assert.Equal(t, os.ModeSocket, fi.Mode().Type())
		}
		require.NoError(t, restore(), "%s", f)
		b, err := os.ReadFile(filepath.Join(hs["alpha"], filepath.FromSlash(rel)))
		require.NoError(t, err)
		if f == MiddleLink {
			assert.Equal(t, "mine", string(b))
		} else {
			assert.Equal(t, "soul of alpha", string(b), "%s", f)
		}
	}
	_, err := Plant(hs["alpha"], "SOUL.md", MiddleLink, hs["beta"], aside)
	assert.ErrorIs(t, err, ErrNotApplicable)

	// A path longer than a socket address holds.
	deep := filepath.Join(hs["alpha"], strings.Repeat("d", 60), strings.Repeat("e", 60))
	require.NoError(t, os.MkdirAll(deep, 0o755))
	rel, err := filepath.Rel(hs["alpha"], filepath.Join(deep, "f.md"))
	require.NoError(t, err)
	restore, err := Plant(hs["alpha"], rel, Socket, hs["beta"], aside)
	require.NoError(t, err)
	fi, err := os.Lstat(filepath.Join(deep, "f.md"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket, fi.Mode().Type())
	require.NoError(t, restore())
}

// TestPlantAndRestoreEveryDirForm: every folder form takes the folder's
// place, and restore puts the folder back with what was in it.
func TestPlantAndRestoreEveryDirForm(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	aside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(hs["alpha"], "memories", "MEMORY.md"), []byte("mine"), 0o644))
	for _, f := range DirForms() {
		restore, err := Plant(hs["alpha"], "memories", f, hs["beta"], aside)
		require.NoError(t, err, "%s", f)
		fi, err := os.Lstat(filepath.Join(hs["alpha"], "memories"))
		require.NoError(t, err)
		assert.False(t, fi.IsDir(), "%s left a folder", f)
		if f == FileInstead {
			assert.True(t, fi.Mode().IsRegular())
		}
		require.NoError(t, restore(), "%s", f)
		b, err := os.ReadFile(filepath.Join(hs["alpha"], "memories", "MEMORY.md"))
		require.NoError(t, err, "%s", f)
		assert.Equal(t, "mine", string(b), "%s", f)
	}
}

// TestShellPayloadReportsWhereItRan: BASH_ENV's payload, run by a
// non-interactive bash outside any sandbox, reports the test's own
// namespaces and the victim's file; its positive control is that
// Outside holds for it, and not for a report with no_new_privs.
func TestShellPayloadReportsWhereItRan(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	dir := filepath.Join(hs["alpha"], ".surface")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := WritePayloads(ctx, dir, filepath.Join(hs["beta"], ".env"), nil)
	require.NoError(t, err)
	var bashEnv string
	for _, p := range set.Vars {
		if p.Var == "BASH_ENV" {
			bashEnv = p.Value
		}
	}
	require.NotEmpty(t, bashEnv)
	cmd := exec.CommandContext(ctx, "bash", "-c", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "BASH_ENV=" + bashEnv}
	require.NoError(t, cmd.Run())
	reps, err := ReadReports(set.Reports)
	require.NoError(t, err)
	require.Len(t, reps, 1)
	mnt, user, err := ServerNamespaces(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, "BASH_ENV", reps[0].Var)
	assert.True(t, reps[0].Outside(mnt, user), "%+v", reps[0])
	assert.Contains(t, string(reps[0].Victim), "value-beta-0123456789")
	confined := reps[0]
	confined.NoNewPrivs = true
	assert.False(t, confined.Outside(mnt, user))
	kept := reps[0]
	kept.PrivsRead = false // /proc kept from it, as Landlock does
	assert.False(t, kept.Outside(mnt, user))
	assert.True(t, parseReport("r", []byte("var=PATH\npid=1\nmnt=m\nuser=u\nnnp=\n--- victim\n")).Outside("m", "u") == false)
}

// TestPreloadPayloadRunsInEveryDynamicProgram: with a C compiler here,
// LD_PRELOAD's library reports from a program it was preloaded into.
func TestPreloadPayloadRunsInEveryDynamicProgram(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := WritePayloads(ctx, filepath.Join(hs["alpha"], ".surface"), filepath.Join(hs["beta"], ".env"), nil)
	require.NoError(t, err)
	var so string
	for _, p := range set.Vars {
		if p.Var == "LD_PRELOAD" {
			so = p.Value
		}
	}
	if so == "" {
		t.Skipf("no LD_PRELOAD payload: %v", set.Skipped)
	}
	cmd := exec.CommandContext(ctx, "/bin/true")
	cmd.Env = []string{"LD_PRELOAD=" + so}
	require.NoError(t, cmd.Run())
	reps, err := ReadReports(set.Reports)
	require.NoError(t, err)
	require.NotEmpty(t, reps)
	assert.Equal(t, "LD_PRELOAD", reps[0].Var)
	assert.Contains(t, string(reps[0].Victim), "value-beta-0123456789")
}

// TestWriteTableOneRowPerAction folds tenants into one row per action.
func TestWriteTableOneRowPerAction(t *testing.T) {
	t.Parallel()
	m := &Map{Actions: []Action{
		{Name: "session.create", Tenant: "alpha", Files: []FileUse{{Tenant: "alpha", Path: "config.yaml", Ops: []Op{Opened, Read}},
			{Tenant: "alpha", Path: ".config.yaml.tmp-91f932ffdad3", Ops: []Op{Created, Renamed}}, {Tenant: "alpha", Path: ".config.yaml.tmp-a70f4e05d704", Ops: []Op{Created}}}},
		{Name: "session.create", Tenant: "beta", Files: []FileUse{{Tenant: "beta", Path: "SOUL.md", Ops: []Op{Opened, Read}}},
			Procs: []Proc{{Program: "bwrap", Carries: []Carried{{"beta", "K"}}}, {Program: "bash", Confined: true}}},
	}}
	m.Aim("beta", "SOUL.md", "fifo")
	var b strings.Builder
	require.NoError(t, m.WriteTable(&b))
	out := b.String()
	assert.Equal(t, 3, strings.Count(out, "\n"), out)
	assert.Contains(t, out, "`SOUL.md`, `config.yaml`")
	assert.Contains(t, out, "`bwrap: K`")
	assert.Contains(t, out, "| 1 |")
	assert.Equal(t, 1, strings.Count(out, ".config.yaml.tmp-*"), "a temp file's random name is one star: %s", out)
}

// TestSharedRowsAreValidAndFindAPlant: the rows pass the attack table's
// checks, and run by two shells that share /tmp (no sandbox), the look
// brings back the other's plant: the rows' positive control; clean
// removes it.
func TestSharedRowsAreValidAndFindAPlant(t *testing.T) {
	t.Parallel()
	plant, look, clean := SharedRows()
	require.NoError(t, attack.Validate([]attack.Row{plant, look, clean}))
	// The test's own folders only: the rows' own list names the machine's
	// temp folders.
	plant, look, clean = sharedRowsIn([]string{`"${TMPDIR:-/tmp}"`, `"$(dirname "$HOME")"`})
	tmp := t.TempDir()
	run := func(c attack.Call) string {
		cmd := exec.Command("/bin/sh", "-c", c.Args["command"].(string))
		cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + filepath.Join(tmp, "alpha")}
		cmd.Dir = tmp
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	canary := "shared-plant-alpha-0123456789"
	out := run(plant.Call(attack.Canaries{Write: canary}))
	assert.Contains(t, out, "planted in "+tmp)
	assert.Contains(t, run(look.Call(attack.Canaries{})), canary)
	run(clean.Call(attack.Canaries{Write: canary}))
	assert.NotContains(t, run(look.Call(attack.Canaries{})), canary)
}

// TestSwapperFlipsAndPutsBack: while it runs, a reader by path sees both
// the own file and the victim's (the attack's positive control: a check
// then a later open by name follows the link); Stop puts the original
// back.
func TestSwapperFlipsAndPutsBack(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	aside := filepath.Join(hs["alpha"], ".surface")
	require.NoError(t, os.MkdirAll(aside, 0o755))
	s, err := StartSwap(hs["alpha"], "SOUL.md", hs["beta"], aside)
	require.NoError(t, err)
	seen := map[string]bool{}
	require.Eventually(t, func() bool {
		if b, err := os.ReadFile(filepath.Join(hs["alpha"], "SOUL.md")); err == nil {
			seen[string(b)] = true
		}
		return seen["soul of alpha"] && seen["soul of beta"]
	}, 20*time.Second, time.Millisecond, "saw %v", seen)
	n, err := s.Stop()
	require.NoError(t, err)
	assert.Positive(t, n)
	b, err := os.ReadFile(filepath.Join(hs["alpha"], "SOUL.md"))
	require.NoError(t, err)
	assert.Equal(t, "soul of alpha", string(b))
	fi, err := os.Lstat(filepath.Join(hs["alpha"], "SOUL.md"))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	entries, err := os.ReadDir(hs["alpha"])
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), "surface-swap", "nothing of the swap is left")
	}
	_, err = StartSwap(hs["alpha"], "nope.md", hs["beta"], aside)
	assert.ErrorIs(t, err, ErrNotApplicable)
}

// TestReadReportRefusesWhatATenantSwapsIn: a report swapped for a FIFO or
// a link after the listing is refused at once, not waited on or followed.
func TestReadReportRefusesWhatATenantSwapsIn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo, link, ok := filepath.Join(dir, "fifo"), filepath.Join(dir, "link"), filepath.Join(dir, "ok")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.WriteFile(ok, []byte("var=PATH\n"), 0o600))
	require.NoError(t, os.Symlink(ok, link))
	_, read := readReport(fifo)
	assert.False(t, read, "a FIFO")
	_, read = readReport(link)
	assert.False(t, read, "a link")
	b, read := readReport(ok)
	assert.True(t, read, "the positive control: a report is read")
	assert.Equal(t, "var=PATH\n", string(b))
}

// TestWatchAttributesAProfileMadeLater: a profile folder the server makes
// below a watched home during a window is its own tenant's once Watch
// named it, not the enclosing home's (and without Watch, the enclosing
// home's: the control).
func TestWatchAttributesAProfileMadeLater(t *testing.T) {
	t.Parallel()
	_, hs := homes(t)
	rec, err := NewRecorder(map[string]string{"alpha": hs["alpha"]}, Vars{}, t.TempDir())
	require.NoError(t, err)
	defer rec.Close()
	guest := filepath.Join(hs["alpha"], "profiles", "guest")
	other := filepath.Join(hs["alpha"], "profiles", "unwatched")
	require.NoError(t, rec.Watch("guest", guest))
	require.NoError(t, rec.Begin("profiles.create", "", false, nil))
	for _, d := range []string{guest, other} {
		require.NoError(t, os.MkdirAll(filepath.Join(d, "memories"), 0o755))
	}
	// Files made once the new folders are watched: a poll, since the
	// watch is added as the folder's creation event is read.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var act Action
	for i := 0; ; i++ {
		require.NoError(t, ctx.Err(), "the new folders' files were never seen")
		for _, d := range []string{guest, other} {
			require.NoError(t, os.WriteFile(filepath.Join(d, "memories", fmt.Sprintf("m%d.md", i)), []byte("m"), 0o644))
		}
		act, err = rec.End(ctx)
		require.NoError(t, err)
		if hasFile(act, "guest", fmt.Sprintf("memories/m%d.md", i)) && hasFile(act, "alpha", fmt.Sprintf("profiles/unwatched/memories/m%d.md", i)) {
			break
		}
		require.NoError(t, rec.Begin("profiles.create", "", false, nil))
	}
	for _, f := range act.Files {
		assert.False(t, f.Tenant == "alpha" && strings.HasPrefix(f.Path, "profiles/guest/"), "the guest's file went to the enclosing home: %+v", f)
	}
}

func hasFile(act Action, tenant, path string) bool {
	return slices.ContainsFunc(act.Files, func(f FileUse) bool { return f.Tenant == tenant && f.Path == path })
}
