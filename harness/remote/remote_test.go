package remote

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// localSpec is a remote: block whose "host" is this machine's folder
// home, reached with tar through sh: the real commands, no transport.
func localSpec(home string) *Spec {
	return &Spec{Home: home,
		Pull: []string{"sh", "-c", `tar -C "$0" -cf - .`, "{path}"},
		Push: []string{"sh", "-c", `mkdir -p "$0" && tar -C "$0" --no-same-owner -xf -`, "{path}"}}
}

func TestPushThenPullRoundTripsAFolder(t *testing.T) {
	dir := t.TempDir()
	remoteHome, mirror := filepath.Join(dir, "server", "home"), filepath.Join(dir, "mirror")
	require.NoError(t, os.MkdirAll(filepath.Join(mirror, ".agentd", "profiles", "alpha"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mirror, ".agentd", "SOUL.md"), []byte("soul-default"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mirror, ".agentd", "profiles", "alpha", ".env"), []byte("K=alpha\n"), 0o600))
	require.NoError(t, os.Symlink("SOUL.md", filepath.Join(mirror, ".agentd", "soul-link")))
	m := &Mirror{Spec: localSpec(remoteHome), Local: mirror}
	require.NoError(t, m.Push(t.Context()))

	got, err := os.ReadFile(filepath.Join(remoteHome, ".agentd", "profiles", "alpha", ".env"))
	require.NoError(t, err)
	assert.Equal(t, "K=alpha\n", string(got))
	link, err := os.Readlink(filepath.Join(remoteHome, ".agentd", "soul-link"))
	require.NoError(t, err)
	assert.Equal(t, "SOUL.md", link)

	// The server writes one file, deletes another; a pull mirrors both.
	soul := filepath.Join(mirror, ".agentd", "SOUL.md")
	before, err := os.Stat(soul)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(remoteHome, ".agentd", "state.db"), []byte("rows"), 0o644))
	require.NoError(t, os.RemoveAll(filepath.Join(remoteHome, ".agentd", "profiles", "alpha")))
	require.NoError(t, m.Pull(t.Context()))
	got, err = os.ReadFile(filepath.Join(mirror, ".agentd", "state.db"))
	require.NoError(t, err)
	assert.Equal(t, "rows", string(got))
	assert.NoDirExists(t, filepath.Join(mirror, ".agentd", "profiles", "alpha"), "what the server deleted leaves the mirror")
	after, err := os.Stat(soul)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "an unchanged file is left as it is (a scan cache keeps it)")

	// A push after the pull sends what the harness changed, never a file
	// the server holds open as it was pulled: its database stays the
	// server's inode.
	remoteDB := filepath.Join(remoteHome, ".agentd", "state.db")
	dbBefore, err := os.Stat(remoteDB)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(soul, []byte("soul-planted-again"), 0o644))
	require.NoError(t, m.Push(t.Context()))
	dbAfter, err := os.Stat(remoteDB)
	require.NoError(t, err)
	assert.True(t, os.SameFile(dbBefore, dbAfter), "the server's database was not written under it")
	got, err = os.ReadFile(filepath.Join(remoteHome, ".agentd", "SOUL.md"))
	require.NoError(t, err)
	assert.Equal(t, "soul-planted-again", string(got), "what the harness wrote reached the server")
	assert.Equal(t, "/srv/x/home/.agentd/state.db",
		(&Mirror{Spec: &Spec{Home: "/srv/x/home"}, Local: mirror}).RemotePath(filepath.Join(mirror, ".agentd", "state.db")))
}

// tarOf writes a tar stream of the given headers (regular files get
// body "x") to a file and returns its path.
func tarOf(t *testing.T, hs ...tar.Header) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		h.Mode = 0o644
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		require.NoError(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte("x"))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	p := filepath.Join(t.TempDir(), "stream.tar")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	return p
}

