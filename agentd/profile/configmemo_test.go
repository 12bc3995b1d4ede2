package profile

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// The memo never hides an edit: a changed own or managed config.yaml is
// parsed anew at the next LoadConfig, even one of the same size written
// within the same clock tick.
func TestLoadConfigSeesEveryEditDespiteTheMemo(t *testing.T) {
	t.Parallel()
	h := testHomes(t)
	p, err := h.Create("memo")
	require.NoError(t, err)
	write(t, p.File("config.yaml"), "model:\n  default: aaaa\n")
	write(t, filepath.Join(h.Managed, "config.yaml"), "model:\n  provider: openai\n")
	for i, m := range []string{"aaaa", "bbbb", "aaaa", "cccc"} {
		write(t, p.File("config.yaml"), "model:\n  default: "+m+"\n")
		for range 2 { // the second load is the memo's
			cfg, err := p.LoadConfig()
			require.NoError(t, err)
			require.Equal(t, m, cfg.Model.Default, "load after edit %d", i)
			require.Equal(t, "openai", cfg.Model.Provider)
		}
	}
	write(t, filepath.Join(h.Managed, "config.yaml"), "model:\n  provider: zzzzzz\n")
	cfg, err := p.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, "zzzzzz", cfg.Model.Provider, "an edit of the managed scope is seen at once")
	write(t, p.File("config.yaml"), "model: [\n")
	_, err = p.LoadConfig()
	require.ErrorIs(t, err, ErrBadConfig, "a broken file is an error every time, never a memoized Config")
}

// What LoadConfig hands out is the caller's own: changing it changes no
// later load.
func TestLoadConfigCallersShareNothing(t *testing.T) {
	t.Parallel()
	h := testHomes(t)
	p, err := h.Create("share")
	require.NoError(t, err)
	write(t, p.File("config.yaml"), "model:\n  default: m1\nagent:\n  api_max_retries: 5\nplugins:\n  enabled: [a, b]\nextra:\n  list: [1, {k: v}]\n")
	write(t, filepath.Join(h.Managed, "config.yaml"), "plugins:\n  host:\n    launcher: [x, y]\n") // the operator's key
	for range 3 {                                                                                  // the parse's Config, then the memo's, twice
		cfg, err := p.LoadConfig()
		require.NoError(t, err)
		require.Equal(t, 5, cfg.MaxRetries())
		require.Equal(t, []string{"a", "b"}, cfg.Plugins.Enabled)
		require.Equal(t, []string{"x", "y"}, []string(cfg.Plugins.Host.Launcher))
		require.Equal(t, "v", cfg.Raw["extra"].(map[string]any)["list"].([]any)[1].(map[string]any)["k"])
		require.NotContains(t, cfg.Raw, "new")
		*cfg.Agent.APIMaxRetries = 99
		cfg.Plugins.Enabled[0] = "changed"
		cfg.Plugins.Host.Launcher[0] = "changed"
		cfg.Raw["extra"].(map[string]any)["list"].([]any)[1].(map[string]any)["k"] = "changed"
		cfg.Raw["new"] = 1
	}
}

// cloneConfig copies every field of Config that refers to memory: a field
// added to Config that holds a pointer, slice or map fails here until
// cloneConfig copies it (and this list names it).
func TestCloneConfigCoversEveryReference(t *testing.T) {
	t.Parallel()
	copied := map[string]bool{
		"Agent.APIMaxRetries": true, "Memory.MemoryEnabled": true, "Plugins.Enabled": true,
		"Plugins.Host.Launcher": true, "Raw": true, "Ignored": true,
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := prefix + f.Name
			switch f.Type.Kind() {
			case reflect.Struct:
				walk(name+".", f.Type)
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func:
				require.True(t, copied[name], "Config.%s refers to memory: cloneConfig must copy it", name)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
}
