package homefs_test

import (
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/tenantcanary/tenantcanary/agentd/homefs"
)

// BenchmarkHomeOpen is the cost of the layer per file operation: open and
// read a small home file (SOUL.md, 1 KiB) by plain path (os.Open, what
// agentd v0.3.0 did), through an os.Root opened for the call, and through
// homefs (its home opened for the call, O_NOFOLLOW at every step, a
// regular-file check). Each reports the p50 of its operations.
//
//	go test -run '^$' -bench HomeOpen -benchtime 20000x ./agentd/homefs
func BenchmarkHomeOpen(b *testing.B) {
	home := b.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "memories"), 0o700); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	for _, f := range []string{"SOUL.md", "memories/MEMORY.md"} {
		if err := os.WriteFile(filepath.Join(home, f), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		read func(name string) ([]byte, error)
	}{
		{"os.Open", func(name string) ([]byte, error) {
			f, err := os.Open(filepath.Join(home, name))
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return io.ReadAll(f)
		}},
		{"os.Root", func(name string) ([]byte, error) {
			r, err := os.OpenRoot(home)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			f, err := r.Open(name)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return io.ReadAll(f)
		}},
		{"homefs", func(name string) ([]byte, error) { return homefs.Home{Dir: home}.ReadFile(name) }},
	} {
		for _, file := range []string{"SOUL.md", "memories/MEMORY.md"} {
			b.Run(c.name+"/"+file, func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					start := time.Now()
					got, err := c.read(file)
					lat = append(lat, time.Since(start))
					if err != nil || len(got) != len(data) {
						b.Fatalf("read %s: %d bytes, %v", file, len(got), err)
					}
				}
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/op")
			})
		}
	}
}
