package procgroup

import (
	"bytes"
)

// MarkerVar is the environment variable that tags every process of one run.
// A child inherits it from its parent unless someone scrubs it, so the live
// processes carrying a run's marker are the ones that run spawned, however
// deep and in whatever process group.
const MarkerVar = "TENANTCANARY_RUN"

// Marked lists the live pids whose environment carries MarkerVar=id.
func Marked(id string) []int {
	if id == "" {
		return nil
	}
	return WithEnv(MarkerVar + "=" + id)
}

// WithEnv lists the live pids (but this one) whose environment holds the
// entry kv (NAME=VALUE), read from /proc: from outside, it sees through
// PID namespaces.
func WithEnv(kv string) []int {
	want := []byte(kv + "\x00")
	var out []int
	for pid, env := range others("environ") {
		env = append(env, 0)
		if (bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...))) && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}
