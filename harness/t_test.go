package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var _ T = (*testing.T)(nil)

func TestRunStandaloneFatalStopsAndCleansUp(t *testing.T) {
	t.Parallel()
	var order []string
	var dir string
	root := t.TempDir()
	out := RunStandalone(context.Background(), "scenario/x", root, false, func(st T) {
		dir = st.TempDir()
		st.Cleanup(func() { order = append(order, "first") })
		st.Cleanup(func() { order = append(order, "second"); st.Fatalf("cleanup fails too") })
		st.Logf("step %d", 1)
		st.Fatalf("boom %s", "here")
		order = append(order, "unreachable")
	})
	assert.True(t, out.Failed)
	assert.Equal(t, []string{"step 1", "boom here", "cleanup fails too"}, out.Log)
	assert.Equal(t, []string{"second", "first"}, order)
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "temp dir removed")
	_, err = os.Stat(filepath.Join(root, KeptLog))
	assert.True(t, os.IsNotExist(err), "a run not kept leaves no log")
}

func TestRunStandalonePanicFailsWithStack(t *testing.T) {
	t.Parallel()
	out := RunStandalone(context.Background(), "p", t.TempDir(), true, func(st T) { panic("oops") })
	require.True(t, out.Failed)
	assert.Contains(t, out.Log[0], "panic: oops")
	assert.Contains(t, out.Log[0], "t_test.go")
	root := t.TempDir()
	ok := RunStandalone(context.Background(), "ok", root, true, func(st T) { st.Logf("fine"); st.Logf("two\nlines\n") })
	assert.False(t, ok.Failed)
	kept, err := os.ReadFile(filepath.Join(root, KeptLog))
	require.NoError(t, err, "a kept run keeps its log, passed or not")
	assert.Equal(t, "fine\ntwo\nlines\n", string(kept))
}
