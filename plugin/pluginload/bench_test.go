package pluginload_test

import (
	"testing"

	"github.com/tenantcanary/tenantcanary/plugin/pluginload"
)

// BenchmarkLoad interprets a small plugin, as a plugin host does for each
// of its plugins at every start.
func BenchmarkLoad(b *testing.B) {
	dir := writePlugin(b, probe)
	for b.Loop() {
		if err := pluginload.Load(dir, &recorder{}, pluginload.Options{Unrestricted: true}); err != nil {
			b.Fatal(err)
		}
	}
}
