package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/tenantcanary/tenantcanary/internal/procgroup"
)

// Process is one process of the server's host, as remote.processes lists
// it.
type Process struct {
	Pid     int      `json:"pid"`
	PPid    int      `json:"ppid"`
	Cmdline []string `json:"cmdline"`
	Env     []string `json:"env"` // KEY=VALUE
}

// List runs the processes command and parses what it prints (Parse).
func List(ctx context.Context, argv []string) ([]Process, error) {
	out, err := Run(ctx, "remote.processes", argv, "", nil, nil)
	if err != nil {
		return nil, err
	}
	ps, err := Parse(out)
	if err != nil {
		return nil, fmt.Errorf("remote.processes (%s): %w", strings.Join(argv, " "), err)
	}
	return ps, nil
}

// Parse reads a process listing, one process a line, each line either a
// JSON object {"pid", "ppid", "cmdline": [...], "env": ["K=V", ...]} or
// four fields "PID PPID CMDLINE_B64 ENVIRON_B64": the base64 of
// /proc/PID/cmdline and /proc/PID/environ as Linux gives them (NUL
// separated), "-" for an empty or unreadable one. Blank lines are
// skipped; any other line is an error naming it. A listing whose first
// line is RecordsHeader is grep's records instead (ParseRecords).
func Parse(out string) ([]Process, error) {
	if rest, ok := strings.CutPrefix(out, RecordsHeader+"\n"); ok {
		return ParseRecords(rest)
	}
	var ps []Process
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		p, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ps = append(ps, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the listing: %w", err)
	}
	return ps, nil
}

func parseLine(line string) (Process, error) {
	var p Process
	if strings.HasPrefix(line, "{") {
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return p, fmt.Errorf("not a process's JSON object: %w", err)
		}
		if p.Pid <= 0 {
			return p, fmt.Errorf("no pid in %.80q", line)
		}
		return p, nil
	}
	f := strings.Fields(line)
	if len(f) != 4 {
		return p, fmt.Errorf("want a JSON object or PID PPID CMDLINE_B64 ENVIRON_B64, got %d field(s) in %.80q", len(f), line)
	}
	var err error
	if p.Pid, err = strconv.Atoi(f[0]); err != nil || p.Pid <= 0 {
		return p, fmt.Errorf("pid %q is not a number", f[0])
	}
	if p.PPid, err = strconv.Atoi(f[1]); err != nil {
		return p, fmt.Errorf("ppid %q is not a number", f[1])
	}
	if p.Cmdline, err = nulList(f[2]); err != nil {
		return p, fmt.Errorf("cmdline of %d: %w", p.Pid, err)
	}
	if p.Env, err = nulList(f[3]); err != nil {
		return p, fmt.Errorf("environ of %d: %w", p.Pid, err)
	}
	return p, nil
}

