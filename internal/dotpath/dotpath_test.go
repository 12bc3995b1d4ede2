package dotpath

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSetMakesAndReplacesMappingsOnTheWay(t *testing.T) {
	m := map[string]any{"model": "x", "terminal": map[string]any{"sandbox": "auto"}}
	Set(m, "terminal.cwd", "/w")
	Set(m, "model.default", "m")
	Set(m, "top", 1)
	require.Equal(t, map[string]any{
		"model":    map[string]any{"default": "m"},
		"terminal": map[string]any{"sandbox": "auto", "cwd": "/w"},
		"top":      1,
	}, m)
}
