package scenarios

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStateOfIsPerRunAndPerKey(t *testing.T) {
	t.Parallel()
	a, b := &stateKey[int]{"a"}, &stateKey[int]{"b"}
	run1, run2 := &Env{}, &Env{}
	*stateOf(run1, a) = 1
	*stateOf(run1, b) = 2
	assert.Equal(t, 1, *stateOf(run1, a), "a key gives back what was put under it")
	assert.Equal(t, 2, *stateOf(run1, b), "another key is another slot")
	assert.Equal(t, 0, *stateOf(run2, a), "another run starts from zero")
	assert.Same(t, stateOf(run1, a), stateOf(run1, a), "one slot per key and run")
}
