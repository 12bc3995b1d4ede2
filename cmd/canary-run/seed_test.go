package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --seed reaches certify's options; without it the run draws one.
func TestSeedFlag(t *testing.T) {
	t.Parallel()
	o, err := parseCertify([]string{"--seed", "987654321"})
	require.NoError(t, err)
	assert.Equal(t, uint64(987654321), o.seed)
	opts := o.options(filepath.Join(t.TempDir(), "out"), nil, nil, noEnv)
	assert.Equal(t, uint64(987654321), opts.Seed)
	o, err = parseCertify(nil)
	require.NoError(t, err)
	assert.Zero(t, o.seed, "0: runCertify draws one and prints it")
	_, err = parseCertify([]string{"--seed", "-1"})
	assert.Error(t, err, "a seed is a non-negative number")
}
