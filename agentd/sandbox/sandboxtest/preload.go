package sandboxtest

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// preloadSource is a shared object whose constructor appends a line to
// LOG_PATH for every process that loads it: its pid, its mount namespace
// ("-" where /proc cannot be read, as under Landlock) and its
// no_new_privs.
const preloadSource = `#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

__attribute__((constructor)) static void probe(void) {
	char ns[128];
	ssize_t n = readlink("/proc/self/ns/mnt", ns, sizeof ns - 1);
	if (n > 0) ns[n] = 0; else strcpy(ns, "-");
	char line[256];
	int len = snprintf(line, sizeof line, "%d %s %d\n", (int)getpid(), ns, prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
	int fd = open(LOG_PATH, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		if (write(fd, line, len) < 0) {}
		close(fd);
	}
}
`

// Preload builds, in dir (a tenant's home: the sandbox shows it at the
// same path), a shared object for LD_PRELOAD that records every process
// loading it in the file log; it skips the test with the reason when
// there is no C compiler.
func Preload(t testing.TB, dir string) (so, log string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler (cc) to build the LD_PRELOAD probe: %v", err)
	}
	src := filepath.Join(dir, "probe.c")
	so, log = filepath.Join(dir, "probe.so"), filepath.Join(dir, "preload.log")
	if err := os.WriteFile(src, []byte(preloadSource), 0o600); err != nil {
		t.Fatalf("write the probe's source: %v", err)
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O0", "-DLOG_PATH="+strconv.Quote(log), "-o", so, src).CombinedOutput()
	if err != nil {
		t.Fatalf("build the LD_PRELOAD probe: %v\n%s", err, out)
	}
	return so, log
}

// Loaded is one process that loaded the probe.
type Loaded struct {
	Pid     int
	MountNS string // "-" when the process could not read /proc
	NoNew   bool   // no_new_privs was set
	Outside bool   // in this process's mount namespace, without no_new_privs
}

// Loads reads the probe's log.
func Loads(t testing.TB, log string) []Loaded {
	t.Helper()
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatalf("this process's mount namespace: %v", err)
	}
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("read the probe's log: %v", err)
	}
	var out []Loaded
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		l := Loaded{Pid: pid, MountNS: f[1], NoNew: f[2] == "1"}
		l.Outside = l.MountNS == own && !l.NoNew
		out = append(out, l)
	}
	return out
}

// Dynamic reports whether the program at path is dynamically linked (an
// ELF interpreter loads it, and so LD_PRELOAD reaches it).
func Dynamic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
