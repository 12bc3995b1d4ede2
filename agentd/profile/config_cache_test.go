package profile

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoadConfigKeepsNothingACallerCanChange: LoadConfig keeps what it made
// (loadedConfigs), so a caller that changes the config it got must not
// change what the next load returns, and a changed file, in the profile or
// in the managed scope, must be loaded anew.
func TestLoadConfigKeepsNothingACallerCanChange(t *testing.T) {
	t.Parallel()
	h, p := testProfile(t, "")
	own := "model:\n  default: mine\nmemory:\n  memory_enabled: false\nplugins:\n  enabled: [a, b]\nagent:\n  api_max_retries: 5\nextra:\n  k: v\n"
	write(t, p.File("config.yaml"), own)
	write(t, h.Managed+"/config.yaml", "plugins:\n  host:\n    launcher: [x, y]\n") // an operator-only key
	first, err := p.LoadConfig()
	require.NoError(t, err)
	*first.Memory.MemoryEnabled = true
	*first.Agent.APIMaxRetries = 9
	first.Plugins.Enabled[0] = "changed"
	first.Plugins.Host.Launcher[0] = "changed"
	first.Raw["extra"].(map[string]any)["k"] = "changed"
	first.Model.Default = "changed"
	again, err := p.LoadConfig()
	require.NoError(t, err)
	require.False(t, again.MemoryEnabled())
	require.Equal(t, 5, again.MaxRetries())
	require.Equal(t, []string{"a", "b"}, again.Plugins.Enabled)
	require.Equal(t, "x", again.Plugins.Host.Launcher[0])
	require.Equal(t, "v", again.Raw["extra"].(map[string]any)["k"])
	require.Equal(t, "mine", again.Model.Default)

	// The managed scope's file is part of what is kept: a change there is
	// seen at the next load.
	write(t, h.Managed+"/config.yaml", "plugins:\n  host:\n    launcher: [x, y]\nmodel:\n  default: operator's\n")
	managed, err := p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "operator's", managed.Model.Default)

	// Another profile with the same bytes is its own: its home is its cwd.
	q, err := h.Create("other")
	require.NoError(t, err)
	write(t, q.File("config.yaml"), own)
	other, err := q.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, q.Home, other.Terminal.Cwd)
	require.Equal(t, p.Home, again.Terminal.Cwd)
}

// TestConfigCloneSharesNothing fills every field of Config that holds a
// reference (pointer, slice, map), clones it, and requires the clone's
// references to be its own: a field added to Config without a line in
// clone fails here.
func TestConfigCloneSharesNothing(t *testing.T) {
	t.Parallel()
	c := &Config{}
	var refs []string
	fill(reflect.ValueOf(c).Elem(), "Config", &refs)
	require.NotEmpty(t, refs)
	d := c.clone()
	for _, path := range refs {
		a, b := at(reflect.ValueOf(c).Elem(), path), at(reflect.ValueOf(d).Elem(), path)
		require.Equal(t, a.Interface(), b.Interface(), "%s: the clone's value", path)
		require.NotEqual(t, a.Pointer(), b.Pointer(), "%s: the clone shares it", path)
	}
}

// fill makes every reference field below v non-nil, recording its path.
func fill(v reflect.Value, path string, refs *[]string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), path+"."+v.Type().Field(i).Name, refs)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		*refs = append(*refs, path)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		v.Set(s)
		*refs = append(*refs, path)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
		v.Set(m)
		*refs = append(*refs, path)
	}
}

// at is the field of v at a path fill recorded.
func at(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".")[1:] {
		v = v.FieldByName(name)
	}
	return v
}
