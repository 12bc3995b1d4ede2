package host_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/tenantcanary/tenantcanary/host"
)

// The plugin host in these tests is this test binary re-executed: with
// hostEnv set it serves the protocol, with echoEnv it echoes lines (the
// bare-pipe floor of the benchmarks).
const (
	hostEnv = "TENANTCANARY_PLUGIN_HOST"
	echoEnv = "TENANTCANARY_PIPE_ECHO"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(hostEnv) == "1":
		if err := host.ServeChild(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "plugin host:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case os.Getenv(echoEnv) == "1":
		r := bufio.NewReader(os.Stdin)
		w := bufio.NewWriter(os.Stdout)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				os.Exit(0)
			}
			w.Write(line)
			w.Flush()
		}
	}
	os.Exit(m.Run())
}
