package lru

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A full cache drops the value used least recently, never more than it
// must; a value put again is replaced in place.
func TestCacheDropsTheLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	c := New[string, int](2)
	c.Put("a", 1)
	c.Put("b", 2)
	_, _ = c.Get("a") // b is now the least recently used
	c.Put("c", 3)
	require.Equal(t, 2, c.Len())
	_, ok := c.Get("b")
	require.False(t, ok, "the least recently used went")
	v, ok := c.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	c.Put("a", 10) // replaced, nothing dropped
	require.Equal(t, 2, c.Len())
	v, _ = c.Get("a")
	require.Equal(t, 10, v)
	_, ok = c.Get("c")
	require.True(t, ok)
	require.Equal(t, 1, New[int, int](0).max, "a cache holds at least one value")
}
