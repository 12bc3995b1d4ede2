package procgroup

import (
	"bytes"
	"os"
	"strconv"
)

// SameMountNS lists the live pids of pids that run in this process's
// mount namespace: outside a bwrap sandbox (bwrap's outer process, the
// Landlock launcher's stages, and a Landlock-restricted or unconfined
// command, which the caller tells apart by its pid). One whose /proc
// files cannot be read (gone, another user's) is left out.
func SameMountNS(pids []int) []int {
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
		if err == nil && ns == own && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Environ is the environment pid started with (/proc/<pid>/environ: the
// block its program was executed with; a later setenv changes the
// process's memory, not this), nil when it cannot be read.
func Environ(pid int) []string {
	data, err := readProc(pid, "environ", nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out
}
