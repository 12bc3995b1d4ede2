package procgroup

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Carrier is a live process whose environment or command line holds one of
// the strings a caller looks for.
type Carrier struct {
	Pid     int
	Comm    string // the command name (/proc/PID/comm)
	Cmdline string // the arguments joined by spaces
	Needle  string // the string found
	In      string // "environment" or "command line"
}

// Carrying lists the live processes (this one excepted) whose environment or
// command line holds any of needles, one entry per process and needle; a
// needle found in both places is reported once, in the command line.
// Processes whose environment cannot be read (another user's) are searched
// by command line only. It is polled over every process of the machine, so
// it reads a process's environment only for needles its command line lacks,
// and its state and name only for a process whose lines hold one.
func Carrying(needles []string) []Carrier {
	if len(needles) == 0 {
		return nil
	}
	var out []Carrier
	var env []byte // one buffer for every process's environment
	for pid, cmdline := range others("cmdline") {
		envRead := false
		var found []Carrier
		for _, n := range needles {
			in := ""
			switch {
			case n == "":
				continue
			case bytes.Contains(cmdline, []byte(n)):
				in = "command line"
			default:
				if !envRead {
					env, _ = readProc(pid, "environ", env)
					envRead = true
				}
				if !bytes.Contains(env, []byte(n)) {
					continue
				}
				in = "environment"
			}
			found = append(found, Carrier{Pid: pid, Needle: n, In: in})
		}
		if len(found) == 0 || !Alive(pid) { // a zombie's lines read empty: asked only of a match
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		for _, c := range found {
			c.Comm, c.Cmdline = strings.TrimSpace(string(comm)), args
			out = append(out, c)
		}
	}
	return out
}
