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
	// parentEnv makes the binary a server that starts a host for the
	// plugins folder it names, prints the host's pid, and waits.
	parentEnv = "TENANTCANARY_HOST_PARENT"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(hostEnv) == "1":
		if err := host.ServeChild(context.Background(), os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "plugin host:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case os.Getenv(parentEnv) != "":
		home := os.Getenv(parentEnv)
		m, err := host.New(host.Config{Profile: "orphan", Command: hostCommand(), Home: home,
			Env: []string{hostEnv + "=1", "HOME=" + home}, PluginsDir: home + "/plugins", Backend: &server{}})
		if err == nil {
			err = m.Start(context.Background())
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(m.PID())
		_, _ = bufio.NewReader(os.Stdin).ReadByte()
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