func TestPullRefusesEntriesThatEscapeTheMirror(t *testing.T) {
	for name, h := range map[string]tar.Header{
		"absolute":            {Name: "/etc/owned", Typeflag: tar.TypeReg},
		"dot-dot":             {Name: "./a/../../owned", Typeflag: tar.TypeReg},
		"symlink absolute":    {Name: "./link", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		"symlink up":          {Name: "./a/link", Typeflag: tar.TypeSymlink, Linkname: "../../outside"},
		"hard link up":        {Name: "./hard", Typeflag: tar.TypeLink, Linkname: "../outside"},
		"hard link absolute:": {Name: "./hard", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			mirror := filepath.Join(dir, "mirror")
			stream := tarOf(t, tar.Header{Name: "./a/", Typeflag: tar.TypeDir}, h)
			spec := &Spec{Home: "/srv/home", Pull: []string{"cat", stream}, Push: []string{"true"}}
			err := (&Mirror{Spec: spec, Local: mirror}).Pull(t.Context())
			require.ErrorIs(t, err, ErrEscapes)
			assert.Contains(t, err.Error(), strings.TrimPrefix(h.Name, "./"), "the error names the entry")
			entries, _ := os.ReadDir(dir)
			assert.Len(t, entries, 1, "nothing was written beside the mirror")
		})
	}
	// The positive control: the same stream shape, a link that stays
	// inside, is mirrored.
	dir := t.TempDir()
	stream := tarOf(t, tar.Header{Name: "./a/", Typeflag: tar.TypeDir}, tar.Header{Name: "./a/f", Typeflag: tar.TypeReg},
		tar.Header{Name: "./a/link", Typeflag: tar.TypeSymlink, Linkname: "../a/f"}, tar.Header{Name: "./hard", Typeflag: tar.TypeLink, Linkname: "./a/f"})
	require.NoError(t, (&Mirror{Spec: &Spec{Home: "/srv/home", Pull: []string{"cat", stream}, Push: []string{"true"}}, Local: dir}).Pull(t.Context()))
	got, err := os.ReadFile(filepath.Join(dir, "a", "link"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(got))
}

func TestPullThroughASymlinkInTheMirrorStaysInside(t *testing.T) {
	// A first stream plants a link to the outside's parent; a second
	// writes through it: os.Root refuses the write.
	dir := t.TempDir()
	mirror := filepath.Join(dir, "mirror")
	require.NoError(t, os.MkdirAll(mirror, 0o755))
	require.NoError(t, os.Symlink(dir, filepath.Join(mirror, "out"))) // planted by hand: the stream may not
	stream := tarOf(t, tar.Header{Name: "./out/owned", Typeflag: tar.TypeReg})
	err := (&Mirror{Spec: &Spec{Home: "/h", Pull: []string{"cat", stream}, Push: []string{"true"}}, Local: mirror}).Pull(t.Context())
	require.Error(t, err)
	assert.NoFileExists(t, filepath.Join(dir, "owned"))
}

func TestRunNamesTheFieldTheCommandAndItsStderr(t *testing.T) {
	_, err := Run(t.Context(), "remote.stop", []string{"sh", "-c", "echo no route to host >&2; exit 3"}, "", nil, nil)
	require.Error(t, err)
	for _, want := range []string{"remote.stop", "sh -c", "exit status 3", "no route to host"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = Run(t.Context(), "remote.start", nil, "", nil, nil)
	require.ErrorIs(t, err, ErrNoCommand)
}

func TestRunKillsTheCommandsGroupWithItsContext(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, "remote.processes", []string{"sh", "-c", `sleep 60 & echo $! > "$0"; wait`, pidFile}, "", nil, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 30*time.Second)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(strings.TrimSpace(string(data)), &pid)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 10*time.Millisecond,
		"the command's grandchild %d outlived its context", pid)
}

func TestParseReadsBothLineShapesAndNamesABadLine(t *testing.T) {
	ps, err := Parse(`{"pid": 7, "ppid": 1, "cmdline": ["agentd", "serve"], "env": ["A=1"]}

9 7 ` + b64("sh\x00-c\x00env\x00") + ` ` + b64("TENANT_MARKER=m-1\x00HOME=/h\x00") + `
10 7 - -
`)
	require.NoError(t, err)
	require.Len(t, ps, 3)
	assert.Equal(t, Process{Pid: 7, PPid: 1, Cmdline: []string{"agentd", "serve"}, Env: []string{"A=1"}}, ps[0])
	assert.Equal(t, Process{Pid: 9, PPid: 7, Cmdline: []string{"sh", "-c", "env"}, Env: []string{"TENANT_MARKER=m-1", "HOME=/h"}}, ps[1])
	assert.Equal(t, 10, ps[2].Pid)
	cs := Carrying(ps, []string{"m-1", "serve", "absent"})
	require.Len(t, cs, 2)
	assert.Equal(t, "environment", cs[1].In)
	assert.Equal(t, "sh", cs[1].Comm)

	for _, bad := range []string{"7 1 x", "seven 1 - -", "7 1 !!! -", `{"ppid": 1}`, "{not json"} {
		_, err := Parse("\n" + bad + "\n")
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "line 2", bad)
	}
}

