package hostilefile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMakeEveryForm: each form is what it says, at a short path and at one
// longer than a socket address holds.
func TestMakeEveryForm(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))} {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for form, want := range map[Form]os.FileMode{FIFO: os.ModeNamedPipe, DeviceLink: os.ModeSymlink, Directory: os.ModeDir, Socket: os.ModeSocket, Sparse: 0} {
			p := filepath.Join(dir, string(form))
			require.NoError(t, Make(p, form))
			fi, err := os.Lstat(p)
			require.NoError(t, err)
			assert.Equal(t, want, fi.Mode().Type(), "%s", form)
			if form == Sparse {
				assert.EqualValues(t, HugeSize, fi.Size())
			}
		}
	}
	assert.Error(t, Make(filepath.Join(t.TempDir(), "x"), "nope"))
}

// TestReleaseFreesABlockedReader: a reader opening the FIFO gets an end of
// file once Release runs; Release with no reader says so and never blocks.
func TestReleaseFreesABlockedReader(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, Make(p, FIFO))
	assert.False(t, Release(p), "no reader yet")
	done := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(p)
		if err == nil && len(b) > 0 {
			err = os.ErrInvalid
		}
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if Release(p) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the reader never blocked on the FIFO")
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the reader stayed blocked after Release")
	}
}
