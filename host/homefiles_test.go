package host_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
	"github.com/tenantcanary/tenantcanary/agentd/homefs/hostile"
	"github.com/tenantcanary/tenantcanary/host"
	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// The server discovers a profile's model-provider plugins and fingerprints
// their files itself (ModelProviders: no host, no sandbox). A plugin.yaml,
// a source file or a cached profile that is a FIFO, a link to /dev/zero, a
// huge sparse file, a folder or a socket fails that discovery at once,
// naming the file, with no growth of the server's memory, and starts no
// child.
func TestModelProviderDiscoveryRefusesHostileFiles(t *testing.T) {
	rel := filepath.Join(pluginload.ModelProvidersDir, "hostmodel")
	for _, file := range []string{"plugin.yaml", "plugin.go", "extra.txt"} {
		for _, k := range hostile.Kinds {
			t.Run(file+"/"+string(k), func(t *testing.T) {
				home := newHome(t)
				dir := writePlugin(t, home, rel, "name: hostmodel\nkind: model-provider\n", modelPlugin)
				hostile.Plant(t, filepath.Join(dir, file), k)
				e := newEnv(t, home, nil)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				done := make(chan error, 1)
				go func() { _, err := e.m.ModelProviders(ctx); done <- err }()
				var err error
				select {
				case err = <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("model-provider discovery blocked on a %s %s", k, file)
				}
				runtime.ReadMemStats(&after)
				require.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(64<<20), "heap growth")
				if k == hostile.Dir && file != "plugin.yaml" {
					// A folder in a plugin folder is a folder: walked, not read.
					return
				}
				require.Error(t, err)
				require.Contains(t, err.Error(), file)
				require.Zero(t, e.m.Generation(), "no host started")
			})
		}
	}
}

// The same files under the home-special-files fault: a FIFO blocks the
// discovery (caught by the deadline; the writer then frees it).
func TestModelProviderDiscoveryFaultBlocks(t *testing.T) {
	t.Parallel()
	home := newHome(t)
	dir := writePlugin(t, home, filepath.Join(pluginload.ModelProvidersDir, "hostmodel"), "name: hostmodel\nkind: model-provider\n", modelPlugin)
	hostile.Plant(t, filepath.Join(dir, "plugin.yaml"), hostile.FIFO)
	e := newEnv(t, home, func(c *host.Config) { c.SpecialFiles = true })
	done := make(chan error, 1)
	go func() { _, err := e.m.ModelProviders(context.Background()); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("discovery returned (%v) under the fault: a FIFO should block it", err)
	case <-time.After(500 * time.Millisecond):
	}
	for {
		hostile.Release(filepath.Join(dir, "plugin.yaml"))
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond): // the reader may be between two opens
		}
	}
}

// In process (the operator's plugins.isolation: in_process), the
// interpreter reads a plugin's sources in the server: a plugin folder
// holding a hostile file is refused (its status says why) before any of
// it is read, promptly, and the load goes on.
func TestInProcessLoadRefusesHostileFiles(t *testing.T) {
	for _, k := range hostile.Kinds {
		if k == hostile.Dir {
			continue // a folder in a plugin folder is a folder
		}
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			home := newHome(t)
			dir := writePlugin(t, home, "p", "name: p\n", "package p\n")
			hostile.Plant(t, filepath.Join(dir, "plugin.go"), k)
			done := make(chan error, 1)
			var statuses []host.PluginStatus
			go func() {
				l, err := host.LoadInProcess(host.InProcessConfig{Profile: "p", Mode: "in_process", PluginsDir: filepath.Join(home, "plugins"),
					Home: homefs.Home{Dir: home}, Backend: &server{}})
				if err == nil {
					statuses, err = l.Plugins(context.Background())
				}
				done <- err
			}()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatalf("an in-process load blocked on a %s plugin.go", k)
			}
			require.Len(t, statuses, 1)
			require.Contains(t, statuses[0].Error, "plugin.go")
		})
	}
}
