package syncio

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConcurrentWritesArriveWhole(t *testing.T) {
	t.Parallel()
	var buf Buffer
	w := &Writer{W: &buf}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, _ = w.Write([]byte("0123456789\n"))
				_ = buf.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 800)
	for _, l := range lines {
		require.Equal(t, "0123456789", l)
	}
}
