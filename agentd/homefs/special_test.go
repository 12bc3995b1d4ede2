package homefs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
)

// heapGrowth is how much the heap may grow while a hostile file is read:
// the largest limit (jobs.json's) and slack, far below a file of
// hostile.SparseSize or a device read for a second.
const heapGrowth = 64 << 20

// TestHostileFilesRefusedPromptly plants each hostile kind at each file
// kind agentd reads and reads it: a prompt refusal naming the file, no
// content of another file, no heap growth.
func TestHostileFilesRefusedPromptly(t *testing.T) {
	for _, name := range []string{"config.yaml", ".env", "SOUL.md", "memories/MEMORY.md", "cron/jobs.json", "plugins/p/plugin.yaml", "plugins/p/p.go"} {
		for _, k := range hostile.Kinds {
			t.Run(name+"/"+string(k), func(t *testing.T) {
				h, mine, _ := twoHomes(t)
				hostile.Plant(t, filepath.Join(mine, name), k)
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				err := readWithin(t, 5*time.Second, func() error { _, err := h.ReadFile(name); return err })
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				require.Error(t, err)
				require.ErrorContains(t, err, name)
				require.NotContains(t, err.Error(), "secret")
				switch k {
				case hostile.Sparse:
					require.ErrorIs(t, err, homefs.ErrTooLarge)
					require.ErrorContains(t, err, fmt.Sprint(homefs.LimitOf(name)))
				case hostile.DevZero:
					require.ErrorIs(t, err, homefs.ErrLinkOut)
				case hostile.FIFO, hostile.Dir, hostile.Socket:
					require.ErrorIs(t, err, homefs.ErrNotRegular)
				}
				require.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(heapGrowth))
			})
		}
	}
}

// readWithin runs read and fails the test if it does not return within d
// (the goroutine is left behind: the test binary still ends).
func readWithin(t *testing.T, d time.Duration, read func() error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("read did not return within %s", d)
		return nil
	}
}

func TestReadFileLimit(t *testing.T) {
	t.Parallel()
	h, mine, _ := twoHomes(t)
	require.NoError(t, os.WriteFile(filepath.Join(mine, "config.yaml"), make([]byte, homefs.MaxConfigSize), 0o600))
	b, err := h.ReadFile("config.yaml")
	require.NoError(t, err, "a file at its limit is read")
	require.Len(t, b, int(homefs.MaxConfigSize))
	_, err = h.ReadFileLimit("config.yaml", homefs.MaxConfigSize-1)
	var tl *homefs.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, "config.yaml", tl.Name)
	require.Equal(t, homefs.MaxMemorySize, homefs.LimitOf("memories/MEMORY.md"))
	require.Equal(t, homefs.MaxManifestSize, homefs.LimitOf("plugins/model-providers/x/plugin.yaml"))
	require.Equal(t, homefs.MaxOtherSize, homefs.LimitOf("logs/agent.log"))
}

func TestReadDirLimit(t *testing.T) {
	t.Parallel()
	h, mine, _ := twoHomes(t)
	dir := filepath.Join(mine, "plugins")
	require.NoError(t, os.Mkdir(dir, 0o700))
	for i := range homefs.MaxDirEntries + 1 {
		require.NoError(t, os.Mkdir(filepath.Join(dir, fmt.Sprint(i)), 0o700))
	}
	_, err := h.ReadDir("plugins")
	require.ErrorIs(t, err, homefs.ErrTooLarge)
	require.ErrorContains(t, err, "plugins")
	require.NoError(t, os.Remove(filepath.Join(dir, "0")))
	entries, err := h.ReadDir("plugins")
	require.NoError(t, err)
	require.Len(t, entries, homefs.MaxDirEntries)
}

// TestSpecialFilesFaultHarms is the positive control of the checks: with
// the home-special-files fault a FIFO hangs the read (caught here by a
// deadline, its writer then released) and a large file is read whole.
func TestSpecialFilesFaultHarms(t *testing.T) {
	t.Parallel()
	h, mine, _ := twoHomes(t)
	h.SpecialFiles = true
	hostile.Plant(t, filepath.Join(mine, ".env"), hostile.FIFO)
	done := make(chan error, 1)
	go func() { _, err := h.ReadFile(".env"); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the fault's read of a FIFO returned (%v): it should block", err)
	case <-time.After(300 * time.Millisecond): // a deadline, not a sync: the read must still hang
	}
	// Release the blocked open: a writer opens and closes the FIFO.
	for !hostile.Release(filepath.Join(mine, ".env")) {
		time.Sleep(10 * time.Millisecond) // the reader is on its way into open
	}
	require.NoError(t, <-done)

	require.NoError(t, os.WriteFile(filepath.Join(mine, "config.yaml"), make([]byte, 2*homefs.MaxConfigSize), 0o600))
	b, err := h.ReadFile("config.yaml")
	require.NoError(t, err)
	require.Len(t, b, 2*int(homefs.MaxConfigSize), "the fault reads past the limit")
	require.False(t, errors.Is(err, homefs.ErrTooLarge))
}
