package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// envFeed hands a sandboxed command's environment to the program that
// confines it (bwrap, the Landlock launcher) through an inherited
// descriptor, never through that program's own environment or argv: an
// outside program runs with outerenv's allow-list only (a tenant's
// LD_PRELOAD in its environment would run the tenant's code unconfined),
// and its argv is world-readable in /proc. The descriptor is an anonymous
// memory file (memfd) holding the whole environment, read from its start:
// unlike a pipe it needs no writer once the child runs, however large the
// environment and whatever the caller does after Start, and it is on no
// file system.
type envFeed struct {
	r *os.File
}

func newEnvFeed(data []byte) (*envFeed, error) {
	fd, err := unix.MemfdCreate("agentd-command-env", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox command: environment file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "agentd-command-env")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox command: write the environment file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox command: rewind the environment file: %w", err)
	}
	return &envFeed{r: f}, nil
}

// release closes this process's copy (the child holds its own once it
// started).
func (f *envFeed) release() { f.r.Close() }

// bwrapSetenv is bwrap's --args content for env: --setenv NAME VALUE per
// entry, NUL-separated. With --clearenv before it in bwrap's argv, bwrap
// execs the command (inside the sandbox) with exactly env, and bwrap's own
// initial environment and argv never hold it.
func bwrapSetenv(env []string) []byte {
	var b bytes.Buffer
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		for _, s := range []string{"--setenv", name, value} {
			b.WriteString(s)
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

// envBlock is env as the launcher reads it: NAME=VALUE entries, each
// ended by a NUL.
func envBlock(env []string) []byte {
	var b bytes.Buffer
	for _, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok && name != "" {
			b.WriteString(kv)
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

// readEnvBlock reads an envBlock to its end from the descriptor fd, and
// closes it.
func readEnvBlock(fd int) ([]string, error) {
	f := os.NewFile(uintptr(fd), "command-environment")
	if f == nil {
		return nil, fmt.Errorf("the command's environment: descriptor %d is not open", fd)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read the command's environment (descriptor %d): %w", fd, err)
	}
	var env []string
	for _, kv := range strings.Split(string(data), "\x00") {
		if kv != "" {
			env = append(env, kv)
		}
	}
	return env, nil
}
