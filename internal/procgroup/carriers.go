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
// by command line only.
func Carrying(needles []string) []Carrier {
	if len(needles) == 0 {
		return nil
	}
	self := os.Getpid()
	var out []Carrier
	for _, pid := range pids() {
		if pid == self || !Alive(pid) {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		for _, n := range needles {
			c := Carrier{Pid: pid, Comm: strings.TrimSpace(string(comm)), Cmdline: args, Needle: n}
			switch {
			case n == "":
				continue
			case bytes.Contains(cmdline, []byte(n)):
				c.In = "command line"
			case bytes.Contains(env, []byte(n)):
				c.In = "environment"
			default:
				continue
			}
			out = append(out, c)
		}
	}
	return out
}