func TestLinuxProcessesListsAProcessWithItsEnvironment(t *testing.T) {
	for _, c := range []struct{ name, cmd string }{{"loop", LinuxProcesses}, {"grep", LinuxProcessesFast}} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath("base64"); err != nil {
				t.Skip("base64 (coreutils) is not installed")
			}
			marker := "remote-list-" + strings.ReplaceAll(t.Name(), "/", "-")
			// An argument and a variable holding what a listing splits on
			// (spaces, a newline, a colon, a ")") stay whole.
			cmd := exec.Command("/bin/sh", "-c", "sleep 60; exit 0", "a b\nc:d) e")
			cmd.Env = append(os.Environ(), "REMOTE_TEST_MARKER="+marker, "REMOTE_TEST_ODD=x\n1/environ:y")
			require.NoError(t, cmd.Start())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			ps, err := List(t.Context(), []string{"sh", "-c", c.cmd})
			require.NoError(t, err)
			var pids []int
			for _, c := range Carrying(ps, []string{marker}) {
				pids = append(pids, c.Pid)
			}
			require.Contains(t, pids, cmd.Process.Pid, "the marked process is listed with its environment")
			for _, p := range ps {
				if p.Pid == cmd.Process.Pid {
					assert.Equal(t, os.Getpid(), p.PPid)
					assert.Equal(t, []string{"/bin/sh", "-c", "sleep 60; exit 0", "a b\nc:d) e"}, p.Cmdline)
					assert.Contains(t, p.Env, "REMOTE_TEST_ODD=x\n1/environ:y")
				}
			}
		})
	}
}

// grep's records: a process that ended between its files is left out, a
// comm holding ") " keeps its ppid, a record of another shape is an
// error, and no process at all is one.
func TestParseRecords(t *testing.T) {
	out := RecordsHeader + "\n" + "7/stat:7 (a) b) S 3 7 0\n\x00" + "9/cmdline:gone\x00" + "7/cmdline:x\x00" + "7/cmdline:\x00" +
		"7/environ:K=V\x00"
	ps, err := Parse(out)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, Process{Pid: 7, PPid: 3, Cmdline: []string{"x", ""}, Env: []string{"K=V"}}, ps[0])
	for _, bad := range []string{"7/stat:no parens\x00", "x/stat:1 (a) S 1\x00", "7/status:1\x00", "7stat\x00", "9/cmdline:only\x00"} {
		_, err := Parse(RecordsHeader + "\n" + bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestSpecValidateNamesWhatIsWrong(t *testing.T) {
	require.NoError(t, localSpec("/srv/home").Validate())
	require.NoError(t, (*Spec)(nil).Validate())
	ok := withShared(localSpec("/srv/home"), "/srv/tmp", "/srv/homework")
	require.NoError(t, ok.Validate(), "a sibling whose name starts as home's is not within it")
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Home: "srv/home", Pull: []string{"x", "{path}"}, Push: []string{"y", "{path}"}}, "remote.home"},
		{Spec{Home: "/srv", Pull: []string{"x", "{path}"}}, "go together"},
		{Spec{Home: "/srv", Pull: []string{"x"}, Push: []string{"y", "{path}"}}, "remote.pull: no {path}"},
		{Spec{Stop: []string{"x"}}, "stop and start go together"},
		{Spec{Stop: []string{"x"}, Start: []string{"x", "{pth}"}}, "remote.start: unknown placeholder(s) {pth}"},
		{Spec{Shared: []string{"/srv/tmp"}}, "remote.shared[0]: \"/srv/tmp\": the shared folders are pulled with remote.pull"},
		{withShared(localSpec("/srv/home"), "tmp"), "remote.shared[0]: \"tmp\" is not an absolute folder"},
		{withShared(localSpec("/srv/home"), "/srv"), "overlaps remote.home"},
		{withShared(localSpec("/srv/home"), "/srv/home/.agentd/cache"), "overlaps remote.home"},
		{Spec{Logs: []string{"/srv/agentd.log"}}, "remote.logs[0]: \"/srv/agentd.log\": the logs are read with remote.exec"},
		{Spec{Logs: []string{"agentd.log"}, Exec: []string{"sh", "-c", "{command}"}}, "remote.logs[0]: \"agentd.log\" is not an absolute file"},
	} {
		err := c.spec.Validate()
		require.Error(t, err, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
	var none *Spec
	assert.Contains(t, none.Lacks("processes"), "remote.processes")
	assert.Empty(t, localSpec("/h").Lacks("files"))
	assert.Contains(t, (&Spec{Stop: []string{"x"}}).Lacks("restart"), "remote.stop and remote.start")
}

// withShared is s with the shared folders folders.
func withShared(s *Spec, folders ...string) Spec {
	c := *s
	c.Shared = folders
	return c
}
