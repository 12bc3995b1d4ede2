package host

import (
	"fmt"
	"runtime/debug"
	"syscall"

	"github.com/tenantcanary/tenantcanary/isolation"
)

// Limits are the resource limits a plugin host puts on itself before it
// runs any plugin code; whatever a plugin starts inherits them. Zero fields
// set no limit.
type Limits struct {
	// Memory bounds the data segment (RLIMIT_DATA: the Go heap and every
	// anonymous mapping, not the address space the runtime reserves), in
	// bytes. The host's GC also aims below it (debug.SetMemoryLimit).
	Memory int64 `json:"memory,omitempty"`
	// CPUSeconds bounds CPU time over the host's life (RLIMIT_CPU).
	CPUSeconds int64 `json:"cpu_seconds,omitempty"`
	// FileSize bounds a file the host writes, in bytes (RLIMIT_FSIZE).
	FileSize int64 `json:"file_size,omitempty"`
	// OpenFiles bounds open descriptors (RLIMIT_NOFILE).
	OpenFiles int64 `json:"open_files,omitempty"`
	// Processes bounds the processes of the host's user (RLIMIT_NPROC).
	Processes int64 `json:"processes,omitempty"`
}

// LimitsOf is the rlimit part of a profile's plugins.host settings.
func LimitsOf(l isolation.HostLimits) Limits {
	cpu := int64(0)
	if l.CPU > 0 {
		cpu = max(1, int64(l.CPU.Seconds()))
	}
	return Limits{Memory: l.Memory, CPUSeconds: cpu, FileSize: l.FileSize, OpenFiles: l.OpenFiles, Processes: l.Processes}
}

// rlimitNPROC is Linux's RLIMIT_NPROC (package syscall does not name it).
const rlimitNPROC = 6

// apply sets the limits on this process, soft and hard alike so plugin
// code cannot raise them (the CPU limit's hard one a second later: SIGXCPU
// first, then SIGKILL).
func (l Limits) apply() error {
	set := func(what string, res int, soft, hard uint64) error {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err == nil {
			// Only root may raise a hard limit: never ask for more.
			soft, hard = min(soft, cur.Max), min(hard, cur.Max)
		}
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("set the plugin host's %s limit to %d: %w", what, soft, err)
		}
		return nil
	}
	if l.Memory > 0 {
		if err := set("memory (RLIMIT_DATA)", syscall.RLIMIT_DATA, uint64(l.Memory), uint64(l.Memory)); err != nil {
			return err
		}
		debug.SetMemoryLimit(l.Memory / 10 * 9)
	}
	if l.CPUSeconds > 0 {
		if err := set("CPU time (RLIMIT_CPU)", syscall.RLIMIT_CPU, uint64(l.CPUSeconds), uint64(l.CPUSeconds)+1); err != nil {
			return err
		}
	}
	if l.FileSize > 0 {
		if err := set("file size (RLIMIT_FSIZE)", syscall.RLIMIT_FSIZE, uint64(l.FileSize), uint64(l.FileSize)); err != nil {
			return err
		}
	}
	if l.OpenFiles > 0 {
		if err := set("open files (RLIMIT_NOFILE)", syscall.RLIMIT_NOFILE, uint64(l.OpenFiles), uint64(l.OpenFiles)); err != nil {
			return err
		}
	}
	if l.Processes > 0 {
		if err := set("processes (RLIMIT_NPROC)", rlimitNPROC, uint64(l.Processes), uint64(l.Processes)); err != nil {
			return err
		}
	}
	return nil
}