// nulList decodes a base64 NUL-separated list ("-": none).
func nulList(b64 string) ([]string, error) {
	if b64 == "-" {
		return nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	raw = bytes.TrimRight(raw, "\x00")
	if len(raw) == 0 {
		return nil, nil
	}
	return strings.Split(string(raw), "\x00"), nil
}

// Carrying is procgroup.Carrying over a listing: the processes whose
// command line or environment holds any of needles, one entry per
// process and needle (the command line first). Comm is the program's
// base name.
func Carrying(ps []Process, needles []string) []procgroup.Carrier {
	var out []procgroup.Carrier
	for _, p := range ps {
		cmd := strings.Join(p.Cmdline, " ")
		env := strings.Join(p.Env, "\x00")
		comm := ""
		if len(p.Cmdline) > 0 {
			comm = p.Cmdline[0][strings.LastIndex(p.Cmdline[0], "/")+1:]
		}
		for _, n := range needles {
			in := ""
			switch {
			case n == "":
				continue
			case strings.Contains(cmd, n):
				in = "command line"
			case strings.Contains(env, n):
				in = "environment"
			default:
				continue
			}
			out = append(out, procgroup.Carrier{Pid: p.Pid, Comm: comm, Cmdline: cmd, Needle: n, In: in})
		}
	}
	return out
}

// LinuxProcesses is a remote.processes command for a Linux host with a
// POSIX shell and base64 (coreutils): every process of /proc the command's
// user can read, in Parse's four-field form. Run it through the
// operator's transport (`ssh HOST sh -c '...'`).
const LinuxProcesses = `for d in /proc/[0-9]*; do p=${d#/proc/}; ` +
	`pp=$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null) || continue; [ -n "$pp" ] || continue; ` +
	`c=$(base64 -w0 < "$d/cmdline" 2>/dev/null); e=$(base64 -w0 < "$d/environ" 2>/dev/null); ` +
	`echo "$p $pp ${c:--} ${e:--}"; done`

// RecordsHeader opens a listing in grep's records (ParseRecords).
const RecordsHeader = "proc-records"

// LinuxProcessesFast is a remote.processes command for a Linux host with
// GNU grep: one grep prints every line of every process's stat, cmdline
// and environ as NUL-terminated records (ParseRecords), where
// LinuxProcesses forks several programs per process. It exits 0 when
// some files were unreadable (a process that ended, another user's
// environ) and not when grep is missing.
const LinuxProcessesFast = `cd /proc && echo ` + RecordsHeader + ` && grep -a -z -H -s '' [0-9]*/stat [0-9]*/cmdline [0-9]*/environ; [ $? -le 2 ]`

// ParseRecords reads what LinuxProcessesFast's grep prints: records
// ending in NUL, each "PID/FILE:CONTENT", FILE stat (one record: "PID
// (comm) STATE PPID ..."), cmdline or environ (one record per argument
// or variable). A process whose stat is missing (it ended while listed)
// is left out. No record is an error: the listing shell itself was
// running, so grep printed nothing (no GNU grep with -z on the host?).
func ParseRecords(out string) ([]Process, error) {
	byPid := map[int]*Process{}
	var order []int
	get := func(pid int) *Process {
		p := byPid[pid]
		if p == nil {
			p = &Process{Pid: pid, PPid: -1}
			byPid[pid] = p
			order = append(order, pid)
		}
		return p
	}
	recs := strings.Split(out, "\x00")
	if len(recs) > 0 && strings.TrimSpace(recs[len(recs)-1]) == "" {
		recs = recs[:len(recs)-1]
	}
	for n, rec := range recs {
		name, content, ok := strings.Cut(rec, ":")
		dir, file, ok2 := strings.Cut(name, "/")
		pid, err := strconv.Atoi(dir)
		if !ok || !ok2 || err != nil || pid <= 0 {
			return nil, fmt.Errorf("record %d: want PID/FILE:CONTENT, got %.80q", n+1, rec)
		}
		p := get(pid)
		switch file {
		case "stat":
			// The state and the ppid follow the last ')': comm, in
			// parentheses, may hold anything but a NUL.
			i := strings.LastIndexByte(content, ')')
			f := strings.Fields(content[i+1:])
			if i < 0 || len(f) < 2 {
				return nil, fmt.Errorf("record %d: %d/stat is not /proc's stat: %.80q", n+1, pid, content)
			}
			if p.PPid, err = strconv.Atoi(f[1]); err != nil {
				return nil, fmt.Errorf("record %d: the ppid of %d, %q, is not a number", n+1, pid, f[1])
			}
		case "cmdline":
			p.Cmdline = append(p.Cmdline, content)
		case "environ":
			p.Env = append(p.Env, content)
		default:
			return nil, fmt.Errorf("record %d: %q is none of stat, cmdline, environ", n+1, name)
		}
	}
	ps := make([]Process, 0, len(order))
	for _, pid := range order {
		if p := byPid[pid]; p.PPid >= 0 {
			ps = append(ps, *p)
		}
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s listing with no process (the listing's own shell was one): does the host's grep take -z (GNU grep)?", RecordsHeader)
	}
	return ps, nil
}
