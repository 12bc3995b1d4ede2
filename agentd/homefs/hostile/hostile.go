// Package hostile plants, for tests, what a hostile tenant leaves where
// agentd expects one of its home's files: a FIFO (an open for read blocks
// with no writer), a symlink to a device that never ends, a huge sparse
// file, a folder, a socket.
//
//	for _, k := range hostile.Kinds {
//		t.Run(string(k), func(t *testing.T) {
//			hostile.Plant(t, filepath.Join(home, ".env"), k)
//			... // the action that reads .env returns promptly, with an error or without it
//		})
//	}
package hostile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tenantcanary/tenantcanary/internal/hostilefile"
)

// Kind is one thing planted in place of a file.
type Kind string

// The kinds Plant knows.
const (
	FIFO    Kind = "fifo"     // a named pipe: an open for read with no writer blocks
	DevZero Kind = "dev-zero" // a symlink to /dev/zero: a read never ends
	Sparse  Kind = "sparse"   // a sparse file of SparseSize bytes (no disk used)
	Dir     Kind = "dir"      // a folder where a file belongs
	Socket  Kind = "socket"   // a unix socket (an open fails with ENXIO)
)

// SparseSize is the apparent size of a Sparse plant: 20 GiB.
const SparseSize = 20 << 30

// Kinds is every kind, in the order tests run them.
var Kinds = []Kind{FIFO, DevZero, Sparse, Dir, Socket}

// Plant replaces whatever is at path with k (making its folder). A socket
// is bound by a listener closed with the test (the file stays).
func Plant(t testing.TB, path string, k Kind) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatalf("plant %s at %s: %v", k, path, err)
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatalf("plant %s at %s: %v", k, path, err)
	}
	var err error
	switch k {
	case FIFO:
		err = hostilefile.Make(path, hostilefile.FIFO)
	case DevZero:
		err = hostilefile.Make(path, hostilefile.DeviceLink)
	case Sparse:
		err = hostilefile.MakeSparse(path, SparseSize)
	case Dir:
		err = hostilefile.Make(path, hostilefile.Directory)
	case Socket:
		err = hostilefile.Make(path, hostilefile.Socket)
	default:
		t.Fatalf("plant: unknown kind %q", k)
	}
	if err != nil {
		t.Fatalf("plant %s at %s: %v", k, path, err)
	}
}

// Release frees the reads blocked opening the FIFO at path (the faults'
// positive controls): a writer opens it and closes it at once. It never
// blocks: false when no reader was waiting (an open of a FIFO for writing
// with no reader fails, non-blocking).
func Release(path string) bool { return hostilefile.Release(path) }

// PlantSparse is Plant's Sparse of size bytes.
func PlantSparse(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatalf("plant sparse file at %s: %v", path, err)
	}
	if err := hostilefile.MakeSparse(path, size); err != nil {
		t.Fatalf("plant sparse file at %s: %v", path, err)
	}
}
